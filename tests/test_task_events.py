"""A worker's task events: received and succeeded reach the event channel (Flower), started does not."""

from __future__ import annotations

import base64
import json
import time

import redis

from picobot.config import Config
from worker.celery_app import make_celery


def test_task_started_is_not_published(redis_url: str) -> None:
    app = make_celery(Config(redis_url=redis_url))
    r = redis.Redis.from_url(redis_url)
    sub = r.pubsub()
    sub.psubscribe("*celeryev*")
    assert sub.get_message(timeout=5)["type"] == "psubscribe"
    with app.connection_for_write() as conn:
        dispatcher = app.events.Dispatcher(conn, hostname="w1@test", enabled=True)
        for kind in ("task-received", "task-started", "task-succeeded"):
            dispatcher.send(kind, uuid="t-1", name="picobot.turn")
        dispatcher.close()
    seen: list[str] = []
    deadline = time.monotonic() + 10
    while len(seen) < 2 and time.monotonic() < deadline:
        msg = sub.get_message(timeout=1)
        if msg and msg["type"] == "pmessage":
            seen.append(json.loads(base64.b64decode(json.loads(msg["data"])["body"]))["type"])
    sub.close()
    # the third message would have arrived before task-succeeded (one connection, in order)
    assert seen == ["task-received", "task-succeeded"]
