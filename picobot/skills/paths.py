"""Where skills and their on/off state live: six source folders, two writable scopes.

    source           folder                                   (lowest precedence first)
    user             $PICOBOT_HOME/skills/
    user_agent       ~/.agents/skills/
    user_openclaw    ~/.openclaw/skills/
    project          <workspace>/.picobot/skills/
    project_agent    <workspace>/.agents/skills/
    project_openclaw <workspace>/.openclaw/skills/

`skill_manage` and the web page write only to the two `.picobot` folders: scope `user`
is the first, scope `project` the fourth. The model can write into the workspace, so every
project path is checked to stay inside it after symlinks are followed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from picobot.config.workspace import inside  # noqa: F401 (re-exported)
from picobot.errors import SkillError

if TYPE_CHECKING:
    from picobot.config import Config

Scope = Literal["user", "project"]
SCOPES: tuple[Scope, ...] = ("user", "project")
STATE_FILE = "skill-state.json"

_USER_HOME_DIRS = {"user_agent": ".agents", "user_openclaw": ".openclaw"}
_PROJECT_DIRS = {"project": ".picobot", "project_agent": ".agents", "project_openclaw": ".openclaw"}


@dataclass(frozen=True)
class SkillPaths:
    home: Path  # the PicoBot home
    user_home: Path | None  # the OS user's home (~); None when unknown
    workspace: Path

    @classmethod
    def from_config(cls, cfg: Config) -> SkillPaths:
        user_home = Path(os.path.expanduser("~"))
        return cls(cfg.home, user_home if user_home.is_absolute() else None, cfg.workspace_path())

    def source_dir(self, source: str) -> Path | None:
        """The folder of a source, or None when it cannot exist here (no user home)."""
        if source == "user":
            return self.home / "skills"
        if source in _USER_HOME_DIRS:
            return self.user_home / _USER_HOME_DIRS[source] / "skills" if self.user_home else None
        if source in _PROJECT_DIRS:
            return self.workspace / _PROJECT_DIRS[source] / "skills"
        raise ValueError(f"unknown skill source {source!r}")

    def scope_dir(self, scope: Scope) -> Path:
        """The folder skills of a scope are written to."""
        return self.home / "skills" if scope == "user" else self.workspace / ".picobot" / "skills"

    def state_file(self, scope: Scope) -> Path:
        return self.home / STATE_FILE if scope == "user" else self.workspace / ".picobot" / STATE_FILE

    def is_project(self, source: str) -> bool:
        return source in _PROJECT_DIRS

    def confine(self, path: Path, scope_or_source: str) -> Path:
        """path, resolved; SkillError when a project path leaves the workspace through a symlink."""
        resolved = _resolve(path)
        if self.is_project(scope_or_source):
            root = _resolve(self.workspace)
            if resolved != root and not resolved.is_relative_to(root):
                raise SkillError(f"{path} leads outside the workspace (a symlink?); skills there are not used.")
        return resolved


def _resolve(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        raise SkillError(f"{path} cannot be resolved (a symlink loop?).") from None


