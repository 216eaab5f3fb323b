"""The runtime's shared parts, built once per process and handed to whoever needs them."""

from __future__ import annotations

import os
import socket
import threading
from functools import cached_property
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import redis

from picobot.config import Config
from picobot.errors import ConfigError
from picobot.providers.base import Provider
from picobot.runtime.control import TurnSupervisor
from picobot.runtime.publisher import EventPublisher
from picobot.storage.db import Database
from picobot.runtime.history_cache import HistoryCache
from picobot.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from picobot.channels.registry import ChannelRegistry
    from picobot.mcp import McpManager
    from picobot.memory import MemoryStore
    from picobot.memory.knowledge import KnowledgeBase
    from picobot.skills import SkillCatalog
    from picobot.tools.base import Tool


class TaskQueue(Protocol):
    """The one seam to the task system (Celery in production)."""

    def enqueue_turn(self, session_id: str, queue: str = "turns") -> None: ...  # queue: a scheduled job's turn

    def enqueue_compaction(self, session_id: str, force: bool = False) -> None: ...

    def enqueue_subagent(self, run_id: str) -> None: ...

    def enqueue_job(self, job_id: str, due_at: float | None) -> None: ...  # fire a scheduled job now (run now)

    def enqueue_delivery(self, channel: str, chat_id: str, countdown: float = 0) -> None: ...  # outbox lane

    def enqueue_channel_event(self, event_id: int) -> None: ...  # a recorded platform event


def connect_redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True, health_check_interval=30,
                                socket_connect_timeout=5, retry_on_timeout=True)


@dataclass
class Runtime:
    config: Config
    db: Database
    redis: redis.Redis
    queue: TaskQueue
    worker_name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    _providers: dict[str, Provider] = field(default_factory=dict)
    _tools: ToolRegistry | None = None
    _mcp: McpManager | None = None  # MCP servers of this process, started with the tools
    _publisher: EventPublisher | None = None
    _supervisor: TurnSupervisor | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    active_turns: set[str] = field(default_factory=set)  # turn ids running in this process
    history: HistoryCache = field(default_factory=HistoryCache)  # histories of recent turns here

    def active_turn_ids(self) -> list[str]:
        with self._lock:
            return list(self.active_turns)

    def track_turn(self, turn_id: str, running: bool) -> None:
        with self._lock:
            (self.active_turns.add if running else self.active_turns.discard)(turn_id)

    @cached_property
    def secrets(self) -> frozenset[str]:
        from picobot.config.secrets import secret_values

        return frozenset(secret_values(self.config))

    @property
    def publisher(self) -> EventPublisher:
        with self._lock:
            if self._publisher is None:
                self._publisher = EventPublisher(self.redis, self.config.gateway.snapshot_interval_ms)
            return self._publisher

    @property
    def supervisor(self) -> TurnSupervisor:
        with self._lock:
            if self._supervisor is None:
                self._supervisor = TurnSupervisor(self.redis, self.config.gateway.turn_lease_secs)
            return self._supervisor

    def provider(self, key: str) -> Provider:
        with self._lock:
            if key not in self._providers:
                from picobot.providers import build_provider

                cfg = self.config.providers.get(key)
                if cfg is None:
                    raise ConfigError(f"providers.{key}", "no such provider is configured "
                                      "(set OPENAI_API_KEY / OPENAI_BASE_URL or ANTHROPIC_API_KEY, or add it to config.json)")
                self._providers[key] = build_provider(key, cfg)
            return self._providers[key]

    def tools(self) -> ToolRegistry:
        with self._lock:
            if self._tools is None:
                from picobot.tools import build_registry

                from picobot.mcp import start_mcp

                self._tools = build_registry(disabled=self.config.tools.disabled, extra=self._extra_tools())
                # connects in the background; each server's tools join the registry when it is up
                self._mcp = start_mcp(self.config, self._tools)
            return self._tools

    def mcp_statuses(self) -> list[dict[str, Any]]:
        """State of each MCP server in this process (empty until the tools were built)."""
        with self._lock:
            mcp = self._mcp
        return mcp.statuses() if mcp is not None else []

    def _extra_tools(self) -> list[Tool]:
        return self._skill_tools() + self._memory_tools() + self._subagent_tools() + self._scheduler_tools()

    def _scheduler_tools(self) -> list[Tool]:
        if not self.config.scheduler.enabled:
            return []
        from picobot.tools.scheduler import SchedulerTool

        return [SchedulerTool(self)]

    def _subagent_tools(self) -> list[Tool]:
        if not self.config.subagents.enabled:
            return []
        from picobot.subagents.tool import TaskTool

        return [TaskTool(self)]

    def _skill_tools(self) -> list[Tool]:
        if self.skills is None:
            return []
        from picobot.skills.events import SkillEvents
        from picobot.tools.skills import skill_tools

        return skill_tools(self.skills, SkillEvents(self.db))

    def _memory_tools(self) -> list[Tool]:
        if self.memory is None or self.knowledge is None:
            return []
        from picobot.tools.knowledge import knowledge_tools
        from picobot.tools.memory import memory_tools

        return memory_tools(self.memory) + knowledge_tools(self.knowledge)

    @cached_property
    def channels(self) -> "ChannelRegistry":
        """The adapters of the configured channels, built lazily."""
        from picobot.channels.registry import ChannelRegistry

        return ChannelRegistry(self)

    @cached_property
    def memory(self) -> "MemoryStore | None":
        """The long-term memory store; None when `memory.enabled` is false."""
        if not self.config.memory.enabled:
            return None
        from picobot.memory import MemoryStore

        return MemoryStore(self.db, self.config.memory.max_content_chars)

    @cached_property
    def knowledge(self) -> "KnowledgeBase | None":
        """The knowledge documents of the workspace (written there) and the home; None when memory is off."""
        if not self.config.memory.enabled:
            return None
        from picobot.memory.knowledge import KnowledgeBase

        workspace = self.config.workspace_path() / "knowledge"
        return KnowledgeBase([("workspace", workspace), ("home", self.config.home / "knowledge")], workspace)

    @cached_property
    def skills(self) -> "SkillCatalog | None":
        """The skill catalog of this home and workspace; None when `skills.enabled` is false."""
        if not self.config.skills.enabled:
            return None
        from picobot.skills import SkillCatalog, SkillPaths

        return SkillCatalog(SkillPaths.from_config(self.config), self.config.skills)

    def skill_index(self) -> str:
        """The skill index for a turn's prompt; "" when skills are off or skill_activate is disabled."""
        if self.skills is None or "skill_activate" not in self.tools():
            return ""
        return self.skills.index_text()

    def close(self) -> None:
        """Stop the runtime's threads and connections (for a runtime built in process, e.g. tests)."""
        with self._lock:
            supervisor, self._supervisor = self._supervisor, None
            mcp, self._mcp = self._mcp, None
        if supervisor is not None:
            supervisor.close()
        if mcp is not None:
            mcp.close()
        self.db.dispose()
        self.redis.close()  # the client owns its pool (from_url): this closes its connections


def build_runtime(config: Config, queue: TaskQueue, migrate: bool = False) -> Runtime:
    from picobot.runtime.redis_url import resolve_redis_url

    db = Database(config.database_url)
    if migrate:
        db.migrate()
    return Runtime(config=config, db=db, redis=connect_redis(resolve_redis_url(config)), queue=queue)
