"""The browser on the plugin SDK: its tools, its /health entry, and closing Chromium with the process."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from picobot.plugins import hookimpl

if TYPE_CHECKING:
    from picobot.browser.engine import BrowserEngine
    from picobot.runtime.ports import Ports


class BrowserPlugin:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine: BrowserEngine | None = None

    def engine(self, ports: "Ports") -> "BrowserEngine":
        """The process's one engine (Chromium starts only on the first browser call)."""
        from picobot.browser.engine import BrowserEngine
        from picobot.security.netpolicy import NetworkPolicy

        with self._lock:
            if self._engine is None:
                config = ports.config
                policy = NetworkPolicy.from_allow(config.tools.network.allow)
                self._engine = BrowserEngine(config.browser, policy, config.home)
            return self._engine

    @hookimpl
    def picobot_tools(self, ports: "Ports") -> list[Any]:
        if not ports.config.browser.enabled:
            return []
        from picobot.browser.tool import BrowserProfilesTool, BrowserTool

        engine = self.engine(ports)
        # browser_profiles only when asked for: `persistent_id` creates a profile on first use, and a tool
        # in every prompt for labelling and deleting profiles costs more than it is used
        return [BrowserTool(engine)] + ([BrowserProfilesTool(engine)] if ports.config.browser.profiles_tool else [])

    @hookimpl
    def picobot_health(self, ports: "Ports") -> dict[str, Any] | None:
        """Whether this machine has a Chromium; never a reason for a load balancer to pull the gateway."""
        if not ports.config.browser.enabled:
            return None
        from picobot.browser.engine import chromium_path, chromium_problem

        path = chromium_path(ports.config.browser.executable)
        problem = chromium_problem(path)
        return {"browser": {"ok": True, "available": problem is None, "executable": path,
                            "detail": problem or f"chromium at {path}"}}

    @hookimpl
    def picobot_close(self) -> None:
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
