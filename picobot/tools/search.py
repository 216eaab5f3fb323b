"""`file_search` and `content_search`: find files by glob and lines by regex, inside the workspace only.

Both walk the workspace the same way (`walk`): folders in name order, symlinked folders never
entered, a symlinked file listed only when it points inside the workspace, special files (FIFOs,
sockets, devices) ignored. A regex runs under the `regex` package's match timeout, so a
catastrophic pattern ends with the search's time budget instead of holding a worker thread.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import regex

from picobot.errors import ToolError
from picobot.tools.base import Tool, ToolContext
from picobot.tools.files import _OPEN_FLAGS, display_path, resolve_path, workspace_root

MAX_FILES = 200
MAX_MATCHES = 200
MAX_OUTPUT_CHARS = 20_000
MAX_LINE_CHARS = 300
MAX_CONTEXT = 5
MAX_PATTERN_CHARS = 1_000
DEFAULT_MAX_FILE_BYTES = 2_000_000
DEFAULT_TIMEOUT_SECS = 20.0
_SNIFF_BYTES = 8192
# Folders nobody means when searching a project; named as `path`, they are searched.
_MAGIC = re.compile(r"[*?\[]")
_REPEATED_STARS = re.compile(r"(?:\*\*/)+")
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".tox"})


class FileSearchTool(Tool):
    name = "file_search"
    description = "Find workspace files by glob, newest first. Without /, it matches names at any depth."
    parameters = {
        "type": "object",
        "properties": {"pattern": {"type": "string", "description": "e.g. src/**/*.py"}},
        "required": ["pattern"],
        "additionalProperties": False,
    }
    read_only = True

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.cancel.raise_if_cancelled()
        pattern = _required_text(args, "pattern")
        root = workspace_root(ctx)
        base, glob = split_glob(pattern, root)
        budget = _Budget(ctx)
        found = [(mtime, path) for path, mtime in walk(base, root, budget) if glob.matches(_rel(path, base), budget)]
        found.sort(key=lambda item: (-item[0], str(item[1])))
        lines = [display_path(path, root) for _, path in found[:MAX_FILES]]
        if len(found) > MAX_FILES:
            lines.append(f"[{len(found) - MAX_FILES} more files not shown; narrow the pattern]")
        if budget.ran_out:
            lines.append(f"[stopped after {budget.limit:g} s; the list may be incomplete]")
        return "\n".join(lines) if found else _nothing("No files match", pattern, budget)


class ContentSearchTool(Tool):
    name = "content_search"
    description = "Search workspace text files by regex (Python re; (?i) ignores case)."
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Regex."},
            "glob": {"type": "string", "description": "e.g. src/**/*.py"},
            "context": {"type": "integer", "description": "Lines around."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    read_only = True

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.cancel.raise_if_cancelled()
        pattern = _required_text(args, "pattern")
        compiled = compile_pattern(pattern)
        context = _context(args)
        root = workspace_root(ctx)
        glob = _text(args, "glob")
        base, matcher = split_glob(glob, root) if glob else (root, _Glob("**"))
        search = _Search(compiled, context, root, _Budget(ctx), _max_file_bytes(ctx))
        for path, _ in walk(base, root, search.budget):
            if matcher.matches(_rel(path, base), search.budget) and not search.file(path):
                break
        return search.report(pattern)


# --- arguments ------------------------------------------------------------------------------


def _required_text(args: dict[str, Any], key: str) -> str:
    value = _text(args, key, required=True)
    if value is None:  # _text refuses a missing required value; this tells the type checker so
        raise ToolError(f"'{key}' must be a non-empty string.")
    return value


def _text(args: dict[str, Any], key: str, required: bool = False) -> str | None:
    value = args.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise ToolError(f"'{key}' must be a non-empty string.")
    if len(value) > MAX_PATTERN_CHARS:
        raise ToolError(f"'{key}' is {len(value)} characters long; keep it under {MAX_PATTERN_CHARS}.")
    if "\x00" in value:
        raise ToolError(f"'{key}' contains a NUL character.")
    try:
        value.encode("utf-8")
    except UnicodeError:
        raise ToolError(f"'{key}' is not valid text (it holds a lone surrogate).") from None
    return value


def _context(args: dict[str, Any]) -> int:
    """Lines around each match, at most MAX_CONTEXT (more is cut down, not refused)."""
    value = args.get("context", 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ToolError(f"'context' must be a whole number from 0 to {MAX_CONTEXT}.")
    return min(value, MAX_CONTEXT)


def _max_file_bytes(ctx: ToolContext) -> int:
    value = ctx.settings.get("search_max_file_bytes", DEFAULT_MAX_FILE_BYTES)
    return value if isinstance(value, int) and value > 0 else DEFAULT_MAX_FILE_BYTES


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """The regex in Python `re` syntax (regex.V0), ^ and $ at line ends; ToolError saying what is wrong."""
    try:
        return regex.compile(pattern, regex.V0 | regex.MULTILINE)
    except (regex.error, OverflowError, RecursionError, ValueError) as exc:
        raise ToolError(f"Invalid regular expression {pattern[:80]!r}: {exc}") from None


# --- globs ----------------------------------------------------------------------------------


def split_glob(pattern: str, root: Path) -> tuple[Path, _Glob]:
    """The folder (or file) to walk and a predicate on paths relative to it.

    The glob's leading components without wildcards name the folder, confined like the file tools'
    paths; the rest matches below it (`**` spans folders). A glob without `/` matches names at any depth.
    """
    parts = pattern.split("/")
    if len(parts) == 1:
        return root, _Glob("**/" + pattern)
    literal: list[str] = []
    for part in parts:
        if _MAGIC.search(part):
            break
        literal.append(part)
    rest = "/".join(parts[len(literal):])
    base_raw = "/".join(literal) or ("/" if pattern.startswith("/") else ".")
    base = resolve_path(base_raw, root)
    if not base.exists():
        raise ToolError(f"Not found: {base_raw}")
    return base, _Glob(rest or "**")


class _Glob:
    """A glob as a regex over relative POSIX paths, matched under the search's time budget: a glob
    like `*a*a*a…b` backtracks for ages on a long name, and only a timeout bounds that."""

    def __init__(self, glob: str) -> None:
        self.compiled = _glob_regex(glob)

    def matches(self, rel: str, budget: _Budget) -> bool:
        left = budget.remaining()
        if left <= 0:
            return False
        try:
            return self.compiled.fullmatch(rel, timeout=left) is not None
        except TimeoutError:
            budget.ran_out = True
            return False


@lru_cache(maxsize=64)
def _glob_regex(pattern: str) -> regex.Pattern[str]:
    pattern = _REPEATED_STARS.sub("**/", pattern)  # **/**/ is **/ (and would nest the backtracking)
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := _class_end(pattern, i)) > 0:
            body = pattern[i + 1:end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^/" if negate else "") + body.replace("\\", "\\\\").replace("[", "\\[") + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    try:
        return regex.compile("".join(out), regex.V0 | regex.DOTALL)
    except (regex.error, RecursionError, OverflowError) as exc:
        raise ToolError(f"Invalid glob pattern {pattern[:80]!r}: {exc}") from None


def _class_end(pattern: str, start: int) -> int:
    i = start + 1
    if i < len(pattern) and pattern[i] in "!^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    end = pattern.find("]", i)
    return end if end > start + 1 and "/" not in pattern[start:end] else -1


def _rel(path: Path, base: Path) -> str:
    return path.name if path == base else path.relative_to(base).as_posix()


# --- the walk -------------------------------------------------------------------------------


class _Budget:
    """The search's time limit and the turn's /stop."""

    def __init__(self, ctx: ToolContext) -> None:
        value = ctx.settings.get("search_timeout_secs", DEFAULT_TIMEOUT_SECS)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 86_400
        self.limit = float(value) if ok else DEFAULT_TIMEOUT_SECS
        self.deadline = time.monotonic() + self.limit
        self.cancel = ctx.cancel
        self.ran_out = False

    def remaining(self) -> float:
        """Seconds left; raises TurnCancelled on /stop; sets ran_out at the deadline."""
        self.cancel.raise_if_cancelled()
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.ran_out = True
        return left


def walk(base: Path, root: Path, budget: _Budget) -> Iterator[tuple[Path, float]]:
    """(path, mtime) of each regular file under base (or base itself), confined to root."""
    if base.is_file():
        single = _regular(base, root)
        if single is not None:
            yield single
        return
    stack = [base]
    while stack:
        if budget.remaining() <= 0:
            return
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in SKIPPED_DIRS:
                        stack.append(Path(entry.path))
                    continue
                found = _regular(Path(entry.path), root, entry)
            except OSError:
                continue
            if found is not None:
                yield found


def _regular(path: Path, root: Path, entry: os.DirEntry[str] | None = None) -> tuple[Path, float] | None:
    """(path, mtime) for a regular file, or a symlink to one inside root; None for anything else."""
    info = entry.stat(follow_symlinks=False) if entry is not None else os.lstat(path)
    if stat.S_ISREG(info.st_mode):
        return path, info.st_mtime
    if not stat.S_ISLNK(info.st_mode):
        return None
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not target.is_relative_to(root):
        return None  # a way out of the workspace: neither followed nor listed
    info = os.stat(target)
    return (path, info.st_mtime) if stat.S_ISREG(info.st_mode) else None


# --- content search -------------------------------------------------------------------------


@dataclass
class _Hit:
    line: int
    text: str
    is_match: bool


class _Search:
    """Runs the regex over files one by one and collects `path:line: text` lines within the caps."""

    def __init__(self, compiled: regex.Pattern[str], context: int, root: Path, budget: _Budget,
                 max_file_bytes: int) -> None:
        self.compiled = compiled
        self.context = context
        self.root = root
        self.budget = budget
        self.max_file_bytes = max_file_bytes
        self.out: list[str] = []
        self.chars = 0
        self.matches = 0
        self.files_with_matches = 0
        self.capped = False  # MAX_MATCHES reached
        self.full = False  # MAX_OUTPUT_CHARS reached
        self.skipped_binary = 0
        self.skipped_huge = 0

    def file(self, path: Path) -> bool:
        """Search one file; False when the search must stop (caps, time)."""
        text = self._read(path)
        if text is None:
            return True
        hits = self._hits(text)
        if hits:
            self.files_with_matches += 1
            self._emit(display_path(path, self.root), hits)
        return not (self.capped or self.full or self.budget.ran_out)

    def _read(self, path: Path) -> str | None:
        target = path.resolve() if path.is_symlink() else path
        try:
            fd = os.open(target, os.O_RDONLY | _OPEN_FLAGS)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None
            if info.st_size > self.max_file_bytes:
                self.skipped_huge += 1
                return None
            data = fh.read(self.max_file_bytes + 1)
        if b"\x00" in data[:_SNIFF_BYTES]:
            self.skipped_binary += 1
            return None
        return data.decode("utf-8", errors="replace")

    def _hits(self, text: str) -> list[_Hit]:
        wanted: dict[int, bool] = {}
        line_no, scanned = 0, 0
        left = self.budget.remaining()
        if left <= 0:
            return []
        try:
            for match in self.compiled.finditer(text, timeout=left):
                line_no += text.count("\n", scanned, match.start())
                scanned = match.start()
                if wanted.get(line_no):
                    continue
                if self.matches >= MAX_MATCHES:
                    self.capped = True
                    break
                self.matches += 1
                wanted[line_no] = True
                for near in range(line_no - self.context, line_no + self.context + 1):
                    wanted.setdefault(near, False)
        except TimeoutError:
            self.budget.ran_out = True
        if not any(wanted.values()):
            return []
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        return [_Hit(n + 1, lines[n].rstrip("\r"), is_match) for n, is_match in sorted(wanted.items()) if 0 <= n < len(lines)]

    def _emit(self, shown: str, hits: list[_Hit]) -> None:
        previous = None
        for hit in hits:
            if previous is not None and hit.line > previous + 1:
                self._add("--")
            previous = hit.line
            text = hit.text if len(hit.text) <= MAX_LINE_CHARS else hit.text[:MAX_LINE_CHARS] + " [...]"
            self._add(f"{shown}:{hit.line}: {text}" if hit.is_match else f"{shown}-{hit.line}- {text}")
            if self.full:
                return

    def _add(self, line: str) -> None:
        if self.chars + len(line) + 1 > MAX_OUTPUT_CHARS:
            self.full = True
            return
        self.out.append(line)
        self.chars += len(line) + 1

    def report(self, pattern: str) -> str:
        notes = []
        if self.capped or self.full:
            notes.append(f"[results capped at {self.matches} matches; narrow the pattern or glob]")
        if self.budget.ran_out:
            notes.append(f"[stopped after {self.budget.limit:g} s; results may be incomplete]")
        skipped = []
        if self.skipped_binary:
            skipped.append(f"{self.skipped_binary} binary")
        if self.skipped_huge:
            skipped.append(f"{self.skipped_huge} over {self.max_file_bytes:,} bytes")
        if skipped:
            notes.append(f"[skipped files: {', '.join(skipped)}]")
        if not self.out:
            return _nothing("No matches for", pattern, self.budget) + ("\n" + "\n".join(notes) if notes else "")
        summary = f"[{self.matches} matching lines in {self.files_with_matches} files]"
        return "\n".join([*self.out, *notes, summary])


def _nothing(what: str, pattern: str, budget: _Budget) -> str:
    tail = f" (stopped after {budget.limit:g} s)" if budget.ran_out else ""
    return f"{what} {pattern!r}{tail}."
