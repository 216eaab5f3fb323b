"""Sub-agent definitions: the built-in `general` and `explore`, and SUBAGENT.md files.

A SUBAGENT.md is a YAML frontmatter block and a Markdown body:

    ---
    name: code-review              # optional, default: the folder name
    description: Reviews code      # required: what the model reads to choose it
    prompt_template: |             # required; {{description}} and {{prompt}} are filled in
      Review this: {{description}}
    allowed_tools: [read, bash]    # optional: narrows the parent's tools, never widens them
    max_execution_secs: 300        # optional: lowers subagents.timeout_secs, never raises it
    ---
    Extra instructions, appended to the system prompt.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from picobot.domain.frontmatter import FrontmatterError, split as split_frontmatter

MAX_FILE_BYTES = 64 * 1024
MAX_DESCRIPTION_CHARS = 300
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
BUILTIN_NAMES = ("general", "explore")

_BASE_PROMPT = (
    "You are a sub-agent: another agent delegated one task to you. Work on it alone with your tools; "
    "nobody will answer questions. Your final answer is returned to that agent as the task's result: "
    "make it a complete, concise report of what you found or did."
)
_READ_ONLY_PROMPT = "You have read-only tools. Do not try to change files or anything else."


class DefinitionError(ValueError):
    """A SUBAGENT.md that cannot be used; the text says what to fix."""


@dataclass(frozen=True)
class Definition:
    name: str
    description: str
    source: str  # builtin | user | project
    prompt_template: str = ""
    body: str = ""
    allowed_tools: tuple[str, ...] | None = None  # None: every tool the parent has
    read_only: bool = False  # only tools marked read-only
    max_execution_secs: float | None = None
    path: str | None = None

    def system_prompt(self, description: str, prompt: str) -> str:
        parts = [_BASE_PROMPT]
        if self.read_only:
            parts.append(_READ_ONLY_PROMPT)
        if self.prompt_template:
            parts.append(render(self.prompt_template, description, prompt))
        if self.body.strip():
            parts.append(self.body.strip())
        return "\n\n".join(parts)

    def snapshot(self) -> dict[str, Any]:
        """What a run records of its definition: enough to know later what it ran with."""
        text = f"{self.prompt_template}\n---\n{self.body}".encode("utf-8", "replace")
        return {"name": self.name, "source": self.source, "path": self.path, "read_only": self.read_only,
                "allowed_tools": list(self.allowed_tools) if self.allowed_tools is not None else None,
                "max_execution_secs": self.max_execution_secs, "sha256": hashlib.sha256(text).hexdigest()}


GENERAL = Definition("general", "multi-step work with your own tools", "builtin")
EXPLORE = Definition("explore", "read-only research: find and read, change nothing", "builtin", read_only=True)
BUILTINS = {d.name: d for d in (GENERAL, EXPLORE)}


def render(template: str, description: str, prompt: str) -> str:
    # one pass, so a description that itself contains "{{prompt}}" is not expanded again
    values = {"description": description, "prompt": prompt}
    return re.sub(r"\{\{\s*(description|prompt)\s*\}\}", lambda m: values[m.group(1)], template)


def parse(text: str, folder_name: str, source: str, path: str) -> Definition:
    """The definition in a SUBAGENT.md's text; DefinitionError says what is wrong."""
    meta, body = _split(text.removeprefix("\ufeff"))
    name = meta.get("name", folder_name)
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or ".." in name:
        raise DefinitionError("'name' must be 1-64 letters, digits, '.', '_' or '-'")
    if name in BUILTIN_NAMES:
        raise DefinitionError(f"'{name}' is a built-in sub-agent; choose another name")
    return Definition(
        name=name, description=_text(meta, "description")[:MAX_DESCRIPTION_CHARS], source=source,
        prompt_template=_text(meta, "prompt_template"), body=body, allowed_tools=_tools(meta.get("allowed_tools")),
        max_execution_secs=_secs(meta.get("max_execution_secs")), path=path,
    )


def _split(text: str) -> tuple[dict[str, Any], str]:
    try:
        return split_frontmatter(text)
    except FrontmatterError as exc:
        raise DefinitionError(exc.reason) from None  # the reason only: these messages name no line


def _text(meta: dict[str, Any], key: str) -> str:
    value = meta.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DefinitionError(f"'{key}' is missing or not a non-empty text")
    return value.strip()


def _tools(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise DefinitionError("'allowed_tools' must be a list of tool names, e.g. [read, bash]")
    return tuple(dict.fromkeys(v.strip() for v in value))


def _secs(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86_400:
        raise DefinitionError("'max_execution_secs' must be a number of seconds from 1 to 86400")
    return float(value)
