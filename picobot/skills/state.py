"""`skill-state.json`: the names a scope has disabled (`{"disabled_skills": [...]}`).

Both scopes are read and merged: a skill disabled in either is hidden everywhere. A file
that cannot be read counts as empty (with one warning); other keys in it are kept on write.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

from picobot.errors import SkillError

log = logging.getLogger("picobot.skills")

MAX_STATE_BYTES = 256 * 1024
KEY = "disabled_skills"


def read_disabled(path: Path, warned: set[str] | None = None) -> set[str]:
    """The disabled names in one state file (empty when the file is missing or unreadable)."""
    data = _load(path, warned)
    names = data.get(KEY)
    if not isinstance(names, list):
        return set()
    return {n for n in names if isinstance(n, str)}


def write_disabled(path: Path, add: Iterable[str] = (), remove: Iterable[str] = ()) -> set[str]:
    """Add and remove names in one state file, atomically; returns the new disabled set."""
    data = _load(path, None)
    current = read_disabled(path)
    new = (current | set(add)) - set(remove)
    data[KEY] = sorted(new)
    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".skill-state-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise SkillError(f"Cannot write {path}: {exc.strerror or exc}") from None
    return new


def _load(path: Path, warned: set[str] | None) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        _warn(warned, path, f"cannot be read ({exc.strerror or exc})")
        return {}
    try:
        if len(raw) > MAX_STATE_BYTES:
            raise ValueError("too large")
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        _warn(warned, path, f'is not a JSON object like {{"{KEY}": ["name"]}} under {MAX_STATE_BYTES} bytes')
        return {}
    if not isinstance(data, dict):
        _warn(warned, path, f'is not a JSON object like {{"{KEY}": ["name"]}}')
        return {}
    return data


def _warn(warned: set[str] | None, path: Path, why: str) -> None:
    key = f"{path}:{why}"
    if warned is not None and key in warned:
        return
    if warned is not None:
        warned.add(key)
    log.warning("skill state file %s %s; it is ignored", path, why)
