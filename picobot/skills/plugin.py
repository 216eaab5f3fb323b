"""Skills on the plugin SDK: the skill tools and the skill index in every model call's note."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from picobot.plugins import hookimpl

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports
    from picobot.skills import SkillCatalog
    from picobot.tools.registry import ToolRegistry


class SkillsPlugin:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._catalog: SkillCatalog | None = None

    def catalog(self, ports: "Ports") -> "SkillCatalog | None":
        """The skill catalog of this home and workspace; None when `skills.enabled` is false."""
        if not ports.config.skills.enabled:
            return None
        with self._lock:
            if self._catalog is None:
                from picobot.skills import SkillCatalog, SkillPaths

                self._catalog = SkillCatalog(SkillPaths.from_config(ports.config), ports.config.skills)
            return self._catalog

    @hookimpl
    def picobot_tools(self, ports: "Ports") -> list[Any]:
        catalog = self.catalog(ports)
        if catalog is None:
            return []
        from picobot.skills.events import SkillEvents
        from picobot.skills.tools import skill_tools

        return skill_tools(catalog, SkillEvents(ports.db))

    @hookimpl
    def picobot_prompt_index(self, ports: "Ports", registry: "ToolRegistry", skills: Any = None) -> str:
        """The skill index (of the agent's allowed `skills`); "" when skills are off or skill_activate
        is not among the agent's tools."""
        catalog = self.catalog(ports)
        if catalog is None or "skill_activate" not in registry:
            return ""
        return catalog.index_text(skills)
