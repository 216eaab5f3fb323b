"""Skills shipped with PicoBot, released into the user's skill folder when absent.

A released skill is the user's from then on: a folder that already exists (edited, or even
emptied) is never written again. To hide a built-in skill, disable it; a deleted one comes back
at the next start.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger("picobot.skills")

BUILTIN_DIR = Path(__file__).parent


def builtin_names() -> list[str]:
    return sorted(p.name for p in BUILTIN_DIR.iterdir() if (p / "SKILL.md").is_file())


def release_builtins(target_root: Path) -> list[str]:
    """Copy each built-in skill missing from target_root there; returns the names copied."""
    copied = []
    for name in builtin_names():
        if _release(BUILTIN_DIR / name, target_root / name):
            copied.append(name)
    return copied


def _release(src: Path, dest: Path) -> bool:
    if os.path.lexists(dest):  # the user's (even a dangling symlink or an emptied folder)
        return False
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
        shutil.copytree(src, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        try:
            os.rename(staging, dest)  # atomic: two processes starting at once cannot mix their copies
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)  # another process released it first
            return False
    except OSError as exc:
        log.warning("could not release the built-in skill %s to %s: %s", src.name, dest, exc.strerror or exc)
        return False
    log.info("released the built-in skill %s to %s", src.name, dest)
    return True
