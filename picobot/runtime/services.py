"""The runtime's shared parts, built once per process and handed to whoever needs them."""

from __future__ import annotations

import os
import socket
import threading
from functools import cached_property
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis

from picobot.config import Config
from picobot.errors import ConfigError
from picobot.providers.base import Provider
from picobot.runtime.control import TurnSupervisor
from picobot.runtime.publisher import EventPublisher
from picobot.storage.db import Database
from picobot.runtime.history_cache import HistoryCache
from picobot.runtime.ports import TaskQueue
from picobot.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from picobot.plugins import PluginHost

__all__ = ["Runtime", "TaskQueue", "connect_redis", "open_parts"]


def connect_redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True, health_check_interval=30,
                                socket_connect_timeout=5, retry_on_timeout=True)


@dataclass
class Runtime:
    config: Config
    db: Database
    redis: redis.Redis
    queue: TaskQueue
    plugins: PluginHost
    worker_name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    _providers: dict[str, Provider] = field(default_factory=dict)
    _tools: ToolRegistry | None = None
    _commands: dict | None = None
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
                # a plugin's provider type (picobot_providers) is handed down: providers never import plugins
                self._providers[key] = build_provider(key, cfg, self.plugins.provider_adapters(), self.plugins.report)
            return self._providers[key]

    def tools(self) -> ToolRegistry:
        """The tools of this process: the built-ins, then every plugin's (built-in capabilities too)."""
        with self._lock:
            if self._tools is None:
                from picobot.tools import build_registry

                extra = self.plugins.tools(self.config, self)
                self._tools = build_registry(disabled=self.config.tools.disabled, extra=extra)
                started = self._tools
            else:
                return self._tools
        # outside the lock: a plugin starting background parts (MCP clients) may call back in
        self.plugins.call("picobot_started", ports=self, registry=started)
        return started

    def commands(self) -> dict:
        """Slash commands the plugins add (name without "/" -> picobot.plugins.Command), built once."""
        with self._lock:
            if self._commands is None:
                self._commands = self.plugins.commands(self.config, self)
            return self._commands

    def prompt_index(self, registry: ToolRegistry | None = None, skills: tuple[str, ...] | None = None) -> str:
        """What plugins add to every model call's runtime note (the skill index); "" when none.

        `registry`: the tools of the agent running (default: all); `skills`: its skill allowlist."""
        parts = self.plugins.call("picobot_prompt_index", ports=self, registry=registry if registry is not None else self.tools(),
                                  skills=skills)
        return "\n\n".join(p for p in parts if isinstance(p, str) and p)

    def close(self) -> None:
        """Stop the runtime's threads and connections (for a runtime built in process, e.g. tests)."""
        with self._lock:
            supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.close()
        self.plugins.close()
        self.db.dispose()
        self.redis.close()  # the client owns its pool (from_url): this closes its connections


def open_parts(config: Config, migrate: bool = False) -> tuple[Database, redis.Redis]:
    """The database (migrated when asked) and the Redis client of a process."""
    from picobot.runtime.redis_url import resolve_redis_url

    db = Database(config.database_url)
    if migrate:
        db.migrate()
    return db, connect_redis(resolve_redis_url(config))
