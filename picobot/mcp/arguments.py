"""Arguments the model sends to an MCP tool, checked before they go on the wire.

The registry has already parsed them and checked them against the server's schema, but JSON
text can hold things the MCP wire cannot carry: a lone surrogate (`"\\ud800"`) makes the SDK's
writer fail and takes the whole connection down; NaN and Infinity are not JSON and would be
sent as null. Deep nesting and huge values are refused here too, with a message saying what
to change, instead of reaching a server that may choke on them.
"""

from __future__ import annotations

import math
from typing import Any

from picobot.errors import ToolArgumentsError

MAX_DEPTH = 64
MAX_CHARS = 1_000_000  # total characters of all strings and keys


def check_arguments(tool: str, args: dict[str, Any]) -> None:
    """Raise ToolArgumentsError naming the first problem (its JSON path) and how to fix it."""
    total = 0
    stack: list[tuple[Any, str, int]] = [(args, "$", 1)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ToolArgumentsError(f"Arguments for tool {tool} are nested more than {MAX_DEPTH} levels deep "
                                     f"(at {_show(path)}). Send flatter arguments.")
        if isinstance(value, str):
            total += len(value)
            _check_text(tool, value, path)
        elif isinstance(value, float) and not math.isfinite(value):
            raise ToolArgumentsError(f"Arguments for tool {tool} contain {value} at {_show(path)}, which is not "
                                     "a JSON number. Send a finite number or a string.")
        elif isinstance(value, dict):
            for key, item in value.items():
                total += len(key)
                _check_text(tool, key, path + ".<key>")
                stack.append((item, f"{path}.{key}", depth + 1))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
        if total > MAX_CHARS:
            raise ToolArgumentsError(f"Arguments for tool {tool} are larger than {MAX_CHARS} characters. "
                                     "Send less data per call (split it, or pass a file path instead).")


def _check_text(tool: str, text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolArgumentsError(
            f"Arguments for tool {tool} contain an unpaired UTF-16 surrogate (\\u{ord(text[exc.start]):04x}) "
            f"at {_show(path)}, which is not valid Unicode text. "
            "Remove it or send the intended character."
        ) from None


def _show(path: str) -> str:
    # A key may hold the very surrogate being reported; the message itself must be valid text.
    return path[:120].encode("utf-8", "backslashreplace").decode("utf-8")
