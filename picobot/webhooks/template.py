"""A hook's prompt template: `{{ payload.a.b }}` / `{{ payload.list.0 }}` filled from the body.

No expression language on purpose: a placeholder is a dotted path into the JSON, looked up in
dicts (by key) and lists (by a non-negative index), nothing else — no attributes, calls or
filters, so a body can never reach a Python object. The result is rendered in one pass: text
that came from the payload is never scanned for placeholders again.

- a missing key or index renders as empty text (senders' payloads vary; the prompt says what it expects)
- a string renders as itself; null as empty; numbers and booleans as JSON; objects and lists as compact JSON
- the rendered prompt is capped: TemplateError when it would pass `max_chars`
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.S)
_PATH = re.compile(r"payload(?:\.[A-Za-z0-9_-]+)*")
_MISSING = object()


class TemplateError(ValueError):
    """A template that cannot be compiled, or a rendering that is too long."""


@dataclass(frozen=True)
class Template:
    """A compiled template: literal text and payload paths, alternating."""

    parts: tuple[str | tuple[str, ...], ...]

    def render(self, payload: dict[str, Any], max_chars: int) -> str:
        out: list[str] = []
        size = 0
        for part in self.parts:
            piece = part if isinstance(part, str) else _text(_lookup(payload, part))
            size += len(piece)
            if size > max_chars:
                raise TemplateError(f"the rendered prompt is over {max_chars} characters")
            out.append(piece)
        return "".join(out)


def compile_template(text: str) -> Template:
    """The template `text` compiled; TemplateError names the first placeholder that is not a payload path."""
    parts: list[str | tuple[str, ...]] = []
    at = 0
    for match in _PLACEHOLDER.finditer(text):
        expr = match.group(1).strip()
        if not _PATH.fullmatch(expr):
            shown = expr[:40] + ("…" if len(expr) > 40 else "")
            raise TemplateError(f"{{{{ {shown} }}}} is not a payload path such as {{{{ payload.a.b }}}}")
        parts.append(text[at:match.start()])
        parts.append(tuple(expr.split(".")[1:]))
        at = match.end()
    parts.append(text[at:])
    return Template(tuple(p for p in parts if p != ""))


def _lookup(value: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        if isinstance(value, dict):
            value = value.get(step, _MISSING)
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def _text(value: Any) -> str:
    if value is _MISSING or value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
