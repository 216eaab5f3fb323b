"""Gauges read when /metrics is scraped: cheap reads of Redis and SQL, each part guarded on its own.

Queue depths come from the broker: Redis lists or RabbitMQ queues (picobot/runtime/broker_queues.py).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import select

from picobot.runtime import broker_queues
from picobot.runtime.task_names import ALL_QUEUES
from picobot.storage import outbox
from picobot.storage.models import JobRunRow

log = logging.getLogger("picobot.observability")

LAG_RUNS = 100  # the scheduler lag is read from this many newest job runs
_RUNS = JobRunRow.__table__
_RECENT_RUNS = (select(_RUNS.c.due_at, _RUNS.c.created_at).where(_RUNS.c.due_at > 0)
                .order_by(_RUNS.c.id.desc()).limit(LAG_RUNS))


def queue_depths(ports: Any) -> GaugeMetricFamily:
    g = GaugeMetricFamily("picobot_queue_depth", "Tasks waiting in each task queue (Redis lists or RabbitMQ queues)",
                          labels=["queue"])
    for queue, depth in broker_queues.configured_depths(ports.config, ALL_QUEUES, ports.redis).items():
        g.add_metric([queue], depth)
    return g


def deliveries(db: Any) -> GaugeMetricFamily:
    g = GaugeMetricFamily("picobot_deliveries", "Outbox deliveries to external channels, by channel and state",
                          labels=["channel", "state"])
    with db.connect() as conn:
        counts = outbox.counts(conn)
    for channel, states in sorted(counts.items()):
        for state, n in sorted(states.items()):
            g.add_metric([channel, state], n)
    return g


def scheduler_lag(db: Any) -> Iterator[GaugeMetricFamily]:
    with db.connect() as conn:
        lags = [max(0.0, float(fired) - float(due)) for due, fired in conn.execute(_RECENT_RUNS)]
    last = GaugeMetricFamily("picobot_scheduler_lag_seconds",
                             "How late the newest scheduled job run fired (fired - due)")
    worst = GaugeMetricFamily("picobot_scheduler_lag_max_seconds",
                              f"The largest fired - due among the {LAG_RUNS} newest job runs")
    if lags:
        last.add_metric([], lags[0])
        worst.add_metric([], max(lags))
    yield last
    yield worst


def gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, help_text)
    g.add_metric([], value)
    return g


def guarded(part: str, read: Callable[[], Any], errors: dict[str, int]) -> list[Any]:
    """What `read` gives (a family or several), or nothing when it fails: one part never breaks a scrape."""
    try:
        found = read()
    except Exception as exc:  # Redis or the database away: the other parts still answer
        errors[part] = 1
        log.warning("metrics: %s could not be read (%s)", part, type(exc).__name__)
        return []
    errors[part] = 0
    return list(found) if not hasattr(found, "samples") else [found]
