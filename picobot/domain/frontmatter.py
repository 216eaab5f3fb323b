"""YAML frontmatter: a `---` line, a block of YAML `key: value` lines, a line holding only `---`, a body.

The low-level reader under `picobot.domain.definition` (SKILL.md, SUBAGENT.md, agent files). It checks
the shape only; what keys a file needs, and how big the file may be, is its caller's business.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_CLOSE = re.compile(r"^---[ \t]*$", re.MULTILINE)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class FrontmatterError(ValueError):
    """The text has no well-formed frontmatter block; `reason` says what is wrong.

    `line` is the file line (1-based) a YAML error points at, when it points at one; str() of the
    error is the reason with that line, e.g. "its frontmatter is not valid YAML (line 3)".
    """

    def __init__(self, reason: str, line: int | None = None):
        self.reason = reason
        self.line = line
        super().__init__(reason if line is None else f"{reason} (line {line})")


def split(text: str, *, max_chars: int | None = None, opening_hint: str = "") -> tuple[dict[str, Any], str]:
    """(the frontmatter as a mapping, the body after it); FrontmatterError says what is wrong.

    A leading byte-order mark is ignored and the body starts after the blank lines that follow the
    closing `---`. `max_chars` limits the YAML block; `opening_hint` is added to the message for a
    text without an opening `---` (e.g. " holding 'description: ...'").
    """
    block, body = split_block(text, max_chars=max_chars, opening_hint=opening_hint)
    return _load(block), body


def split_block(text: str, *, max_chars: int | None = None, opening_hint: str = "") -> tuple[str, str]:
    """(the frontmatter's YAML text, the body after it), as `split` finds them, the YAML not parsed."""
    text = text.removeprefix("\ufeff")
    if not text.startswith("---"):
        raise FrontmatterError(f"it does not start with a '---' frontmatter block{opening_hint}")
    first_nl = text.find("\n")
    close = _CLOSE.search(text, first_nl + 1) if first_nl >= 0 else None
    if close is None or text[3:first_nl].strip():
        raise FrontmatterError("its frontmatter is not closed by a line holding only '---'")
    block = text[first_nl + 1:close.start()]
    if max_chars is not None and len(block) > max_chars:
        raise FrontmatterError(f"its frontmatter is over {max_chars} characters")
    return block, text[close.end():].lstrip("\r\n")


def _load(block: str) -> dict[str, Any]:
    try:
        meta = yaml.load(block, Loader=_Loader)  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        where = getattr(exc, "problem_mark", None)
        # the block starts on the file's line 2 and marks count from 0
        raise FrontmatterError("its frontmatter is not valid YAML",
                               where.line + 2 if where is not None else None) from None
    if not isinstance(meta, dict):
        raise FrontmatterError("its frontmatter is not a mapping of 'key: value' lines")
    return meta
