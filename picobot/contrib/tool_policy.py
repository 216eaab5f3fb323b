"""The tool policy: deny tool calls by tool name (a glob) and an argument pattern (a regex), from config.

    "plugins": {"tool_policy": {"enabled": true, "deny": [
        {"tool": "bash", "pattern": "rm\\\\s+-rf", "reason": "no recursive deletes"},
        {"tool": "http_request", "argument": "url", "pattern": "^https?://internal\\\\."},
        {"tool": "mcp_*"}]}}

A rule without `pattern` denies every call of its tools; with `argument` the pattern is searched in
that argument (as text), else in all the arguments as JSON. The first matching rule denies.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from picobot.plugins import Deny, argument_text, hookimpl


class ToolPolicyPlugin:
    def __init__(self, config: Any) -> None:
        self.rules = [(r.tool, r.argument, re.compile(r.pattern) if r.pattern else None, r.reason)
                      for r in config.plugins.tool_policy.deny]

    @hookimpl(tryfirst=True)  # before plugins that would rewrite the arguments: refuse what was asked
    def before_toolcall(self, call: Any) -> Deny | None:
        for tool, argument, pattern, reason in self.rules:
            if not fnmatch.fnmatchcase(call.name, tool):
                continue
            if pattern is None or pattern.search(argument_text(call.arguments, argument)):
                return Deny(reason)
        return None
