"""Built-in tools and the registry the agent calls them through.

Built-ins are registered one by one through ToolRegistry.register, exactly as a plugin
would register its own tools.
"""

from __future__ import annotations

import logging
from typing import Iterable

from picobot.tools.base import Tool, ToolContext, ToolResult
from picobot.tools.calculator import CalculatorTool
from picobot.tools.clock import ClockTool
from picobot.tools.files import EditFileTool, ReadFileTool, WriteFileTool
from picobot.tools.http import HttpRequestTool
from picobot.tools.registry import ToolRegistry
from picobot.tools.search import ContentSearchTool, FileSearchTool
from picobot.tools.session_message import SendSessionMessageTool
from picobot.tools.shell import SHELL_TOOL_NAME, ShellTool
from picobot.tools.web_fetch import WebFetchTool

__all__ = [
    "SHELL_TOOL_NAME",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "build_registry",
    "builtin_tools",
]

log = logging.getLogger("picobot.tools")

# The shell tool is "bash" on POSIX and "shell" on Windows; disabling either name disables it.
_SHELL_ALIASES = {"bash", "shell"}


def build_registry(disabled: Iterable[str] = (), extra: Iterable[Tool] = ()) -> ToolRegistry:
    """A registry with the built-ins (minus `disabled`) followed by `extra` tools."""
    off = {name.strip() for name in disabled}
    if off & _SHELL_ALIASES:
        off |= _SHELL_ALIASES
    registry = ToolRegistry()

    def register(tool: Tool) -> None:
        if tool.name in off:
            return
        if tool.name in registry:  # a plugin's tool may not take a name already given
            log.warning("tool %r is offered twice; the first one stays", tool.name)
            return
        registry.register(tool)

    register(CalculatorTool())
    register(ClockTool())
    register(ReadFileTool())
    register(WriteFileTool())
    register(EditFileTool())
    register(FileSearchTool())
    register(ContentSearchTool())
    register(ShellTool())
    register(HttpRequestTool())
    register(WebFetchTool())
    register(SendSessionMessageTool())
    for tool in extra:
        register(tool)
    return registry


def builtin_tools() -> list[Tool]:
    """Fresh instances of every built-in tool, in registration order."""
    return build_registry().tools()
