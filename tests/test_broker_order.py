"""A worker takes outbound tasks (replies, platform events) before queued turns, on a real Redis broker."""

from __future__ import annotations

from typing import Any

from kombu import Consumer, Queue

from picobot.config import Config
from picobot.runtime.task_names import ALL_QUEUES, DELIVER_TASK, QUEUE_OUTBOUND, QUEUE_TURNS, TURN_TASK
from worker.celery_app import make_celery


def _take(app: Any, n: int) -> list[str]:
    """The queues of the next n messages a worker consuming every queue (in -Q order) receives."""
    got: list[str] = []
    with app.connection_for_read() as conn:
        channel = conn.channel()
        queues = [Queue(name, routing_key=name) for name in ALL_QUEUES]
        consumer = Consumer(channel, queues=queues, accept=["json"],
                            callbacks=[lambda body, msg: (got.append(msg.delivery_info["routing_key"]), msg.ack())])
        with consumer:
            while len(got) < n:
                conn.drain_events(timeout=5)
    return got


def test_outbound_is_taken_before_a_backlog_of_turns(redis_url: str) -> None:
    app = make_celery(Config(redis_url=redis_url))
    for i in range(5):
        app.send_task(TURN_TASK, args=[f"s{i}"], queue=QUEUE_TURNS)
    app.send_task(DELIVER_TASK, args=["feishu", "oc_1"], queue=QUEUE_OUTBOUND)
    app.send_task(TURN_TASK, args=["s5"], queue=QUEUE_TURNS)
    app.send_task(DELIVER_TASK, args=["feishu", "oc_2"], queue=QUEUE_OUTBOUND)
    order = _take(app, 8)
    assert order[:2] == [QUEUE_OUTBOUND, QUEUE_OUTBOUND]
    assert order[2:] == [QUEUE_TURNS] * 6  # the turns still all run, oldest first
