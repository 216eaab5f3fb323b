"""The TaskQueue seam, implemented with Celery."""

from __future__ import annotations

from celery import Celery


class CeleryTaskQueue:
    def __init__(self, app: Celery):
        self.app = app

    def enqueue_turn(self, session_id: str) -> None:
        from worker.celery_app import QUEUE_TURNS, TURN_TASK

        self.app.send_task(TURN_TASK, args=[session_id], queue=QUEUE_TURNS)
