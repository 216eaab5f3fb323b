"""The delegates capability on the plugin SDK: `delegate_to_cli` when `delegates` is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from picobot.plugins import hookimpl

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports


class DelegatesPlugin:
    @hookimpl
    def picobot_tools(self, ports: "Ports") -> list[Any]:
        if not ports.config.delegates:
            return []
        from picobot.delegates.tool import DelegateTool

        return [DelegateTool(ports.config.delegates, ports.config.home)]
