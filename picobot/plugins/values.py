"""What a plugin's hook may return, and how PicoBot keeps it (repaired text, a length cap)."""

from __future__ import annotations

import json
from typing import Any

from picobot.domain.text import repair_text
from picobot.plugins.types import Command

MAX_TEXT = 1_000_000  # a plugin's replacement text is cut to this many characters
CUT_NOTE = "\n[... cut by PicoBot: plugin output too long]"
ERROR_CHARS = 500


def clean_text(text: str) -> str:
    """A plugin's text as PicoBot keeps it: lone surrogates and NUL repaired, cut at MAX_TEXT."""
    text = repair_text(text)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - len(CUT_NOTE)] + CUT_NOTE


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def is_notes(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(n, str) for n in value))


def is_list(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def is_dict(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def anything(value: Any) -> bool:
    return True


def is_problem(item: Any) -> bool:
    return isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(p, str) for p in item)


def command_name(item: Any) -> str | None:
    """The command's name as typed after "/", or None when it is no usable Command."""
    if not isinstance(item, Command) or not isinstance(item.name, str) or not callable(item.handler):
        return None
    name = item.name.strip().lstrip("/").lower()
    return name if name and not any(c.isspace() or c == "/" for c in name) else None


def json_object(value: dict[str, Any]) -> bool:
    # the loop sends replaced arguments to the tool as JSON text: what cannot be written must not pass
    if not all(isinstance(k, str) for k in value):
        return False
    try:
        json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def repaired(value: Any) -> Any:
    """A JSON value with every string in it repaired (text that could not be stored or sent)."""
    if isinstance(value, str):
        return repair_text(value)
    if isinstance(value, dict):
        return {repair_text(k): repaired(v) for k, v in value.items()}
    if isinstance(value, list):
        return [repaired(v) for v in value]
    return value


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]


def what(item: Any) -> str:
    return type(item).__name__
