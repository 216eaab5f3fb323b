"""Flower sees every task by its stable name: workers send task events once a monitor asks for them."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest
import redis

from picobot.cli.embedded_redis import free_port
from picobot.config import Config
from worker.celery_app import make_celery
from tests.stack import Stack, wait_for
from tests.http_client import HTTP

pytestmark = pytest.mark.slow


def test_flower_lists_turn_tasks_by_name(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    stack.env["FLOWER_BASIC_AUTH"] = "ops:flower-test-pass"
    stack._spawn("flower", ["flower", "--port", str(port)])
    auth = ("ops", "flower-test-pass")

    def up() -> bool:
        try:
            return HTTP.get(f"http://127.0.0.1:{port}/api/workers", auth=auth, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "flower did not start")
    wait_for(lambda: HTTP.get(f"http://127.0.0.1:{port}/api/workers", auth=auth).json(), 30, "flower sees no worker")
    client = stack.client()

    def seen() -> set[str]:
        tasks = HTTP.get(f"http://127.0.0.1:{port}/api/tasks", auth=auth, timeout=5).json()
        return {t["name"] for t in tasks.values() if t.get("name")}

    def turn_seen() -> bool:
        # Flower switches the workers' task events on every few seconds from its start: turns sent
        # before that reach it unseen
        assert client.ask("flower check")["status"] == "completed"
        return "picobot.turn" in seen()

    try:
        wait_for(turn_seen, 30, "flower never saw picobot.turn")
    finally:
        client.close()
    assert HTTP.get(f"http://127.0.0.1:{port}/api/tasks", timeout=5).status_code == 401  # protected


def _subscribe(r: redis.Redis) -> "redis.client.PubSub":
    sub = r.pubsub()
    sub.psubscribe("*celeryev*")
    assert sub.get_message(timeout=5)["type"] == "psubscribe"
    return sub


def _collect(sub, until: float) -> list[str]:  # type: ignore[no-untyped-def]
    kinds: list[str] = []
    while time.monotonic() < until:
        msg = sub.get_message(timeout=0.5)
        if msg and msg["type"] == "pmessage":
            body = json.loads(base64.b64decode(json.loads(msg["data"])["body"]))
            kinds += [e["type"] for e in (body if isinstance(body, list) else [body])]  # task events go in batches
    return kinds


def test_task_events_flow_only_while_switched_on(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    assert make_celery(Config(redis_url=stack.redis_url)).conf.worker_send_task_events is False  # the default
    control = make_celery(Config(redis_url=stack.redis_url)).control
    r = redis.Redis.from_url(stack.redis_url)
    client = stack.client()
    try:
        control.disable_events()  # as after a start with no monitor (or after another test's Flower)
        time.sleep(1)
        sub = _subscribe(r)
        assert client.ask("no monitor")["status"] == "completed"
        quiet = _collect(sub, time.monotonic() + 2)
        assert not [k for k in quiet if k.startswith("task-")], quiet  # worker heartbeats only
        control.enable_events()  # what Flower sends
        time.sleep(1)
        assert client.ask("monitored")["status"] == "completed"
        kinds = _collect(sub, time.monotonic() + 3)
        assert "task-received" in kinds and "task-succeeded" in kinds, kinds
        assert "task-started" not in kinds
        sub.close()
    finally:
        client.close()
        r.close()
