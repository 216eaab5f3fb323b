"""The web's turn message, pushed straight onto the broker's list, is the message `send_task` builds;
a real worker runs turns enqueued that way in every other test that sends a message."""

from __future__ import annotations

import base64
import json
from typing import Any

import redis
from kombu import Consumer, Queue

from picobot.config import Config
from picobot.runtime.task_names import QUEUE_TURNS, TURN_TASK
from worker import turn_message
from worker.celery_app import make_celery
from worker.queue import CeleryTaskQueue

IDS = {("headers", "id"), ("headers", "root_id"), ("properties", "correlation_id"), ("properties", "delivery_tag"),
       ("headers", "origin"), ("properties", "reply_to")}


def _parts(raw: bytes) -> dict[str, Any]:
    """A pushed message with its per-message ids blanked and its body decoded."""
    msg = json.loads(raw)
    msg["body"] = json.loads(base64.b64decode(msg["body"]))
    for section, key in IDS:
        assert msg[section][key], (section, key)  # present and set
        msg[section][key] = "<id>"
    return msg


def test_a_direct_turn_message_is_what_send_task_pushes(redis_url: str) -> None:
    app = make_celery(Config(redis_url=redis_url))
    queue = CeleryTaskQueue(app)
    assert turn_message.usable(app) and queue._turns is not None
    r = redis.Redis.from_url(redis_url)
    for q in (QUEUE_TURNS, "host.h1"):
        app.send_task(TURN_TASK, args=["web:a b'c"], queue=q)
        queue.enqueue_turn("web:a b'c", queue=q)
        direct, celerys = r.lrange(q, 0, -1)  # LPUSH: the newest first
        assert _parts(direct) == _parts(celerys)
        ids = json.loads(direct)
        assert ids["headers"]["id"] == ids["headers"]["root_id"] == ids["properties"]["correlation_id"]


def test_the_consumer_reads_a_direct_turn_message(redis_url: str) -> None:
    app = make_celery(Config(redis_url=redis_url))
    CeleryTaskQueue(app).enqueue_turn("web:chat-1")
    got: list[tuple[Any, Any]] = []
    with app.connection_for_read() as conn:
        consumer = Consumer(conn.channel(), queues=[Queue(QUEUE_TURNS, routing_key=QUEUE_TURNS)], accept=["json"],
                            callbacks=[lambda body, msg: (got.append((body, msg.headers)), msg.ack())])
        with consumer:
            conn.drain_events(timeout=5)
    (body, headers), = got
    assert body[0] == ["web:chat-1"] and headers["task"] == TURN_TASK


def test_send_task_is_kept_where_a_message_would_change_on_its_way(redis_url: str) -> None:
    traced = make_celery(Config(redis_url=redis_url, tracing={"enabled": True}))
    assert not turn_message.usable(traced) and CeleryTaskQueue(traced)._turns is None
    prefixed = make_celery(Config(redis_url=redis_url))
    prefixed.conf.broker_transport_options = {"global_keyprefix": "pb:"}
    assert not turn_message.usable(prefixed)
