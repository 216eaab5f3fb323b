"""Celery's task events, less `task-started`.

With `-E` a worker publishes three events per task: received, started, succeeded (or failed).
Flower names a task from `task-received` and learns its end and runtime from `task-succeeded`;
`task-started` only moves it from RECEIVED to STARTED for the few milliseconds before the turn's
model call, and costs a publish per turn (~2 % of a worker's CPU per turn, docs/BENCHMARKS.md).
Selected by `PicoCelery.events_cls` (worker/celery_app.py).
"""

from __future__ import annotations

from typing import Any

from celery.app.events import Events as CeleryEvents
from celery.events.dispatcher import EventDispatcher as CeleryDispatcher

SKIPPED = frozenset({"task-started"})


class EventDispatcher(CeleryDispatcher):
    def send(self, type: str, *args: Any, **kwargs: Any) -> Any:  # noqa: A002 - Celery's own signature
        if type in SKIPPED:
            return None
        return super().send(type, *args, **kwargs)


class Events(CeleryEvents):
    dispatcher_cls = "worker.task_events:EventDispatcher"
