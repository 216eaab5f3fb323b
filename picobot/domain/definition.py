"""Definition files: a Markdown file whose YAML frontmatter says what it is and whose body is prompt text.

One reader and one set of key checks for SKILL.md, SUBAGENT.md and agent files (`agents/<id>.md`),
so the three accept the same shapes and explain a mistake the same way: every error names the file
(when known), the frontmatter line and the key, e.g.

    agents/coder.md: line 4: 'tools' must be a list of tool names, e.g. [read, bash]

What keys a kind of file has is its own module's business; this one only reads and checks values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Pattern

import yaml

from picobot.domain.frontmatter import FrontmatterError, split_block

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# An item of a list-of-names key (tool, skill names): letters, digits, `.`, `_`, `-`; no patterns.
NAME_ITEM_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
MAX_LIST_ITEMS = 256


class DefinitionError(ValueError):
    """A definition file that cannot be used: where (file, line, key) and why."""

    def __init__(self, reason: str, *, path: str | None = None, line: int | None = None, key: str | None = None):
        self.reason = reason
        self.path = path
        self.line = line
        self.key = key
        named = key is not None and not reason.startswith(f"'{key}'")
        where = [p for p in (path, f"line {line}" if line else None, f"'{key}'" if named else None) if p]
        prefix = ": ".join(where)
        super().__init__(f"{prefix}: {reason}" if prefix else reason)


@dataclass(frozen=True)
class Definition:
    """The frontmatter of one file (values and the line of each top-level key) and its body."""

    meta: dict[str, Any]
    body: str
    path: str | None = None
    lines: dict[str, int] = field(default_factory=dict)

    def error(self, key: str | None, reason: str) -> DefinitionError:
        line = self.lines.get(key) if key else None
        return DefinitionError(reason, path=self.path, line=line, key=key)

    def unknown_keys(self, known: set[str] | frozenset[str]) -> None:
        """DefinitionError for the first key not in `known` (a typo would otherwise be ignored)."""
        for key in self.meta:
            if str(key) not in known:
                shown = repr(key)[:64] if isinstance(key, str) else type(key).__name__
                raise self.error(key if isinstance(key, str) else None,
                                 f"unknown key {shown} (known: {', '.join(sorted(known))})")

    def text(self, key: str, *, required: bool = False, max_chars: int | None = None, what: str = "a text",
             fold: bool = False) -> str | None:
        """A non-empty text, stripped (`fold`: whitespace runs become one space); None when absent."""
        value = self.meta.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            missing = "is missing" if value is None else f"is {_kind(value)}"
            raise self.error(key, f"'{key}' {missing}: give {what}")
        value = " ".join(value.split()) if fold else value.strip()
        if max_chars is not None and len(value) > max_chars and not fold:
            raise self.error(key, f"'{key}' has {len(value)} characters; the limit is {max_chars}")
        return value[:max_chars] if max_chars is not None else value

    def name(self, key: str, pattern: Pattern[str], what: str) -> str | None:
        """A name matching `pattern` (and without '..'); None when absent."""
        value = self.meta.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not pattern.fullmatch(value) or ".." in value:
            shown = repr(value)[:64] if isinstance(value, str) else _kind(value)
            raise self.error(key, f"'{key}' is {shown}: {what}")
        return value

    def names(self, key: str, *, what: str, example: str, item: Pattern[str] = NAME_ITEM_RE) -> tuple[str, ...] | None:
        """A list of names (duplicates dropped, order kept); None when absent."""
        value = self.meta.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or len(value) > MAX_LIST_ITEMS:
            raise self.error(key, f"'{key}' must be a list of {what} (at most {MAX_LIST_ITEMS}), e.g. {example}")
        for v in value:
            if not isinstance(v, str) or not item.fullmatch(v.strip()):
                shown = repr(v)[:64] if isinstance(v, str) else _kind(v)
                raise self.error(key, f"'{key}' holds {shown}, which is not one of {what}; e.g. {example}")
        return tuple(dict.fromkeys(v.strip() for v in value))

    def number(self, key: str, *, low: float, high: float, whole: bool = False, what: str = "") -> float | None:
        """A number in (low, high] (`whole`: an integer); None when absent."""
        value = self.meta.get(key)
        if value is None:
            return None
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) \
            and low < value <= high and (not whole or float(value).is_integer())
        if not ok:
            kind = "a whole number" if whole else "a number"
            shown = repr(value)[:32] if isinstance(value, (int, float)) and not isinstance(value, bool) else _kind(value)
            raise self.error(key, f"'{key}' is {shown}: give {kind} {what}above {low:g} and at most {high:g}")
        return int(value) if whole else float(value)


def parse(text: str, *, path: str | None = None, max_frontmatter_chars: int | None = None,
          opening_hint: str = "") -> Definition:
    """The frontmatter and body of a definition file's text; DefinitionError says what is wrong."""
    try:
        block, body = split_block(text, max_chars=max_frontmatter_chars, opening_hint=opening_hint)
    except FrontmatterError as exc:
        raise DefinitionError(exc.reason, path=path, line=exc.line) from None
    meta, lines = _load_with_lines(block, path)
    return Definition(meta, body, path, lines)


def decode(data: bytes, *, path: str | None = None, max_bytes: int) -> str:
    """A file's bytes as text: over `max_bytes` is an error; bytes that are not UTF-8 become U+FFFD."""
    if len(data) > max_bytes:
        raise DefinitionError(f"it is over {max_bytes // 1024} KiB", path=path)
    if b"\x00" in data:
        raise DefinitionError("it holds a NUL byte (a binary file?)", path=path)
    return data.decode("utf-8", errors="replace")


def _load_with_lines(block: str, path: str | None) -> tuple[dict[str, Any], dict[str, int]]:
    loader = _Loader(block)
    try:
        node = loader.get_single_node()
        meta = loader.construct_document(node) if node is not None else None
    except (yaml.YAMLError, RecursionError, ValueError, TypeError) as exc:
        where = getattr(exc, "problem_mark", None)
        # the block starts on the file's line 2 and marks count from 0
        raise DefinitionError("its frontmatter is not valid YAML", path=path,
                              line=where.line + 2 if where is not None else None) from None
    finally:
        loader.dispose()
    if node is None or not isinstance(meta, dict):  # no node, no meta
        raise DefinitionError("its frontmatter is not a mapping of 'key: value' lines", path=path)
    lines = {k.value: k.start_mark.line + 2 for k, _ in node.value
             if isinstance(k, yaml.ScalarNode) and isinstance(k.value, str)}
    return meta, lines


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "empty" if not value.strip() else "a text"
    return {dict: "a mapping", list: "a list", bool: "true/false", type(None): "empty"}.get(type(value), type(value).__name__)
