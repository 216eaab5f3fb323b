"""The TaskQueue seam, implemented with Celery."""

from __future__ import annotations

from celery import Celery

from picobot.runtime.task_names import (
    COMPACT_TASK, QUEUE_MAINTENANCE, QUEUE_SUBAGENTS, QUEUE_TURNS, SUBAGENT_TASK, TURN_TASK,
)


class CeleryTaskQueue:
    def __init__(self, app: Celery):
        self.app = app

    def enqueue_turn(self, session_id: str) -> None:
        self.app.send_task(TURN_TASK, args=[session_id], queue=QUEUE_TURNS)

    def enqueue_compaction(self, session_id: str, force: bool = False) -> None:
        # never on `turns`: a compaction must not hold up anyone's turn
        self.app.send_task(COMPACT_TASK, args=[session_id, force], queue=QUEUE_MAINTENANCE)

    def enqueue_subagent(self, run_id: str) -> None:
        self.app.send_task(SUBAGENT_TASK, args=[run_id], queue=QUEUE_SUBAGENTS)
