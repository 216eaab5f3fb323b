"""Find sub-agent definitions: the built-ins, then `<home>/subagents/*/SUBAGENT.md` (source `user`) and
`<workspace>/.picobot/subagents/*/SUBAGENT.md` (source `project`), in `subagents.sources` order; a
later source overrides an earlier one by name.

The `task` tool's description lists the types on every model call, so the files are re-read only
when a cheap stat fingerprint of the folders and files changes.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from picobot.config.workspace import inside
from picobot.domain.definition import decode
from picobot.subagents.definitions import BUILTINS, MAX_FILE_BYTES, Definition, DefinitionError, parse

log = logging.getLogger("picobot.subagents")

FILE_NAME = "SUBAGENT.md"


class SubagentCatalog:
    """Definitions of one home and workspace; safe to share between threads."""

    def __init__(self, home: Path, workspace: Path, sources: list[str]):
        self.dirs = [(s, home / "subagents" if s == "user" else workspace / ".picobot" / "subagents")
                     for s in sources]
        self.workspace = workspace
        self._lock = threading.Lock()
        self._fingerprint: tuple | None = None
        self._defs: dict[str, Definition] = dict(BUILTINS)
        self._warned: set[tuple] = set()

    def get(self, name: str) -> Definition | None:
        return self.all().get(name)

    def all(self) -> dict[str, Definition]:
        """Every usable definition by name, the built-ins first."""
        files = self._files()
        fingerprint = tuple((str(p), _stat(p)) for _, p in files)
        with self._lock:
            if fingerprint != self._fingerprint:
                self._defs = self._load(files)
                self._fingerprint = fingerprint
            return self._defs

    def _files(self) -> list[tuple[str, Path]]:
        found = []
        for source, folder in self.dirs:
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue  # no such folder: nothing defined there
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_dir():
                    continue
                path = Path(entry.path) / FILE_NAME
                if path.is_file():
                    found.append((source, path))
        return found

    def _load(self, files: list[tuple[str, Path]]) -> dict[str, Definition]:
        defs = dict(BUILTINS)
        for source, path in files:
            try:
                definition = self._read(source, path)
            except DefinitionError as exc:
                self._warn_once(path, exc.reason if exc.path is None else str(exc).removeprefix(f"{path}: "))
                continue
            defs[definition.name] = definition
        return defs

    def _read(self, source: str, path: Path) -> Definition:
        if source == "project" and not inside(path, self.workspace):
            raise DefinitionError("it leads outside the workspace (a symlink?)")
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise DefinitionError(f"it cannot be read ({exc.strerror or exc})") from None
        return parse(decode(data, max_bytes=MAX_FILE_BYTES), path.parent.name, source, str(path))

    def _warn_once(self, path: Path, why: str) -> None:
        key = (str(path), _stat(path))
        if key not in self._warned:
            self._warned.add(key)
            log.warning("sub-agent definition %s skipped: %s", path, why)


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, -1)
    return (st.st_mtime_ns, st.st_size)
