"""The TaskQueue seam, implemented with Celery."""

from __future__ import annotations

from celery import Celery

from picobot.runtime.task_names import QUEUE_TURNS, TURN_TASK


class CeleryTaskQueue:
    def __init__(self, app: Celery):
        self.app = app

    def enqueue_turn(self, session_id: str) -> None:
        self.app.send_task(TURN_TASK, args=[session_id], queue=QUEUE_TURNS)
