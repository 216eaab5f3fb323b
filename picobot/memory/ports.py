"""What the memory capability gets: the agent's ports and its own store and knowledge base."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from picobot.runtime.ports import AgentPorts

if TYPE_CHECKING:
    from picobot.memory.knowledge import KnowledgeBase
    from picobot.memory.store import MemoryStore


class MemoryPorts(AgentPorts, Protocol):
    @property
    def memory(self) -> MemoryStore | None: ...

    @property
    def knowledge(self) -> KnowledgeBase | None: ...
