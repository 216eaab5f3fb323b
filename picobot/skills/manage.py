"""Changing skills: create, update, delete, disable, enable — for the tool and the web page alike.

Writes go only to the two `.picobot` skill folders (scope `user` or `project`); a name is
always one folder name, and every path is checked to stay inside its folder after symlinks.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from picobot.errors import SkillError, SkillNotFound
from picobot.skills import frontmatter
from picobot.skills.catalog import SKILL_FILE, Skill, SkillCatalog
from picobot.skills.frontmatter import MAX_SKILL_BYTES, check_name
from picobot.skills.paths import SCOPES, Scope
from picobot.skills.state import write_disabled

WRITABLE_SOURCES: dict[str, Scope] = {"user": "user", "project": "project"}
_UNWRITABLE_TEXT = re.compile("[\ud800-\udfff\x00]")


def require(catalog: SkillCatalog, name: object) -> Skill:
    """The skill called name; SkillError naming the known ones otherwise."""
    skill = catalog.get(check_name(name))
    if skill is None:
        known = ", ".join(s.name for s in catalog.all()) or "none"
        raise SkillNotFound(f"No skill named {name!r}. Known skills: {known}.")
    return skill


def create(catalog: SkillCatalog, name: object, description: object, body: object, scope: Scope) -> Skill:
    """A new skill folder with its SKILL.md in the scope's folder."""
    name = check_name(name)
    if scope not in catalog.config.sources:
        raise SkillError(f"Scope {scope} writes to {catalog.paths.scope_dir(scope)}, but source {scope!r} is not in "
                         "skills.sources, so the skill would not be seen; use the other scope.")
    existing = catalog.get(name)
    if existing is not None and existing.source == scope:
        raise SkillError(f"A {scope} skill named {name!r} already exists ({existing.path}); use action update.")
    folder = _target_folder(catalog, scope, name)
    _write_skill_md(folder, name, frontmatter.render(name, _text(description, "description"), _text(body, "body")),
                    new=True)
    return _reloaded(catalog, name)


def update(catalog: SkillCatalog, name: object, description: object = None, body: object = None) -> Skill:
    """Replace the description and/or body of a skill in a writable folder."""
    skill = _writable(catalog, name)
    if description is None and body is None:
        raise SkillError("Nothing to update: give description, body, or both.")
    doc = frontmatter.parse(catalog.read_text(skill))
    text = frontmatter.render(skill.name, doc.description if description is None else _text(description, "description"),
                              doc.body if body is None else _text(body, "body"))
    _write_skill_md(skill.folder, skill.name, text, new=False)
    return _reloaded(catalog, skill.name)


def write_text(catalog: SkillCatalog, name: object, text: object) -> Skill:
    """Replace a skill's whole SKILL.md (the web editor); refused unless it parses and keeps the name."""
    skill = _writable(catalog, name)
    text = _text(text, "content")
    doc = _parse_new(text)
    if (doc.name or skill.folder.name) != skill.name:
        raise SkillError(f"The frontmatter name {doc.name!r} differs from the skill's name {skill.name!r}; "
                         "a rename is a new skill (create it, then delete this one).")
    _write_skill_md(skill.folder, skill.name, text, new=False)
    return _reloaded(catalog, skill.name)


def delete(catalog: SkillCatalog, name: object) -> Skill:
    """Remove a skill's folder (only from a writable folder)."""
    skill = _writable(catalog, name)
    if skill.folder.is_symlink():
        raise SkillError(f"{skill.folder} is a symlink; remove it yourself, skill_manage does not follow it.")
    try:
        shutil.rmtree(skill.folder)  # does not follow symlinks inside the folder
    except OSError as exc:
        raise SkillError(f"Cannot delete {skill.folder}: {exc.strerror or exc}") from None
    catalog.reload()
    return skill


def set_enabled(catalog: SkillCatalog, names: Iterable[object], enabled: bool, scope: Scope | None) -> list[str]:
    """Disable (in scope) or enable (in scope, or in both when None) every name at once; one reload."""
    wanted = list(dict.fromkeys(check_name(n) for n in names))
    if not wanted:
        raise SkillError("Give the skills in `names`, e.g. {\"names\": [\"pdf-forms\"]}.")
    unknown = [n for n in wanted if catalog.get(n) is None]
    if unknown:
        raise SkillNotFound(f"No skill named {', '.join(map(repr, unknown))}; nothing was changed. "
                         f"Known skills: {', '.join(s.name for s in catalog.all()) or 'none'}.")
    scopes: tuple[Scope, ...] = (scope,) if scope else SCOPES
    for one in scopes:
        _check_state_file(catalog, one)
        if enabled:
            write_disabled(catalog.paths.state_file(one), remove=wanted)
        else:
            write_disabled(catalog.paths.state_file(one), add=wanted)
    catalog.reload()
    return wanted


# --- checks -------------------------------------------------------------------------


def _writable(catalog: SkillCatalog, name: object) -> Skill:
    skill = require(catalog, name)
    scope = WRITABLE_SOURCES.get(skill.source)
    if scope is None:
        raise SkillError(
            f"Skill {skill.name!r} comes from {skill.folder.parent} (source {skill.source}), which is not "
            "changed from here. Create a skill of the same name in scope project to override it.")
    _target_folder(catalog, scope, skill.name)  # still inside its folder after symlinks
    return skill


def _target_folder(catalog: SkillCatalog, scope: Scope, name: str) -> Path:
    root = catalog.paths.scope_dir(scope)
    catalog.paths.confine(root, scope)
    folder = root / name  # one folder name (check_name), so it cannot climb out by itself
    if catalog.paths.is_project(scope):
        catalog.paths.confine(folder, scope)  # nor through a symlink the model planted in the workspace
    return folder


def _check_state_file(catalog: SkillCatalog, scope: Scope) -> None:
    path = catalog.paths.state_file(scope)
    catalog.paths.confine(path.parent, scope)
    if path.is_symlink():
        raise SkillError(f"{path} is a symlink; skill state is not written through it.")


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise SkillError(f"{what} must be text, not {type(value).__name__}.")
    if _UNWRITABLE_TEXT.search(value):
        raise SkillError(f"{what} contains a NUL or a lone surrogate character; remove it.")
    if what == "description" and not value.strip():
        raise SkillError("description must say what the skill does and when to use it; it is empty.")
    return value


def _write_skill_md(folder: Path, name: str, text: str, new: bool) -> None:
    data = text.encode("utf-8")
    if len(data) > MAX_SKILL_BYTES:
        raise SkillError(f"The SKILL.md would be {len(data)} bytes; the limit is {MAX_SKILL_BYTES}. "
                         "Move reference material into other files of the skill.")
    _parse_new(text)  # never store a file the catalog would skip
    path = folder / SKILL_FILE
    if path.is_symlink():
        raise SkillError(f"{path} is a symlink; skill_manage does not write through it.")
    try:
        folder.mkdir(parents=True, exist_ok=not new)
    except FileExistsError:
        raise SkillError(f"{folder} already exists; choose another name or update that skill.") from None
    except OSError as exc:
        raise SkillError(f"Cannot create {folder}: {exc.strerror or exc}") from None
    _atomic_write(path, data)


def _parse_new(text: str) -> frontmatter.SkillDoc:
    try:
        return frontmatter.parse(text)
    except SkillError as exc:
        raise SkillError(f"Not a valid SKILL.md: {exc}. It must start with '---', a 'description: ...' line, "
                         "and '---'.") from None


def _atomic_write(path: Path, data: bytes) -> None:
    try:
        fd, tmp = tempfile.mkstemp(prefix=".SKILL-", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise SkillError(f"Cannot write {path}: {exc.strerror or exc}") from None


def _reloaded(catalog: SkillCatalog, name: str) -> Skill:
    catalog.reload()
    skill = catalog.get(name)
    if skill is None:  # cannot happen unless the file vanished at once
        raise SkillError(f"Skill {name!r} was written but could not be read back.")
    return skill
