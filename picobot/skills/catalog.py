"""Discover skills, merge the sources by precedence, and keep the result until a file changes.

Each call first takes a fingerprint — the stat (mtime, size) of every source folder, every
SKILL.md in it and both state files — which costs a few `stat` calls and no reading. Only a
changed fingerprint re-reads and re-parses the files and rebuilds the index text, so asking
for the index on every model call is cheap.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

from picobot.config.schema import SkillsConfig
from picobot.errors import SkillError
from picobot.skills import frontmatter
from picobot.skills.builtin import release_builtins
from picobot.skills.frontmatter import MAX_SKILL_BYTES
from picobot.skills.index import build_index
from picobot.skills.paths import SCOPES, SkillPaths
from picobot.skills.state import read_disabled

log = logging.getLogger("picobot.skills")

SKILL_FILE = "SKILL.md"


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    source: str  # which of the six sources it came from (the winning one)
    folder: Path
    enabled: bool = True
    disabled_in: tuple[str, ...] = ()  # the scopes whose state file disables it
    cut: bool = False  # the file is over MAX_SKILL_BYTES; only its start is used
    overrides: tuple[str, ...] = ()  # lower sources that had a skill of the same name

    @property
    def path(self) -> Path:
        return self.folder / SKILL_FILE

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "description": self.description, "source": self.source,
                "path": str(self.path), "enabled": self.enabled, "disabled_in": list(self.disabled_in),
                "cut": self.cut, "overrides": list(self.overrides)}


@dataclass
class _View:
    fingerprint: tuple
    skills: dict[str, Skill] = field(default_factory=dict)  # every skill, enabled or not, by name
    index: str = ""


class SkillCatalog:
    """The skills of one PicoBot home and workspace; safe to share between threads."""

    def __init__(self, paths: SkillPaths, config: SkillsConfig):
        self.paths = paths
        self.config = config
        self.scans = 0  # how many times the files were actually read (tests watch it)
        self._view: _View | None = None
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._released = False

    # --- reading ----------------------------------------------------------------------

    def all(self) -> list[Skill]:
        """Every skill found, disabled ones too, by name."""
        return sorted(self._current().skills.values(), key=lambda s: s.name)

    def enabled(self) -> list[Skill]:
        return [s for s in self.all() if s.enabled]

    def get(self, name: str) -> Skill | None:
        return self._current().skills.get(name)

    def index_text(self, allowed: tuple[str, ...] | None = None) -> str:
        """The skill index for the system prompt ("" when no skill is enabled); `allowed`: only these."""
        view = self._current()
        if allowed is None:
            return view.index
        listed = sorted((s for s in view.skills.values() if s.enabled and s.name in allowed), key=lambda s: s.name)
        return build_index(listed, self.config.max_index_chars, self.config.max_listed_skills)

    def reload(self) -> list[Skill]:
        """Forget what was read and read everything again."""
        with self._lock:
            self._view = None
        return self.all()

    def read_body(self, skill: Skill) -> str:
        """The skill's instructions (its SKILL.md after the frontmatter), read now."""
        text, _ = _read_capped(skill.path)
        return frontmatter.parse(text).body

    def read_text(self, skill: Skill) -> str:
        """The whole SKILL.md as stored (cut at MAX_SKILL_BYTES)."""
        return _read_capped(skill.path)[0]

    # --- scanning ---------------------------------------------------------------------

    def _current(self) -> _View:
        with self._lock:
            self._release_once()
            fingerprint = self._fingerprint()
            if self._view is None or self._view.fingerprint != fingerprint:
                self._view = self._scan(fingerprint)
            return self._view

    def _release_once(self) -> None:
        if not self._released and "user" in self.config.sources:
            self._released = True
            release_builtins(self.paths.scope_dir("user"))

    def _fingerprint(self) -> tuple:
        parts: list[object] = [tuple(self.config.sources)]
        for source, root in self._roots():
            parts.append((source, _stat(root)))
            parts.extend((entry, _stat(root / entry / SKILL_FILE)) for entry in _entries(root))
        parts.extend(_stat(self.paths.state_file(scope)) for scope in SCOPES)
        return tuple(parts)

    def _roots(self) -> Iterator[tuple[str, Path]]:
        for source in dict.fromkeys(self.config.sources):  # a source named twice counts once
            root = self.paths.source_dir(source)
            if root is not None:
                yield source, root

    def _scan(self, fingerprint: tuple) -> _View:
        self.scans += 1
        found: dict[str, Skill] = {}
        for source, root in self._roots():
            for skill in self._scan_source(source, root):
                earlier = found.get(skill.name)
                overrides = (*earlier.overrides, earlier.source) if earlier else ()
                found[skill.name] = replace(skill, overrides=overrides)  # later sources win
        found = self._apply_state(found)
        enabled = sorted((s for s in found.values() if s.enabled), key=lambda s: s.name)
        index = build_index(enabled, self.config.max_index_chars, self.config.max_listed_skills)
        return _View(fingerprint, found, index)

    def _scan_source(self, source: str, root: Path) -> Iterator[Skill]:
        for entry in _entries(root):
            folder = root / entry
            if not (folder / SKILL_FILE).is_file():
                continue
            skill = self._load(source, folder)
            if skill is not None:
                yield skill

    def _load(self, source: str, folder: Path) -> Skill | None:
        path = folder / SKILL_FILE
        try:
            self.paths.confine(folder, source)
            text, cut = _read_capped(path)
            doc = frontmatter.parse(text)
            name = doc.name or frontmatter.check_name(folder.name)
        except SkillError as exc:
            self._warn_once(path, f"skipped: {exc}")
            return None
        except OSError as exc:
            self._warn_once(path, f"skipped: it cannot be read ({exc.strerror or exc})")
            return None
        if cut:
            self._warn_once(path, f"is over {MAX_SKILL_BYTES} bytes; only its first {MAX_SKILL_BYTES} bytes are used")
        return Skill(name, doc.description, source, folder, cut=cut)

    def _apply_state(self, found: dict[str, Skill]) -> dict[str, Skill]:
        off = {scope: read_disabled(self.paths.state_file(scope), self._warned) for scope in SCOPES}
        out = {}
        for name, skill in found.items():
            scopes = tuple(scope for scope in SCOPES if name in off[scope])
            out[name] = replace(skill, enabled=not scopes, disabled_in=scopes)
        return out

    def _warn_once(self, path: Path, why: str) -> None:
        # One warning per file and version of it: a broken file is not reported on every rescan.
        key = f"{path}:{_stat(path)}:{why}"
        if key not in self._warned:
            self._warned.add(key)
            log.warning("skill file %s %s", path, why)


def _entries(root: Path) -> list[str]:
    """Folder names under root that may hold a skill (hidden ones are skipped), sorted."""
    try:
        with os.scandir(root) as it:
            return sorted(e.name for e in it if not e.name.startswith(".") and _is_dir(e))
    except OSError:
        return []


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # follows a symlinked skill folder (a common way to share skills)
    except OSError:
        return False


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return st.st_mtime_ns, st.st_size


def _read_capped(path: Path) -> tuple[str, bool]:
    """The file's text (undecodable bytes replaced) up to MAX_SKILL_BYTES, and whether it was cut."""
    # O_NONBLOCK: a FIFO swapped in for the file must not hang the turn; only regular files are read
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SkillError("it is not a regular file")
        data = fh.read(MAX_SKILL_BYTES + 1)
    cut = len(data) > MAX_SKILL_BYTES
    text = data[:MAX_SKILL_BYTES].decode("utf-8", errors="replace")
    if cut:
        text += f"\n\n[... this SKILL.md is longer than {MAX_SKILL_BYTES} bytes; the rest is not shown ...]"
    return text.replace("\x00", "\ufffd"), cut
