"""A webhook body as a JSON object, with everything a database or a model cannot take refused.

`json.loads` alone accepts NaN and Infinity, lone surrogates (`"\\ud800"`), NUL characters and
nesting deep enough to exhaust the stack; each of those is a clear 400 here instead of a 500
later, when the rendered prompt meets SQL or the provider.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 32


class BodyError(ValueError):
    """Why the body is not acceptable (safe to send back)."""


def _no_constant(name: str) -> Any:
    raise BodyError(f"{name} is not valid JSON")


def parse_object(raw: bytes) -> dict[str, Any]:
    """The body as a dict; BodyError says what is wrong."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyError("the body is not UTF-8 text") from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise BodyError(f"the JSON nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise BodyError(f"the body is not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(data, dict):
        raise BodyError("the body must be a JSON object")
    _check(data)
    return data


def _check(data: dict[str, Any]) -> None:
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value)
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise BodyError(f"the JSON nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                _check_text(key)
                stack.append((item, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in value)


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise BodyError("a string in the body contains a NUL character (\\u0000)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BodyError("a string in the body contains a lone surrogate (\\ud800-\\udfff)") from None
