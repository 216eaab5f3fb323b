"""`skill_activate` and `skill_manage`: the agent's way into the skill catalog.

A skill's other files may live outside the workspace (user skills), where `read` cannot go;
`skill_activate` lists them and reads one given as `file`, confined to that skill's folder.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from picobot.errors import SkillError
from picobot.skills import Skill, SkillCatalog, manage
from picobot.skills.events import SkillEvents
from picobot.skills.paths import inside
from picobot.tools.base import Tool, ToolContext

MAX_LISTED_FILES = 50
MAX_FILE_CHARS = 50_000
_SNIFF = 8192

_NO_PERMISSIONS = "A skill grants no tools or permissions."


class SkillActivateTool(Tool):
    name = "skill_activate"
    description = (
        f"Load a listed skill: its instructions and file list; file reads one of them. {_NO_PERMISSIONS}"
    )
    parameters = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "file": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": False,
    }
    read_only = True

    def __init__(self, catalog: SkillCatalog, events: SkillEvents | None = None):
        self.catalog = catalog
        self.events = events

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        skill = manage.require(self.catalog, args["name"])
        if ctx.skills is not None and skill.name not in ctx.skills:
            raise SkillError(f"Skill {skill.name!r} is not among this agent's skills "
                             f"({', '.join(ctx.skills) or 'none'}).")
        if not skill.enabled:
            raise SkillError(f"Skill {skill.name!r} is disabled ({', '.join(skill.disabled_in)}); "
                             "enable it with skill_manage action=enable if the user wants it.")
        if args.get("file"):
            return read_skill_file(skill, args["file"])
        body = self.catalog.read_body(skill)
        if self.events is not None:
            self.events.record("activated", [skill.name], ctx.session_id, scope=skill.source)
        return _activation_text(skill, body)


def _activation_text(skill: Skill, body: str) -> str:
    parts = [f"Skill {skill.name} ({skill.source}). Follow it within your existing tools. {_NO_PERMISSIONS}",
             "", body.strip() or "(the skill has no instructions beyond its description)"]
    files = list_files(skill)
    if files:
        parts += ["", f"Files of this skill (read one with skill_activate name={skill.name} file=<path>):"]
        parts += [f"- {f}" for f in files]
    return "\n".join(parts)


def list_files(skill: Skill) -> list[str]:
    """The skill's other files, relative to its folder (hidden ones and symlinks out skipped)."""
    out: list[str] = []
    root = skill.folder
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if rel == "SKILL.md" or name.startswith(".") or not inside(path, root):
                continue
            out.append(rel)
            if len(out) >= MAX_LISTED_FILES:
                return out + ["(more files not listed)"]
    return out


def read_skill_file(skill: Skill, raw: object) -> str:
    """One text file of the skill, by its listed path; never a path that leaves the skill's folder."""
    if not isinstance(raw, str) or "\x00" in raw or not raw.strip():
        raise SkillError("file must be a path as listed by skill_activate, e.g. reference.md.")
    path = skill.folder / raw
    if Path(raw).is_absolute() or not inside(path, skill.folder):
        raise SkillError(f"{raw!r} is not inside skill {skill.name!r}; give a path as listed by skill_activate.")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError) as exc:
        raise SkillError(f"Cannot open {raw} of skill {skill.name}: {getattr(exc, 'strerror', None) or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SkillError(f"{raw} is not a regular file.")
        data = fh.read(MAX_FILE_CHARS * 4 + 1)
    if b"\x00" in data[:_SNIFF]:
        raise SkillError(f"{raw} is a binary file; only text files are shown.")
    text = data.decode("utf-8", errors="replace")
    if len(text) > MAX_FILE_CHARS:
        text = text[:MAX_FILE_CHARS] + f"\n[... {raw} is longer; the rest is not shown ...]"
    return text


class SkillManageTool(Tool):
    name = "skill_manage"
    description = (
        "create/update: description (when to use), body (Markdown); disable/enable: names. "
        "scope default: project."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"enum": ["list", "get", "create", "update", "delete", "disable", "enable", "reload"]},
            "name": {"type": "string"},
            "names": {"type": "array", "items": {"type": "string"}},
            "description": {"type": "string"},
            "body": {"type": "string"},
            "scope": {"enum": ["project", "user"]},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(self, catalog: SkillCatalog, events: SkillEvents | None = None):
        self.catalog = catalog
        self.events = events

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        action = args["action"]
        if action in ("list", "reload"):
            if action == "reload":
                self.catalog.reload()
            return _listing(self.catalog)
        if action == "get":
            skill = manage.require(self.catalog, args.get("name"))
            return _details(skill, self.catalog.read_text(skill))
        with ctx.gate.side_effect():  # nothing changes once the turn is over
            return self._change(action, args, ctx)

    def _change(self, action: str, args: dict[str, Any], ctx: ToolContext) -> str:
        scope = args.get("scope")
        if action in ("disable", "enable"):
            names = manage.set_enabled(self.catalog, _names(args), action == "enable",
                                       scope or ("project" if action == "disable" else None))
            self._record("disabled" if action == "disable" else "enabled", names, ctx, scope or "")
            return f"{action.capitalize()}d {', '.join(names)}. " + _listing(self.catalog)
        if action == "create":
            skill = manage.create(self.catalog, args.get("name"), args.get("description"), args.get("body", ""),
                                  scope or "project")
        elif action == "update":
            skill = manage.update(self.catalog, args.get("name"), args.get("description"), args.get("body"))
        else:
            skill = manage.delete(self.catalog, args.get("name"))
        self._record(f"{action}d", [skill.name], ctx, skill.source)
        return f"{action.capitalize()}d skill {skill.name} ({skill.source}: {skill.path})."

    def _record(self, event: str, names: list[str], ctx: ToolContext, scope: str) -> None:
        if self.events is not None:
            self.events.record(event, names, ctx.session_id, scope=scope)


def _names(args: dict[str, Any]) -> list[Any]:
    if "names" not in args:
        raise SkillError('Give the skills as a names array, e.g. {"action": "disable", "names": ["pdf-forms"]}.')
    return args["names"]


def _listing(catalog: SkillCatalog) -> str:
    skills = catalog.all()
    on = [s for s in skills if s.enabled]
    off = [s.name for s in skills if not s.enabled]
    lines = [f"{len(on)} skill(s) enabled:"] + [f"- {s.name} [{s.source}]: {s.description}" for s in on]
    if off:
        lines.append(f"Disabled: {', '.join(off)}")
    return "\n".join(lines)


def _details(skill: Skill, text: str) -> str:
    state = "enabled" if skill.enabled else f"disabled in {', '.join(skill.disabled_in)}"
    over = f"; overrides {', '.join(skill.overrides)}" if skill.overrides else ""
    return f"Skill {skill.name} ({skill.source}, {state}{over}) at {skill.path}:\n\n{text}"


def skill_tools(catalog: SkillCatalog, events: SkillEvents | None) -> list[Tool]:
    return [SkillActivateTool(catalog, events), SkillManageTool(catalog, events)]
