"""RabbitMQ as the Celery broker (CELERY_BROKER_URL): turns, scheduled jobs and deliveries through real
processes, each stack on a RabbitMQ virtual host of its own; Redis keeps the coordination.

Also: the queue depths /metrics and beat read come from RabbitMQ itself, and a bad broker URL is a
clear config error.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from typing import Iterator

import httpx
import pytest

from picobot.config.loader import load_config
from picobot.errors import ConfigError
from picobot.runtime import broker_queues
from tests.channel_sink import Sink, sink_channel
from tests.stack import ROOT, Stack, base_config, wait_for

pytestmark = pytest.mark.slow


def _rabbitmq_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=2):
            return shutil.which("rabbitmqctl") is not None
    except OSError:
        return False


@pytest.fixture(scope="module")
def amqp_url() -> Iterator[str]:
    """A fresh virtual host (the queue names are fixed, so each stack gets its own), dropped afterwards."""
    if not _rabbitmq_up():
        pytest.skip("no RabbitMQ on 127.0.0.1:5672 (or no rabbitmqctl)")
    vhost = "picobot_" + uuid.uuid4().hex[:10]
    subprocess.run(["rabbitmqctl", "-q", "add_vhost", vhost], check=True, capture_output=True, timeout=60)
    subprocess.run(["rabbitmqctl", "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
                   check=True, capture_output=True, timeout=60)
    try:
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        subprocess.run(["rabbitmqctl", "-q", "delete_vhost", vhost], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def sink() -> Iterator[Sink]:
    s = Sink()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def rstack(tmp_path_factory: pytest.TempPathFactory, fake_llm, sink: Sink, amqp_url: str) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    cfg = base_config(fake_llm.url, 0)
    cfg["memory"] = {"enabled": False}
    cfg["channels"] = {"sink": sink_channel(sink)}
    s = Stack(tmp_path_factory.mktemp("rabbit"), fake_llm.url, config=cfg)
    s.env["PYTHONPATH"] = str(ROOT)  # the worker imports the test channel type
    s.env["CELERY_BROKER_URL"] = amqp_url
    try:
        s.start()
        yield s
    finally:
        s.stop()


def test_a_turn_runs_through_rabbitmq(rstack: Stack) -> None:
    done = rstack.client().ask("hello over amqp")
    assert done["status"] == "completed" and done["final_text"] == "You said: hello over amqp"
    log = (rstack.logs / "w1.log").read_text(errors="replace")
    assert "amqp://guest:**@127.0.0.1:5672" in log  # the worker's banner: its broker is RabbitMQ
    assert "Transport://" not in log.split("[queues]")[0]  # not the Redis transport


def test_a_scheduled_job_fires_and_its_message_is_delivered_through_rabbitmq(rstack: Stack, sink: Sink) -> None:
    with httpx.Client(base_url=rstack.http, headers={"Authorization": f"Bearer {rstack.token}"}, timeout=20) as c:
        r = c.post("/api/jobs", json={"id": "amqp.once", "kind": "outbound_message",
                                      "schedule": {"type": "delay", "seconds": 2},
                                      "target": {"channel": "sink", "chat_id": "amqp-chat"},
                                      "payload": {"text": "scheduled over amqp"}})
        assert r.status_code == 201, r.text
        wait_for(lambda: sink.delivered("amqp-chat"), 60, "the scheduled message at the sink")
        assert ["scheduled over amqp" in str(p["payload"]) for p in sink.delivered("amqp-chat")] == [True]
        runs = wait_for(lambda: c.get("/api/jobs/amqp.once").json().get("runs"), 30, "the job's run")
        assert runs[0]["outcome"] == "ok"


def test_queue_depths_are_read_from_rabbitmq(amqp_url: str) -> None:
    """Tasks published to queues no worker reads (a vhost of their own) are counted from RabbitMQ."""
    from celery import Celery

    vhost_url = amqp_url  # the stack's workers consume `turns`; use queues they do not read
    app = Celery(broker=vhost_url)
    try:
        for _ in range(3):
            app.send_task("picobot.nothing", queue="depth_probe_a")
        app.send_task("picobot.nothing", queue="depth_probe_b")
        depths = {}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            depths = broker_queues.queue_depths(vhost_url, ["depth_probe_a", "depth_probe_b", "never_declared"])
            if depths.get("depth_probe_a") == 3:
                break
            time.sleep(0.2)
        assert depths == {"depth_probe_a": 3, "depth_probe_b": 1, "never_declared": 0}
    finally:
        app.close()


@pytest.mark.parametrize("url", ["http://127.0.0.1:5672/", "127.0.0.1:5672", "kafka://x", "amqp\udc80://x"])
def test_a_broker_url_of_another_kind_is_a_config_error(tmp_path, url: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as err:
        load_config(home=tmp_path, environ={"CELERY_BROKER_URL": url}, cwd=tmp_path)
    assert err.value.key_path == "CELERY_BROKER_URL" and "amqp://" in str(err.value)


def test_the_amqp_url_is_read_as_kombu_reads_it() -> None:
    args = broker_queues.amqp_connection_args("amqp://u%40x:p%2Fw@10.1.2.3:5673//")
    assert (args["host"], args["userid"], args["password"], args["virtual_host"]) == ("10.1.2.3:5673", "u@x", "p/w", "/")
    assert broker_queues.amqp_connection_args("amqp://127.0.0.1/vh")["virtual_host"] == "vh"
    assert broker_queues.amqp_connection_args("amqps://h")["host"] == "h:5671"
