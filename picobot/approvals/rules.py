"""Which tool calls need a decision: the configured rules, then the built-in ones.

A rule names a tool (or a glob) and, optionally, a regular expression searched in one argument
(as text) or in all the arguments as JSON. The first rule that matches decides the action: `ask`
(wait for a person), `deny` (refuse at once) or `allow` (run, and check no later rule). The
built-in rules cover recursive deletes, sudo, a download piped into a shell and file writes that
resolve outside the workspace.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from picobot.plugins import argument_text

SHELL = "bash"
WRITE_TOOLS = ("write", "edit")
OUTSIDE_WORKSPACE = "write-outside-workspace"

# rm with a recursive and a force flag, in any order or spelling: -rf, -fr, -Rf, -r -f, --recursive --force
_RM_RF = (r"\brm(?=[^;&|\n]*\s-(?:[a-zA-Z]*[rR]|-recursive\b))"
          r"(?=[^;&|\n]*\s-(?:[a-zA-Z]*f|-force\b))")
_SUDO = r"(?:^|[\s;&|(`$])(?:sudo|doas)\b"
_SHELLS = r"(?:ba|z|da|k|fi)?sh\b"
# curl … | sh, wget -O- … | sudo bash, and the inverse forms bash <(curl …), sh -c "$(wget …)"
_PIPED = (rf"\b(?:curl|wget|fetch)\b[^\n]*\|\s*(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+)?(?:/\S*/)?{_SHELLS}"
          rf"|\b{_SHELLS}[^\n]*(?:<\(|\$\(|`)\s*(?:curl|wget)\b")


@dataclass(frozen=True)
class Rule:
    name: str
    tool: str  # a tool name or a glob
    action: str  # ask | deny | allow
    argument: str | None = None
    pattern: re.Pattern[str] | None = None
    test: Callable[[dict[str, Any], Path | None], bool] | None = None  # a built-in check beyond a regex

    def matches(self, tool: str, arguments: dict[str, Any], workspace: Path | None) -> bool:
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        if self.test is not None:
            return self.test(arguments, workspace)
        return self.pattern is None or self.pattern.search(subject(arguments, self.argument)) is not None


subject = argument_text  # the text a rule's pattern is searched in


def _outside_workspace(arguments: dict[str, Any], workspace: Path | None) -> bool:
    """A write whose path resolves outside the workspace (symlinks followed); an unreadable path counts."""
    raw = arguments.get("path")
    if workspace is None or not isinstance(raw, str) or not raw.strip():
        return False
    try:
        os.fsencode(raw)
        if "\x00" in raw:
            return True
        root = workspace.resolve()
        given = Path(raw).expanduser()
        resolved = (given if given.is_absolute() else root / given).resolve()
    except (OSError, RuntimeError, UnicodeError, ValueError):
        return True
    return resolved != root and not resolved.is_relative_to(root)


def builtin_rules(action: str) -> list[Rule]:
    return [
        Rule("rm-recursive-force", SHELL, action, "command", re.compile(_RM_RF)),
        Rule("sudo", SHELL, action, "command", re.compile(_SUDO)),
        Rule("download-piped-to-shell", SHELL, action, "command", re.compile(_PIPED)),
        *[Rule(OUTSIDE_WORKSPACE, tool, action, "path", test=_outside_workspace) for tool in WRITE_TOOLS],
    ]


def compile_rules(approval: Any) -> list[Rule]:
    """The rules of `tools.approval`, in the order they are checked (configured first)."""
    if approval.mode == "off":
        return []
    found = [Rule(r.name or f"rule-{i + 1}", r.tool, r.action, r.argument,
                  re.compile(r.pattern) if r.pattern is not None else None)
             for i, r in enumerate(approval.rules)]
    if approval.default_rules:
        found += builtin_rules("ask")
    return found


def first_match(rules: list[Rule], tool: str, arguments: dict[str, Any], workspace: Path | None) -> Rule | None:
    for rule in rules:
        if rule.matches(tool, arguments, workspace):
            return rule
    return None
