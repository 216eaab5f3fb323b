"""Where the file and shell tools work: a folder apart from PicoBot's own secrets.

The home holds config.json, .env, the database and tokens; a workspace inside it would put
them one `cat ../.env` away from the model. So the default workspace is a sibling of the
home, `$PICOBOT_WORKSPACE` moves it anywhere, and `tools.workspace` names it outright.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

log = logging.getLogger("picobot.workspace")

ENV_VAR = "PICOBOT_WORKSPACE"
LEGACY_NAME = "workspace"
# Written into the home once the note about an old in-home workspace has been logged.
LEGACY_NOTE_MARKER = ".workspace-note-shown"
_SAFE_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
_MAX_NAME = 64
# Names that end like a hashed one are hashed too, so no raw id can pose as another's folder.
_HASHED_TAIL = re.compile(r"-[0-9a-f]{12}$")


@dataclass(frozen=True)
class WorkspaceChoice:
    path: Path
    source: str  # "config", "env", "legacy" or "default"


def choose_workspace(home: Path, configured: str | None, environ: Mapping[str, str] | None = None) -> WorkspaceChoice:
    """The workspace for this home: configured > $PICOBOT_WORKSPACE > old in-home folder > sibling."""
    env = os.environ if environ is None else environ
    if configured is not None and configured.strip():
        path = Path(configured).expanduser()
        return WorkspaceChoice(path if path.is_absolute() else home / path, "config")
    from_env = (env.get(ENV_VAR) or "").strip()
    if from_env:
        return WorkspaceChoice(Path(from_env).expanduser().absolute(), "env")
    legacy = home / LEGACY_NAME
    if _non_empty_dir(legacy):
        return WorkspaceChoice(legacy, "legacy")
    return WorkspaceChoice(home.parent / f"{home.name}-workspace", "default")


def _non_empty_dir(path: Path) -> bool:
    try:
        return path.is_dir() and any(path.iterdir())
    except OSError:
        return False


def overlaps_home(workspace: Path, home: Path) -> bool:
    """True when the workspace holds the home or lies inside it (either way the model reaches secrets)."""
    ws, h = _real(workspace), _real(home)
    return ws == h or ws.is_relative_to(h) or h.is_relative_to(ws)


def _real(path: Path) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):
        return path.expanduser().absolute()


def warn_if_unsafe(choice: WorkspaceChoice, home: Path) -> str | None:
    """Log (and return) the start-up warning this workspace deserves, if any."""
    if choice.source == "legacy":
        return _legacy_note(choice.path, home)
    if overlaps_home(choice.path, home):
        message = (
            f"The workspace {choice.path} overlaps the PicoBot home {home}: the file and shell tools "
            "can reach config.json, .env, the database and tokens there. Set tools.workspace (or "
            f"{ENV_VAR}) to a folder outside {home}."
        )
        log.warning("%s", message)
        return message
    return None


def _legacy_note(workspace: Path, home: Path) -> str | None:
    marker = home / LEGACY_NOTE_MARKER
    if marker.exists():
        return None
    target = home.parent / f"{home.name}-workspace"
    message = (
        f"Using the old workspace {workspace}, inside the PicoBot home: `bash` and the file tools "
        "can read config.json, .env and the database next to it, unless the bubblewrap sandbox "
        f"hides them. To move it: stop PicoBot, `mv {workspace} {target}` (or set tools.workspace / "
        f"{ENV_VAR} to a folder outside {home}), then start again. This note is shown once."
    )
    log.warning("%s", message)
    try:
        marker.write_text("The note about the old in-home workspace was shown.\n", encoding="utf-8")
    except OSError as exc:
        log.debug("could not write %s: %s", marker, exc.strerror)
    return message


def chat_workspace(root: Path, channel: str, chat_id: str) -> Path:
    """`<root>/<channel>/<chat id>`, each part one safe folder name (no `..`, no separators)."""
    return root / safe_name(channel) / safe_name(chat_id)


def safe_name(raw: str) -> str:
    """A filesystem-safe folder name for raw; distinct raw values keep distinct names."""
    cleaned = _SAFE_CHARS.sub("_", raw.encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
    cleaned = cleaned.lstrip(".")[:_MAX_NAME]
    if cleaned == raw and cleaned and not _HASHED_TAIL.search(cleaned):
        return cleaned
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{cleaned or 'chat'}-{digest}"


def inside(path: Path, root: Path) -> bool:
    """True when the resolved path is root or below it."""
    try:
        resolved, base = path.resolve(), root.resolve()
    except (OSError, RuntimeError):
        return False
    return resolved == base or resolved.is_relative_to(base)
