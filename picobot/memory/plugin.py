"""Memory on the plugin SDK: its tools, recall into each turn, compaction after and during a turn,
the maintenance event, and the previous context of a compacted dialog."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from picobot.domain.messages import ChatMessage
from picobot.domain.scope import scope_key_for
from picobot.errors import ToolError
from picobot.memory.ports import memory_ports
from picobot.plugins import hookimpl
from picobot.runtime.task_names import (COMPACT_TASK, MEMORY_MAINTENANCE_CRON, MEMORY_MAINTENANCE_JOB,
                                        MEMORY_MAINTENANCE_TASK)

if TYPE_CHECKING:
    from picobot.memory import MemoryStore
    from picobot.memory.knowledge import KnowledgeBase
    from picobot.plugins.types import StageContext, TurnView
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.memory")


class MemoryPlugin:
    """One per process: the memory store and knowledge base, built on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._store: MemoryStore | None = None
        self._knowledge: KnowledgeBase | None = None

    def store(self, ports: "Ports") -> "MemoryStore | None":
        """The long-term memory store; None when `memory.enabled` is false."""
        if not ports.config.memory.enabled:
            return None
        with self._lock:
            if self._store is None:
                from picobot.memory import MemoryStore

                self._store = MemoryStore(ports.db, ports.config.memory.max_content_chars)
            return self._store

    def knowledge(self, ports: "Ports") -> "KnowledgeBase | None":
        """The knowledge documents of the workspace (written there) and the home; None when memory is off."""
        if not ports.config.memory.enabled:
            return None
        with self._lock:
            if self._knowledge is None:
                from picobot.memory.knowledge import KnowledgeBase

                workspace = ports.config.workspace_path() / "knowledge"
                self._knowledge = KnowledgeBase([("workspace", workspace), ("home", ports.config.home / "knowledge")],
                                                workspace)
            return self._knowledge

    @hookimpl
    def picobot_tasks(self, register: Any) -> None:
        register(COMPACT_TASK, _compact, queue="maintenance")
        register(MEMORY_MAINTENANCE_TASK, _maintain, queue="maintenance")

    @hookimpl
    def picobot_beat(self, register: Any, config: Any) -> None:
        """Every 4 hours in time.timezone; a plain beat entry only while the scheduler is off (scheduler.enabled
        false) — otherwise the builtin scheduled job builtin.memory_maintenance_daily runs it. Expires: a run the
        workers could not start within the hour is dropped, not piled up behind the next."""
        if config.scheduler.enabled or not (config.memory.enabled and config.memory.maintenance_enabled):
            return
        register(MEMORY_MAINTENANCE_JOB, MEMORY_MAINTENANCE_TASK, cron=MEMORY_MAINTENANCE_CRON, queue="maintenance",
                 expires=3600)

    @hookimpl
    def picobot_tools(self, ports: "Ports") -> list[Any]:
        store, knowledge = self.store(ports), self.knowledge(ports)
        if store is None or knowledge is None:
            return []
        from picobot.memory.knowledge_tools import knowledge_tools
        from picobot.memory.tools import memory_tools

        return memory_tools(store) + knowledge_tools(knowledge)

    @hookimpl
    def picobot_turn_notes(self, ctx: "StageContext", turn_input: str, ports: "Ports") -> list[ChatMessage]:
        """The user's knowledge memories matching this turn's text, as a runtime note (0 or 1 message)."""
        store = self.store(ports)
        if store is None:
            return []
        from picobot.memory.recall import recall_note

        try:
            scope = scope_key_for(ctx.channel, ctx.sender_id)
        except ToolError:  # no sender to remember anything for
            return []
        note = recall_note(store, scope, turn_input, ports.config.memory.recall_limit)
        return [note] if note is not None else []

    @hookimpl
    def picobot_history_prefix(self, ctx: "StageContext", history: list[ChatMessage], compacted: bool,
                               ports: "Ports") -> list[ChatMessage]:
        """`[Previous Context]` for a compacted session whose active history lacks its summary."""
        from picobot.memory import compaction, compactor

        if not compacted or compaction.has_summary(history):
            return []
        restored = compactor.previous_context(memory_ports(ports), ctx.channel, ctx.sender_id)
        return [restored] if restored is not None else []

    @hookimpl
    def picobot_context_overflow(self, ctx: "StageContext", error: str, ports: "Ports",
                                 cancel: Any) -> list[ChatMessage] | None:
        """Compact in the turn's thread against the provider's limit, then the stored history.

        The turn's own input counts as one of the user turns kept whole, so one fewer stored one is kept.
        """
        from picobot.memory import compaction, compactor

        outcome = compactor.compact_session(memory_ports(ports), ctx.session_id, force=True,
                                            limit_tokens=compaction.context_limit(error),
                                            keep=compaction.KEEP_USER_TURNS - 1, cancel=cancel)
        if outcome.status not in ("compacted", "lost"):  # lost: another compaction won; its result is stored
            return None
        return compactor.active_history(memory_ports(ports), ctx.session_id)

    @hookimpl
    def picobot_turn_finished(self, turn: "TurnView", ports: "Ports") -> None:
        """After a committed turn: the cheap estimate, and a background compaction when over budget."""
        if turn.committed:
            from picobot.memory import compactor

            compactor.schedule_if_needed(memory_ports(ports), turn.session_id, turn.agent,
                                         list(turn.history) + list(turn.messages))

    @hookimpl
    def picobot_internal_event(self, name: str, ports: "Ports") -> bool | None:
        if name != "memory_maintenance":
            return None
        from picobot.memory.maintenance import run_maintenance

        run_maintenance(memory_ports(ports))
        return True


def _compact(ports: "Ports", session_id: str, force: bool = False) -> str:
    """Fold the session's older history into a summary (see picobot.memory.compactor)."""
    from picobot.memory.compactor import run_background

    return run_background(ports, session_id, force=bool(force)).status  # type: ignore[arg-type]


def _maintain(ports: "Ports") -> dict:
    """Tidy the memories of the user scopes that changed, then AGENT.md's managed block."""
    from picobot.memory.maintenance import run_maintenance

    return run_maintenance(ports).to_dict()  # type: ignore[arg-type]
