"""Text every layer can encode: UTF-8 for providers and Redis, SQL text for PostgreSQL.

JSON may carry a lone surrogate ("\\ud800") and NUL ("\\u0000"); neither survives UTF-8
encoding or a PostgreSQL text column. Such characters become U+FFFD, as a browser does
when it converts a string with a lone surrogate to UTF-8, so the message keeps its meaning
and nothing downstream has to fail on it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from picobot.domain.messages import Content

REPLACEMENT = "\ufffd"
UNREADABLE = "[this message could not be read]"
# Python's json joins valid surrogate pairs into one character: any surrogate left is a lone one.
_UNENCODABLE = re.compile("[\ud800-\udfff\x00]")


def repair_text(text: str) -> str:
    """The text with lone surrogates and NUL replaced by U+FFFD (the same object when clean)."""
    return _UNENCODABLE.sub(REPLACEMENT, text) if _UNENCODABLE.search(text) else text


def repair_content(content: Any) -> Any:
    """Content with every string in it repaired; its shape is kept, for the caller to validate."""
    if isinstance(content, str):
        return repair_text(content)
    if isinstance(content, list):
        return [_repair_block(b) for b in content]
    return content


def _repair_block(block: Any) -> Any:
    # One level only: a block's fields are strings; deeper values never reach a provider (see below)
    if isinstance(block, dict):
        return {_repair_any(k): _repair_any(v) for k, v in block.items()}
    return _repair_any(block)


def _repair_any(value: Any) -> Any:
    return repair_text(value) if isinstance(value, str) else value


def sendable_content(content: Any) -> Content:
    """Stored content as a turn may send it: a repaired string, or a list of repaired block dicts.

    Input stored by an older version may hold anything JSON can; what is not a string or a
    list of blocks is sent as its JSON text, so one odd row can never break a turn.
    """
    content = repair_content(content)
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in content):
        return [{k: v for k, v in b.items() if isinstance(k, str) and isinstance(v, str)} for b in content]
    if content is None:
        return ""
    try:
        return repair_text(json.dumps(content, ensure_ascii=False, default=str))
    except (RecursionError, ValueError):  # nested too deep to print: the row says nothing usable
        return UNREADABLE



class TooDeep(ValueError):
    """A JSON value that nests deeper than the caller allows."""


def repair_tree(value: Any, max_depth: int, depth: int = 0) -> Any:
    """A JSON value with every string and key repaired (lone surrogates, NUL); TooDeep past `max_depth`."""
    if depth > max_depth:
        raise TooDeep(f"deeper than {max_depth} levels")
    if isinstance(value, str):
        return repair_text(value)
    if isinstance(value, dict):
        return {repair_text(str(k)): repair_tree(v, max_depth, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [repair_tree(v, max_depth, depth + 1) for v in value]
    return value
