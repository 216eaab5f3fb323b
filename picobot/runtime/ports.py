"""The narrow ports the capabilities get: storage, Redis, config, the task queues, events, hooks.

A capability (channels, scheduler, memory, skills, sub-agents, MCP) types its argument as `Ports`
or one of the queue ports below, never as the composed process object: it sees what it uses.
The composition root (picobot/app) builds the one object that satisfies them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import redis

    from picobot.config import Config
    from picobot.plugins import PluginHost
    from picobot.providers.base import Provider
    from picobot.runtime.publisher import EventPublisher
    from picobot.storage.db import Database
    from picobot.tools.registry import ToolRegistry


class TurnQueue(Protocol):
    def enqueue_turn(self, session_id: str, queue: str = "turns") -> None: ...  # queue: a scheduled job's turn


class CompactionQueue(Protocol):
    def enqueue_compaction(self, session_id: str, force: bool = False,
                           queue: str = "maintenance") -> None: ...  # queue: its chat's host


class SubagentQueue(Protocol):
    def enqueue_subagent(self, run_id: str, queue: str = "subagents") -> None: ...  # queue: its chat's host


class JobQueue(Protocol):
    def enqueue_job(self, job_id: str, due_at: float | None) -> None: ...  # fire a scheduled job now (run now)


class DeliveryQueue(Protocol):
    def enqueue_delivery(self, channel: str, chat_id: str, countdown: float = 0) -> None: ...  # outbox lane

    def enqueue_channel_event(self, event_id: int) -> None: ...  # a recorded platform event


class HookCallbackQueue(Protocol):
    def enqueue_hook_callback(self, run_id: str, countdown: float = 0) -> None: ...  # a webhook run's result POST


class BackgroundQueue(Protocol):
    # a capability's or a plugin's own task, by its stable name (maintenance, outbound, scheduled or subagents)
    def enqueue_background(self, task: str, args: list[Any], queue: str = "maintenance", countdown: float = 0) -> None: ...


class TaskQueue(TurnQueue, CompactionQueue, SubagentQueue, JobQueue, DeliveryQueue, HookCallbackQueue, BackgroundQueue,
                Protocol):
    """The one seam to the task system (Celery in production): every queue port in one."""


class Ports(Protocol):
    """What every part of a process may use."""

    config: Config
    db: Database
    redis: redis.Redis
    queue: TaskQueue
    worker_name: str
    plugins: PluginHost

    @property
    def secrets(self) -> frozenset[str]: ...

    @property
    def publisher(self) -> EventPublisher: ...


class AgentPorts(Ports, Protocol):
    """What a part that runs an agent needs besides: providers, the tool registry, turn tracking."""

    def provider(self, key: str) -> Provider: ...

    def tools(self) -> ToolRegistry: ...

    def track_turn(self, turn_id: str, running: bool) -> None: ...
