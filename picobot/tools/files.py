"""`read`, `write`, `edit`: text files inside the session workspace, and nowhere else."""

from __future__ import annotations

import io
import mimetypes
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, Iterator, TextIO

from picobot.errors import ToolError
from picobot.tools.base import Tool, ToolContext

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000
DEFAULT_READ_MAX_CHARS = 50_000
_SNIFF_BYTES = 8192
# A FIFO opened without O_NONBLOCK waits for a writer forever; O_NOFOLLOW stops a symlink
# swapped in after the path was checked. Both are no-ops where the platform lacks them.
_OPEN_FLAGS = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)


class _FileTool(Tool):
    """A tool on one workspace file: calls on the same file are ordered by the loop."""

    def footprint(self, args: dict[str, Any], ctx: ToolContext) -> frozenset[str]:
        raw = args.get("path")
        if not isinstance(raw, str):
            return frozenset()
        try:
            return frozenset({str(resolve_path(raw, workspace_root(ctx)))})
        except ToolError:
            return frozenset()


class ReadFileTool(_FileTool):
    name = "read"
    description = (
        "Read a workspace text file. Lines come numbered (\"  12\\tline\"); the numbers are not in "
        "the file. Page with offset and limit."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "offset": {"type": "integer", "minimum": 1, "description": "First line, 1-based."},
            "limit": {"type": "integer", "minimum": 1, "description": f"Max lines. Default {DEFAULT_READ_LINES}."},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    read_only = True

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        root = workspace_root(ctx)
        path = resolve_path(args["path"], root)
        offset = args.get("offset", 1)
        limit = args.get("limit", DEFAULT_READ_LINES)
        max_chars = int(ctx.settings.get("read_max_chars", DEFAULT_READ_MAX_CHARS))
        with _open_regular(path, args["path"], "read") as fh:
            _refuse_binary(fh, path, args["path"])
            text = io.TextIOWrapper(fh, encoding="utf-8", errors="replace", newline="")
            return _numbered_slice(text, offset, limit, max_chars, args["path"])


class WriteFileTool(_FileTool):
    name = "write"
    description = (
        "Create or overwrite a workspace file (UTF-8), making folders. For partial changes use edit."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "content": {"type": "string", "description": "The whole new file."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        root = workspace_root(ctx)
        path = resolve_path(args["path"], root)
        existed = _refuse_special(path, args["path"], "write")
        data = args["content"].encode("utf-8")
        with ctx.gate.side_effect():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ToolError(f"Cannot write {args['path']}: {exc.strerror or exc}") from None
            _replace_content(path, data, args["path"], "write")
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {display_path(path, root)} ({len(data)} bytes written)."


class EditFileTool(_FileTool):
    name = "edit"
    description = (
        "Replace old_text in a workspace file. It must match exactly, whitespace too (copy from read, "
        "minus line numbers), and be unique unless replace_all: add lines around it if not."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "old_text": {"type": "string", "minLength": 1, "description": "Exact text to replace."},
            "new_text": {"type": "string", "description": "Empty deletes."},
            "replace_all": {"type": "boolean", "description": "Every match."},
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    }

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        root = workspace_root(ctx)
        path = resolve_path(args["path"], root)
        text = _read_text_strict(path, args["path"])
        old, new = args["old_text"], args["new_text"]
        if old == new:
            raise ToolError("old_text and new_text are identical; nothing to change.")
        if old not in text and "\r\n" in text:
            # The model usually writes \n; match a CRLF file in its own line endings.
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = text.count(old)
        shown = display_path(path, root)
        if count == 0:
            raise ToolError(
                f"old_text was not found in {shown}. It must match exactly, including whitespace "
                "and indentation; read the file again to copy the current text."
            )
        if count > 1 and not args.get("replace_all", False):
            raise ToolError(
                f"old_text occurs {count} times in {shown}. Include more surrounding lines to make "
                "it unique, or set replace_all to true to replace every occurrence."
            )
        with ctx.gate.side_effect():
            _replace_content(path, text.replace(old, new).encode("utf-8"), shown, "edit")
        return f"Replaced {count} occurrence{'s' if count > 1 else ''} in {shown}."


def workspace_root(ctx: ToolContext) -> Path:
    """The session workspace, created if missing, as a resolved absolute path."""
    root = Path(ctx.workspace).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def resolve_path(raw: str, root: Path) -> Path:
    """Resolve a model-given path inside root; ToolError if it points outside (incl. via symlinks)."""
    if not raw or not raw.strip():
        raise ToolError("The path is empty.")
    if "\x00" in raw:
        raise ToolError("The path contains a NUL character.")
    try:
        os.fsencode(raw)
    except UnicodeError:
        raise ToolError("The path is not valid text (it holds a lone surrogate); give a plain file name.") from None
    given = Path(raw)
    candidate = given if given.is_absolute() else root / given
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: symlink loop on older Pythons
        raise ToolError(f"Cannot resolve path {raw!r}: {exc}") from None
    if resolved != root and not resolved.is_relative_to(root):
        raise ToolError(
            f"Path {raw!r} is outside the workspace. Only files inside the workspace can be "
            "accessed; use a path relative to it."
        )
    return resolved


def display_path(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix() or "."
    except ValueError:
        return str(path)


def _open_regular(path: Path, raw: str, verb: str) -> BinaryIO:
    """The file opened for reading; ToolError if missing or not a regular file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ToolError(f"File not found: {raw}") from None
    except OSError as exc:
        raise ToolError(f"Cannot open {raw}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise ToolError(f"{raw} is a directory, not a file.")
    _require_regular(mode, raw, verb)
    return os.fdopen(_open_fd(path, os.O_RDONLY, raw, verb), "rb")


def _refuse_special(path: Path, raw: str, verb: str) -> bool:
    """Whether path exists; ToolError if it is a directory or not a regular file."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ToolError(f"Cannot {verb} {raw}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise ToolError(f"{raw} is a directory; give a file path.")
    _require_regular(mode, raw, verb)
    return True


def _replace_content(path: Path, data: bytes, raw: str, verb: str) -> None:
    """Write data as the file's whole content; never opens a FIFO or device in its place."""
    fd = _open_fd(path, os.O_WRONLY | os.O_CREAT, raw, verb)
    try:
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise ToolError(f"Cannot write {raw}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _open_fd(path: Path, flags: int, raw: str, verb: str) -> int:
    """Open path, then check what was opened: the file may have been swapped since it was checked."""
    try:
        fd = os.open(path, flags | _OPEN_FLAGS, 0o666)
    except OSError as exc:
        raise ToolError(f"Cannot open {raw}: {exc.strerror or exc}") from None
    try:
        _require_regular(os.fstat(fd).st_mode, raw, verb)
    except ToolError:
        os.close(fd)
        raise
    return fd


def _require_regular(mode: int, raw: str, verb: str) -> None:
    if not stat.S_ISREG(mode):
        raise ToolError(
            f"{raw} is {_kind(mode)}, not a regular file; {verb} only works on regular files "
            "(reading or writing this could block forever or never end)."
        )


def _kind(mode: int) -> str:
    kinds = [(stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory")]
    return next((name for test, name in kinds if test(mode)), "a special file")


def _refuse_binary(fh: BinaryIO, path: Path, raw: str) -> None:
    head = fh.read(_SNIFF_BYTES)
    fh.seek(0)
    if b"\x00" in head:
        kind = mimetypes.guess_type(path.name)[0] or "unknown type"
        size = os.fstat(fh.fileno()).st_size
        raise ToolError(f"{raw} is a binary file ({kind}, {size} bytes); read only shows text files.")


def _read_text_strict(path: Path, raw: str) -> str:
    with _open_regular(path, raw, "edit") as fh:
        data = fh.read()
    if b"\x00" in data[:_SNIFF_BYTES]:
        raise ToolError(f"{raw} is a binary file; edit only changes text files.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{raw} is not valid UTF-8 text; edit cannot change it safely.") from None


def _numbered_slice(fh: TextIO, offset: int, limit: int, max_chars: int, raw: str) -> str:
    lines: list[str] = []
    used = 0
    number = 0
    more = False
    for number, (line, dropped) in enumerate(_bounded_lines(fh), start=1):
        if number < offset:
            continue
        if len(lines) >= limit or used >= max_chars:
            more = True
            break
        text = line if not dropped else f"{line} [... line truncated: {dropped} more characters]"
        entry = f"{number:>6}\t{text}"
        lines.append(entry)
        used += len(entry) + 1
    if not lines:
        if number == 0:
            return f"({raw} is empty)"
        raise ToolError(f"offset {offset} is past the end of {raw}, which has {number} lines.")
    if more:
        next_line = offset + len(lines)
        shown = f"lines {offset}-{next_line - 1}"
        lines.append(f"\n[showing {shown}; more lines follow: call read with offset={next_line}]")
    return "\n".join(lines)


def _bounded_lines(fh: TextIO) -> Iterator[tuple[str, int]]:
    """(line without its ending, characters cut off it); never holds a huge line in memory."""
    while line := fh.readline(MAX_LINE_CHARS + 1):
        dropped = 0
        if len(line) > MAX_LINE_CHARS and not line.endswith(("\n", "\r")):
            while rest := fh.readline(65536):
                ended = rest.endswith(("\n", "\r"))
                dropped += len(rest.rstrip("\r\n")) if ended else len(rest)
                if ended:
                    break
            dropped += len(line) - MAX_LINE_CHARS
            line = line[:MAX_LINE_CHARS]
        yield line.rstrip("\r\n"), dropped
