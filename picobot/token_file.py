"""Where the terminal keeps its device token: readable without the pairing and storage stack.

`picobot chat -m` on the server reads it on every run; importing SQLAlchemy just to find a
file would cost most of the command's time.
"""

from __future__ import annotations

from pathlib import Path


def cli_token_path(home: Path) -> Path:
    return home / "cli" / "token"


def read_cli_token(home: Path) -> str | None:
    """The stored token, or None when there is none yet (or it cannot be read)."""
    try:
        return cli_token_path(home).read_text().strip() or None
    except OSError:
        return None
