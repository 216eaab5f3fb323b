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

from picobot.domain.definition import DefinitionError, parse as parse_definition

__all__ = ["BUILTINS", "Definition", "DefinitionError", "parse"]

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
    """The definition in a SUBAGENT.md's text; DefinitionError says what is wrong (file, line, key)."""
    doc = parse_definition(text, path=path)
    name = doc.name("name", NAME_RE, "a name is 1-64 letters, digits, '.', '_' or '-'") or folder_name
    if name in BUILTIN_NAMES:
        raise doc.error("name", f"'{name}' is a built-in sub-agent; choose another name")
    description = doc.text("description", required=True, what="a text saying what the sub-agent does") or ""
    secs = doc.number("max_execution_secs", low=0, high=86_400, what="of seconds ")
    return Definition(
        name=name, description=description[:MAX_DESCRIPTION_CHARS], source=source,
        prompt_template=doc.text("prompt_template", required=True, what="the task message's template") or "",
        body=doc.body, allowed_tools=doc.names("allowed_tools", what="tool names", example="[read, bash]"),
        max_execution_secs=secs, path=path,
    )
