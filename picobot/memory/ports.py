"""What the memory capability gets: the agent's ports and its own store and knowledge base."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from picobot.runtime.ports import AgentPorts, Ports

if TYPE_CHECKING:
    from picobot.memory.knowledge import KnowledgeBase
    from picobot.memory.store import MemoryStore


class MemoryPorts(AgentPorts, Protocol):
    @property
    def memory(self) -> MemoryStore | None: ...

    @property
    def knowledge(self) -> KnowledgeBase | None: ...


def memory_ports(ports: Ports) -> MemoryPorts:
    """The ports a hook received (typed as the core's Ports), as this capability uses them: the process's
    App carries the memory store and knowledge base. Checked on the class, so nothing is built here."""
    if not (hasattr(type(ports), "memory") and hasattr(type(ports), "knowledge")):
        raise TypeError(f"{type(ports).__name__} has no memory store")
    return cast(MemoryPorts, ports)
