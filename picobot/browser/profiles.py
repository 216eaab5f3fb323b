"""Named browser profiles: folders under `<home>/browser_profiles/<id>`, each with a label file.

Only ids of [A-Za-z0-9_-]{1,64} name a profile, so a profile path never leaves that folder; the
folder itself is refused when it is a symlink.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

from picobot.errors import ToolError

PROFILE_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
FOLDER = "browser_profiles"
META = "profile.json"
MAX_LABEL_CHARS = 200
MAX_PROFILES = 100


def check_id(value: Any) -> str:
    if not isinstance(value, str) or not PROFILE_ID.fullmatch(value):
        raise ToolError("A profile id is 1 to 64 letters, digits, '_' or '-'.")
    return value


def root(home: Path) -> Path:
    folder = home / FOLDER
    if folder.is_symlink():
        raise ToolError(f"{FOLDER} is a symlink; refusing to use it.")
    return folder


def profile_dir(home: Path, profile: str, create: bool = False) -> Path:
    folder = root(home) / check_id(profile)
    if folder.is_symlink():
        raise ToolError(f"The profile {profile!r} is a symlink; refusing to use it.")
    if create and not folder.exists():
        if len(list_ids(home)) >= MAX_PROFILES:
            raise ToolError(f"There are already {MAX_PROFILES} profiles; delete one first.")
        folder.mkdir(parents=True)
        write_meta(folder, {"label": "", "created": time.time()})
    return folder


def list_ids(home: Path) -> list[str]:
    folder = root(home)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir()
                  if p.is_dir() and not p.is_symlink() and PROFILE_ID.fullmatch(p.name))


def read_meta(folder: Path) -> dict[str, Any]:
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def write_meta(folder: Path, meta: dict[str, Any]) -> None:
    (folder / META).write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")


def check_label(value: Any) -> str:
    if not isinstance(value, str) or len(value) > MAX_LABEL_CHARS:
        raise ToolError(f"A label is text of at most {MAX_LABEL_CHARS} characters.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError("The label is not valid Unicode text.") from None
    return value.replace("\x00", "")


def create(home: Path, profile: str, label: str) -> str:
    folder = profile_dir(home, profile)
    if folder.exists():
        raise ToolError(f"A profile {profile!r} already exists.")
    folder = profile_dir(home, profile, create=True)
    write_meta(folder, {**read_meta(folder), "label": label})
    return f"Created profile {profile}."


def set_label(home: Path, profile: str, label: str) -> str:
    folder = _existing(home, profile)
    write_meta(folder, {**read_meta(folder), "label": label})
    return f"Labelled profile {profile}."


def listing(home: Path) -> str:
    ids = list_ids(home)
    if not ids:
        return "No browser profiles."
    lines = []
    for pid in ids:
        label = read_meta(root(home) / pid).get("label") or ""
        lines.append(f"{pid}" + (f": {label}" if label else ""))
    return "\n".join(lines)


def delete(home: Path, profile: str) -> str:
    folder = _existing(home, profile)
    shutil.rmtree(folder)  # rmtree does not follow symlinks inside the folder
    return f"Deleted profile {profile}."


def _existing(home: Path, profile: str) -> Path:
    folder = profile_dir(home, profile)
    if not folder.is_dir():
        raise ToolError(f"There is no profile {profile!r}.")
    return folder
