"""The TaskQueue seam, implemented with Celery."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from worker import turn_message
from picobot.runtime.redis_url import resolve_broker_url
from picobot.runtime.task_names import (
    CHANNEL_EVENT_TASK, COMPACT_TASK, DELIVER_TASK, HOOK_CALLBACK_TASK, JOB_FIRE_TASK, QUEUE_OUTBOUND, QUEUE_MAINTENANCE, QUEUE_SCHEDULED, QUEUE_SUBAGENTS, QUEUE_TURNS, SUBAGENT_TASK,
    TURN_TASK,
)

if TYPE_CHECKING:
    from celery import Celery

    from picobot.config import Config


class CeleryTaskQueue:
    def __init__(self, app: "Celery | None" = None, *, make: "Callable[[], Celery] | None" = None,
                 turns: turn_message.TurnPublisher | None = None):
        """On `app`; or on the app `make` makes at its first use, with `turns` publishing the turns meanwhile."""
        self._app, self._make, self._lock = app, make, threading.Lock()
        if app is not None:
            # a turn's message straight onto the Redis list where the broker allows it (worker/turn_message.py)
            turns = turn_message.TurnPublisher.for_app(app) if turn_message.usable(app) else None
        self._turns = turns

    @classmethod
    def lazy(cls, config: "Config", make: "Callable[[], Celery]") -> "CeleryTaskQueue":
        """The web's queue: its turns go out as direct messages, told from the config, and the Celery app (~14 MB
        and ~0.15 s of imports) is made on the first other send (a platform event, a delivery, a job run now, a
        compaction) — or at once where a turn needs `send_task` (another broker, tracing)."""
        if not turn_message.usable_for(config):
            return cls(make())  # every turn goes through it
        return cls(make=make, turns=turn_message.TurnPublisher(resolve_broker_url(config)))

    @property
    def app(self) -> "Celery":
        if self._app is None:
            with self._lock:
                if self._app is None:
                    assert self._make is not None
                    self._app = self._make()
        return self._app

    def enqueue_turn(self, session_id: str, queue: str = QUEUE_TURNS) -> None:
        # queue: QUEUE_SCHEDULED for a scheduled job's turn (never on the turns queue's slots)
        if self._turns is not None:
            self._turns.publish(session_id, queue)
        else:
            self.app.send_task(TURN_TASK, args=[session_id], queue=queue)

    def enqueue_compaction(self, session_id: str, force: bool = False, queue: str = QUEUE_MAINTENANCE) -> None:
        # never on `turns`: a compaction must not hold up anyone's turn; queue: the host queue of the
        # worker host holding the session's chat (runtime/placement.py)
        self.app.send_task(COMPACT_TASK, args=[session_id, force], queue=queue)

    def enqueue_background(self, task: str, args: list[Any], queue: str = QUEUE_MAINTENANCE, countdown: float = 0) -> None:
        # a capability's or a plugin's background work (a dialog's title, a plugin task): never on `turns`
        if queue == QUEUE_TURNS:
            raise ValueError("background work never takes a turn's slot (queue turns)")
        self.app.send_task(task, args=args, queue=queue, countdown=countdown or None)

    def enqueue_subagent(self, run_id: str, queue: str = QUEUE_SUBAGENTS) -> None:
        # queue: the host queue of the worker host holding the run's chat (runtime/placement.py)
        self.app.send_task(SUBAGENT_TASK, args=[run_id], queue=queue)

    def enqueue_job(self, job_id: str, due_at: float | None) -> None:
        """Fire a job now, outside its schedule (run now): a run of its own, the schedule untouched."""
        self.app.send_task(JOB_FIRE_TASK, args=[job_id, due_at], kwargs={"manual": True}, queue=QUEUE_SCHEDULED)

    def enqueue_delivery(self, channel: str, chat_id: str, countdown: float = 0) -> None:
        """Deliver the outbox lane of one chat (after `countdown` seconds: a backoff)."""
        self.app.send_task(DELIVER_TASK, args=[channel, chat_id], queue=QUEUE_OUTBOUND,
                           countdown=countdown or None)

    def enqueue_channel_event(self, event_id: int) -> None:
        self.app.send_task(CHANNEL_EVENT_TASK, args=[event_id], queue=QUEUE_OUTBOUND)

    def enqueue_hook_callback(self, run_id: str, countdown: float = 0) -> None:
        """One attempt at a webhook run's result callback (after `countdown` seconds: a backoff)."""
        self.app.send_task(HOOK_CALLBACK_TASK, args=[run_id], queue=QUEUE_OUTBOUND, countdown=countdown or None)
