"""The web's turn message, pushed straight onto the broker's list, is the message `send_task` builds;
a real worker runs turns enqueued that way in every other test that sends a message."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given, settings, strategies as st
from kombu import Consumer, Queue

from picobot.config import Config
from picobot.runtime.task_names import QUEUE_TURNS, TURN_TASK
from worker import turn_message
from worker.celery_app import make_celery
from worker.queue import CeleryTaskQueue

ROOT = Path(__file__).resolve().parent.parent
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


def test_the_webs_lazy_queue_pushes_the_same_message_without_celery(redis_url: str) -> None:
    config = Config(redis_url=redis_url)
    made: list[Any] = []

    def make() -> Any:
        made.append(make_celery(config))
        return made[-1]

    lazy = CeleryTaskQueue.lazy(config, make)
    app = make_celery(config)
    r = redis.Redis.from_url(redis_url)
    app.send_task(TURN_TASK, args=["web:a b'c"], queue=QUEUE_TURNS)
    lazy.enqueue_turn("web:a b'c")
    direct, celerys = r.lrange(QUEUE_TURNS, 0, -1)
    assert _parts(direct) == _parts(celerys)
    assert made == []  # a turn needs no app
    lazy.enqueue_delivery("feishu", "oc_1")  # anything else makes it, once
    lazy.enqueue_channel_event(7)
    assert len(made) == 1 and lazy.app is made[0]
    assert r.llen("outbound") == 2


@pytest.mark.parametrize("extra", [
    {}, {"tracing": {"enabled": True}}, {"broker_url": "amqp://guest@127.0.0.1:5672//"},
    {"broker_url": "rediss://127.0.0.1:6380/1"}, {"broker_url": "sentinel://127.0.0.1:26379"},
])
def test_the_config_alone_tells_what_the_app_would(extra: dict[str, Any], redis_url: str) -> None:
    config = Config(redis_url=redis_url, **extra)
    assert turn_message.usable_for(config) == turn_message.usable(make_celery(config))


def test_a_broker_that_needs_send_task_makes_the_app_at_once(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CELERY_BROKER_URL", "amqp://guest@127.0.0.1:5672//")
    config = Config(redis_url=redis_url)
    assert not turn_message.usable_for(config) and not turn_message.usable(make_celery(config))
    made: list[Any] = []
    lazy = CeleryTaskQueue.lazy(config, lambda: made.append(make_celery(config)) or made[-1])
    assert len(made) == 1 and lazy._turns is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=1500) | st.text(alphabet=" '\\\"\x00\udcff\n\té😀", max_size=1500))
def test_argsrepr_is_celerys_saferepr(text: str) -> None:
    from celery.utils.saferepr import saferepr

    assert turn_message._argsrepr([text]) == saferepr([text], turn_message.ARGSREPR_MAXSIZE)


def test_the_web_imports_celery_only_when_it_sends_more_than_turns(redis_url: str, tmp_path: Path) -> None:
    probe = """
import sys
import web.app
app = web.app.create_app()
seen = ['celery' in sys.modules]
queue = app.extensions['picobot'].queue
queue.enqueue_turn('web:probe')
seen.append('celery' in sys.modules)
queue.enqueue_delivery('feishu', 'oc_probe')
seen.append('celery' in sys.modules)
print(seen)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICOBOT_", "REDIS_URL", "DATABASE_URL", "CELERY_"))}
    env.update(PICOBOT_HOME=str(tmp_path / "home"), REDIS_URL=redis_url)
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "[False, False, True]"
