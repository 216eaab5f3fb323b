"""W3C trace context across the task system: into a task's headers when it is sent, out when it runs.

The task system's edge (worker/tracing.py) calls these from its publish and run signals; this
module knows nothing of that system. A task sent without a current span carries nothing, and a
task that arrives without `traceparent` gets no span: only traced work is traced.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from picobot.observability import tracing

_running: dict[str, tuple[Any, Any]] = {}  # task id -> (span, context token), this process's running tasks
_lock = threading.Lock()


def inject(headers: dict[str, Any]) -> None:
    """Add `traceparent` (and `tracestate`) of the current span to a task's headers (nothing without
    OpenTelemetry: sending a task must never fail for tracing's sake)."""
    otel_inject = _injector()
    if otel_inject is not None:
        otel_inject(headers)


@functools.cache
def _injector() -> Any:
    try:
        from opentelemetry.propagate import inject as otel_inject
    except ImportError:
        return None
    return otel_inject


def task_started(config: Any, task_id: str, task_name: str, carrier: dict[str, str]) -> None:
    """Open the task's span under the sender's context and make it current in this thread."""
    if not carrier.get("traceparent"):
        return
    tracer = tracing.setup(config)
    if tracer is None:
        return
    from opentelemetry import context, trace
    from opentelemetry.propagate import extract

    span = tracer.start_span(f"task {task_name}", context=extract(carrier), kind=trace.SpanKind.CONSUMER,
                             attributes={"messaging.operation.type": "process", "picobot.task": task_name,
                                         "messaging.message.id": task_id})
    token = context.attach(trace.set_span_in_context(span))
    with _lock:
        _running[task_id] = (span, token)


def task_finished(task_id: str, state: str | None) -> None:
    with _lock:
        found = _running.pop(task_id, None)
    if found is None:
        return
    from opentelemetry import context
    from opentelemetry.trace import Status, StatusCode

    span, token = found
    if state and state != "SUCCESS":
        span.set_status(Status(StatusCode.ERROR, state))
    try:
        context.detach(token)
    finally:
        span.end()
