"""Carry the W3C trace context with Celery tasks (connected by make_celery when `tracing.enabled`).

Sending a task from a thread with a current span (the gateway's intake, a turn enqueuing its
delivery) adds `traceparent` to the message headers; Celery hands custom headers to the task as
attributes of `task.request`, where the running side reads them and opens the task's span.
"""

from __future__ import annotations

from typing import Any

from celery import signals

from picobot.observability import propagation

_HEADERS = ("traceparent", "tracestate")


def connect(config: Any) -> None:
    def before_publish(headers: dict | None = None, **_kw: Any) -> None:
        if headers is not None:
            propagation.inject(headers)

    def prerun(task_id: str | None = None, task: Any = None, **_kw: Any) -> None:
        if task_id and task is not None:
            carrier = {k: v for k in _HEADERS if isinstance(v := getattr(task.request, k, None), str)}
            propagation.task_started(config, task_id, task.name, carrier)

    def postrun(task_id: str | None = None, state: str | None = None, **_kw: Any) -> None:
        if task_id:
            propagation.task_finished(task_id, state)

    signals.before_task_publish.connect(before_publish, weak=False)
    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)
