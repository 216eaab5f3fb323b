"""`read`, `write`, `edit`: text files inside the session workspace, and nowhere else."""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Any, Iterator, TextIO

from picobot.errors import ToolError
from picobot.tools.base import Tool, ToolContext

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000
DEFAULT_READ_MAX_CHARS = 50_000
_SNIFF_BYTES = 8192


class ReadFileTool(Tool):
    name = "read"
    description = (
        "Read a text file from the workspace. Returns its lines prefixed with line numbers "
        "(\"   12\\tline text\"); the numbers are not part of the file. Large files are returned "
        "in slices: use offset (1-based first line) and limit (number of lines) to page through. "
        "Paths are relative to the workspace. Binary files are refused."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based). Default 1."},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": f"Maximum number of lines to return. Default {DEFAULT_READ_LINES}.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    read_only = True

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        root = workspace_root(ctx)
        path = resolve_path(args["path"], root)
        _require_file(path, args["path"])
        _refuse_binary(path, args["path"])
        offset = args.get("offset", 1)
        limit = args.get("limit", DEFAULT_READ_LINES)
        max_chars = int(ctx.settings.get("read_max_chars", DEFAULT_READ_MAX_CHARS))
        return _numbered_slice(path, offset, limit, max_chars, args["path"])


class WriteFileTool(Tool):
    name = "write"
    description = (
        "Create or overwrite a text file in the workspace with exactly the given content "
        "(UTF-8). Missing parent directories are created. To change part of an existing file, "
        "prefer the edit tool. Paths are relative to the workspace."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "content": {"type": "string", "description": "The complete new content of the file."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        root = workspace_root(ctx)
        path = resolve_path(args["path"], root)
        if path.is_dir():
            raise ToolError(f"{args['path']} is a directory; give a file path.")
        data = args["content"].encode("utf-8")
        existed = path.exists()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        except OSError as exc:
            raise ToolError(f"Cannot write {args['path']}: {exc.strerror or exc}") from None
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {display_path(path, root)} ({len(data)} bytes written)."


class EditFileTool(Tool):
    name = "edit"
    description = (
        "Replace text in an existing workspace file. old_text must match the file exactly, "
        "including whitespace and indentation (copy it from the read output, without the "
        "line-number prefix), and must occur exactly once unless replace_all is true; include "
        "a few surrounding lines to make it unique. new_text replaces it (may be empty to delete)."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path, relative to the workspace."},
            "old_text": {"type": "string", "minLength": 1, "description": "The exact text to replace."},
            "new_text": {"type": "string", "description": "The replacement text."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of requiring exactly one. Default false.",
            },
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    }

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        root = workspace_root(ctx)
        path = resolve_path(args["path"], root)
        _require_file(path, args["path"])
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
        try:
            path.write_bytes(text.replace(old, new).encode("utf-8"))
        except OSError as exc:
            raise ToolError(f"Cannot write {shown}: {exc.strerror or exc}") from None
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


def _require_file(path: Path, raw: str) -> None:
    if not path.exists():
        raise ToolError(f"File not found: {raw}")
    if path.is_dir():
        raise ToolError(f"{raw} is a directory, not a file.")


def _refuse_binary(path: Path, raw: str) -> None:
    with path.open("rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    if b"\x00" in head:
        kind = mimetypes.guess_type(path.name)[0] or "unknown type"
        size = path.stat().st_size
        raise ToolError(f"{raw} is a binary file ({kind}, {size} bytes); read only shows text files.")


def _read_text_strict(path: Path, raw: str) -> str:
    data = path.read_bytes()
    if b"\x00" in data[:_SNIFF_BYTES]:
        raise ToolError(f"{raw} is a binary file; edit only changes text files.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{raw} is not valid UTF-8 text; edit cannot change it safely.") from None


def _numbered_slice(path: Path, offset: int, limit: int, max_chars: int, raw: str) -> str:
    lines: list[str] = []
    used = 0
    number = 0
    more = False
    with path.open("r", encoding="utf-8", errors="replace", newline="") as fh:
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
