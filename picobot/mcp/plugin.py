"""MCP on the plugin SDK: servers started with the tool registry, /mcp, the /health entry."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from picobot.plugins import Command, hookimpl

if TYPE_CHECKING:
    from picobot.mcp import McpManager
    from picobot.runtime.ports import Ports
    from picobot.tools.registry import ToolRegistry


class McpPlugin:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._manager: McpManager | None = None

    def statuses(self) -> list[dict[str, Any]]:
        """State of each MCP server in this process (empty until the tools were built)."""
        with self._lock:
            manager = self._manager
        return manager.statuses() if manager is not None else []

    @hookimpl
    def picobot_started(self, ports: "Ports", registry: "ToolRegistry") -> None:
        from picobot.mcp import start_mcp

        manager = start_mcp(ports.config, registry)  # connects in the background; tools join when up
        with self._lock:
            old, self._manager = self._manager, manager
        if old is not None:
            old.close()

    @hookimpl
    def picobot_commands(self, ports: "Ports") -> list[Command]:
        def mcp(ctx: Any, args: str) -> dict[str, Any]:
            from picobot.mcp import status

            servers = status.summary(ports.config, status.read(ports.redis))
            return {"text": status.text(servers), "data": {"servers": servers}}

        return [Command("mcp", "MCP servers: state, tool count, last error", mcp)]

    @hookimpl
    def picobot_health(self, ports: "Ports") -> dict[str, Any]:
        from picobot.mcp.status import health

        try:
            return {"mcp": health(ports.config, ports.redis)}
        except Exception as exc:  # a failing dependency is a result here, not an error
            return {"mcp": {"ok": False, "detail": f"{type(exc).__name__}: {exc}"[:300]}}

    @hookimpl
    def picobot_close(self) -> None:
        with self._lock:
            manager, self._manager = self._manager, None
        if manager is not None:
            manager.close()
