"""A task queue for CLI commands that run in-process and start no background work."""

from __future__ import annotations

from typing import Any


class NoQueue:
    """Satisfies TaskQueue (runtime/ports.py); any enqueue is a bug in the command: it raises, naming it."""

    def __init__(self, command: str) -> None:
        self.command = command

    def _refuse(self, what: str) -> None:
        raise RuntimeError(f"{self.command} enqueues no {what}")

    def enqueue_turn(self, session_id: str, queue: str = "turns") -> None:
        self._refuse("turns")

    def enqueue_compaction(self, session_id: str, force: bool = False, queue: str = "maintenance") -> None:
        self._refuse("compactions")

    def enqueue_subagent(self, run_id: str, queue: str = "subagents") -> None:
        self._refuse("sub-agent runs")

    def enqueue_job(self, job_id: str, due_at: float | None) -> None:
        self._refuse("jobs")

    def enqueue_delivery(self, channel: str, chat_id: str, countdown: float = 0) -> None:
        self._refuse("deliveries")

    def enqueue_channel_event(self, event_id: int) -> None:
        self._refuse("channel events")

    def enqueue_hook_callback(self, run_id: str, countdown: float = 0) -> None:
        self._refuse("webhook callbacks")

    def enqueue_background(self, task: str, args: list[Any], queue: str = "maintenance", countdown: float = 0) -> None:
        self._refuse("background tasks")
