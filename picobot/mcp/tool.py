"""An MCP server's tool as a PicoBot tool: the registry validates, redacts and truncates as for any other."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from picobot.errors import ToolError
from picobot.mcp.adapter import LinkError, LinkTimeout
from picobot.mcp.arguments import check_arguments
from picobot.tools.base import Tool, ToolContext

if TYPE_CHECKING:
    from picobot.mcp.server import McpServer


class McpTool(Tool):
    def __init__(self, server: "McpServer", remote_name: str, name: str, description: str,
                 parameters: dict[str, Any]) -> None:
        self.server = server
        self.remote_name = remote_name
        self.name = name
        self.description = description
        self.parameters = parameters

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        check_arguments(self.name, args)
        label = f"MCP server {self.server.name!r}"
        # an MCP tool may change things: like a file write, none starts once the turn is over
        with ctx.gate.side_effect():
            try:
                result = self.server.call(self.remote_name, args, ctx.cancel)
            except LinkTimeout:
                raise ToolError(f"{label} did not answer {self.remote_name} within {self.server.timeout:g} s, so "
                                "the call was cut off. Try again with a smaller request, or do without this tool.") from None
            except LinkError as exc:
                raise ToolError(f"{label} could not run {self.remote_name}: {exc}. A new call "
                                "reconnects; if it keeps failing, do without this tool.") from None
        if result.is_error:
            raise ToolError(f"{self.remote_name} (on {label}) returned an error: {result.text}")
        return result.text
