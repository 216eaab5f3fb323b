"""SKILL.md: a YAML frontmatter block (`description` required, `name` optional) and a Markdown body."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from picobot.domain.definition import DefinitionError, parse as parse_definition
from picobot.errors import SkillError

MAX_SKILL_BYTES = 64 * 1024  # a longer SKILL.md is cut here (with a warning): it is prompt text
MAX_FRONTMATTER_CHARS = 8 * 1024
MAX_DESCRIPTION_CHARS = 1024
# Letters, digits, `.`, `_`, `-`; no separators, no `..`: a name is always one folder name.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class SkillDoc:
    name: str | None
    description: str
    body: str


def check_name(name: Any) -> str:
    """`name` if it is a valid skill name; SkillError saying what a name may be otherwise."""
    if isinstance(name, str) and NAME_RE.fullmatch(name) and ".." not in name:
        return name
    if name is None:
        raise SkillError("Give the skill's name in `name`.")
    shown = repr(name)[:80] if isinstance(name, str) else type(name).__name__
    raise SkillError(
        f"{shown} is not a valid skill name: use 1-64 letters, digits, '.', '_' or '-', "
        "starting with a letter or digit (no slashes, no '..')."
    )


def parse(text: str, path: str | None = None) -> SkillDoc:
    """The frontmatter and body of a SKILL.md; SkillError says what is wrong with it (line and key too)."""
    try:
        doc = parse_definition(text, path=path, max_frontmatter_chars=MAX_FRONTMATTER_CHARS,
                               opening_hint=" holding 'description: ...'")
        description = doc.text("description", required=True, max_chars=MAX_DESCRIPTION_CHARS, fold=True,
                               what="a non-empty text saying when to use the skill (its frontmatter has none)")
    except DefinitionError as exc:
        raise SkillError(str(exc)) from None
    return SkillDoc(_name_of(doc.meta), description or "", doc.body)


def _name_of(meta: dict[str, Any]) -> str | None:
    raw = meta.get("name")
    return None if raw is None else check_name(raw)


def render(name: str, description: str, body: str) -> str:
    """A SKILL.md for these parts; YAML-quoted, so any description text round-trips."""
    head = yaml.safe_dump({"name": name, "description": description}, allow_unicode=True, sort_keys=False,
                          width=1_000_000)
    return f"---\n{head}---\n\n{body.lstrip(chr(10))}"
