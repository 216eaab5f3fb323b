"""Where the terminal keeps its device token, and how it is read, written and locked.

Readable without the pairing and storage stack: `picobot chat -m` on the server reads it on every
run, and importing SQLAlchemy just to find a file would cost most of the command's time.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def cli_token_path(home: Path) -> Path:
    return home / "cli" / "token"


def read_cli_token(home: Path) -> str | None:
    """The stored token, or None when there is none yet (or it cannot be read)."""
    try:
        return cli_token_path(home).read_text().strip() or None
    except OSError:
        return None


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the token file's lock: two terminals started at once must not both issue a token (one
    would be orphaned)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_private(path: Path, text: str) -> None:
    """Replace `path` with `text`, readable by the owner only (mode 0600), never half-written."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
