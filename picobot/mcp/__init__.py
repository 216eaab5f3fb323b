"""MCP servers: their tools registered beside the built-ins, connected per worker process.

`start_mcp(config, registry)` returns an `McpManager` that connects every active server of
`mcpServers` in the background and registers each server's tools once it connects. The
async MCP client runs only in `adapter.py`, on one event-loop thread per process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from picobot.config.schema import Config, McpServerConfig
from picobot.mcp.adapter import McpLoop
from picobot.mcp.server import McpServer
from picobot.tools.registry import ToolRegistry

__all__ = ["McpManager", "McpServer", "start_mcp"]


class McpManager:
    """The MCP servers of one process."""

    def __init__(self, servers: dict[str, McpServerConfig], registry: ToolRegistry, cwd: Path | str,
                 secrets: frozenset[str] = frozenset()) -> None:
        active = any(cfg.is_active for cfg in servers.values())
        self._loop = McpLoop() if active else None
        self.servers = {key: McpServer(key, cfg, self._loop if cfg.is_active else None, registry,
                                       resolve_cwd(cfg, cwd), secrets)
                        for key, cfg in servers.items()}

    def start(self) -> "McpManager":
        for server in self.servers.values():
            server.start()
        return self

    def statuses(self) -> list[dict[str, Any]]:
        return [server.status() for server in self.servers.values()]

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
        if self._loop is not None:
            self._loop.close()


def resolve_cwd(cfg: McpServerConfig, workspace: Path | str) -> Path:
    """A stdio server's working directory: `cwd` (relative to the workspace), else the workspace."""
    base = Path(workspace)
    if cfg.cwd:
        return base / Path(cfg.cwd).expanduser()  # an absolute cwd replaces the base
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # connecting reports the missing directory as this server's failure, not the worker's
    return base


def start_mcp(config: Config, registry: ToolRegistry) -> McpManager | None:
    """Connect the configured servers in the background; None when there are none."""
    from picobot.config.secrets import secret_values

    if not config.mcp_servers:
        return None
    secrets = frozenset(secret_values(config))
    return McpManager(config.mcp_servers, registry, config.workspace_path(), secrets).start()
