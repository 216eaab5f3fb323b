"""`picobot feishu` (long-connection mode) as real processes against a fake Feishu long-connection server.

The real lark-oapi ws.Client inside `python -m picobot feishu` connects to scripts/fake_feishu/ws.py;
each test has its own redis-server and SQLite home.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis
import sqlalchemy

from picobot.channels.feishu.longconn import BACKOFF_CAP_SECS, backoff_delay
from picobot.cli.embedded_redis import free_port
from scripts.fake_feishu.server import FakeFeishu
from scripts.fake_feishu.ws import FakeLongConn
from tests.stack import API_KEY, base_config, migrated, wait_for

APP_SECRET = "secret_" + "LONGCONN" * 3


class Home:
    """A PicoBot home with channels.feishu in long_connection mode, and `picobot feishu` processes on it."""

    def __init__(self, tmp: Path, redis_url: str, feishu: dict[str, Any]):
        self.tmp = tmp
        self.home = tmp / "home"
        self.home.mkdir()
        cfg = base_config("http://127.0.0.1:9", free_port())
        cfg["channels"] = {"feishu": feishu}
        (self.home / "config.json").write_text(json.dumps(cfg, indent=2))
        self.redis_url = redis_url
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DATABASE_URL"))}
        self.env.update(PICOBOT_HOME=str(self.home), REDIS_URL=redis_url, PICOBOT_TEST_KEY=API_KEY,
                        PYTHONUNBUFFERED="1")
        self.procs: list[subprocess.Popen] = []
        migrated(None, self.home)  # the schema as `picobot migrate` leaves it (tests/test_cli.py runs the command)

    def spawn(self, name: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "picobot", "feishu"], env=self.env, cwd=self.tmp,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        proc.log_path = self.tmp / f"{name}.log"  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def sql(self, query: str, **params: Any) -> list[Any]:
        engine = sqlalchemy.create_engine(f"sqlite:///{self.home / 'data' / 'picobot.db'}")
        try:
            with engine.connect() as conn:
                return list(conn.execute(sqlalchemy.text(query), params))
        finally:
            engine.dispose()


def log_of(proc: subprocess.Popen) -> str:
    return proc.log_path.read_text(errors="replace")  # type: ignore[attr-defined]


def stopped_cleanly(log: str) -> bool:
    """The process logged its own clean stop, not the shutdown deadline's forced exit."""
    return "long connection (feishu): stopped" in log and "exiting now" not in log


def message_event(message_id: str, text: str = "hello") -> dict[str, Any]:
    return {"schema": "2.0",
            "header": {"event_id": "ev_" + uuid.uuid4().hex, "event_type": "im.message.receive_v1",
                       "create_time": str(int(time.time() * 1000)), "token": "", "app_id": "cli_lc",
                       "tenant_key": "tk"},
            "event": {"sender": {"sender_id": {"open_id": "ou_u1"}, "sender_type": "user", "tenant_key": "tk"},
                      "message": {"message_id": message_id, "chat_id": "oc_lc", "chat_type": "p2p",
                                  "message_type": "text", "create_time": str(int(time.time() * 1000)),
                                  "content": json.dumps({"text": text})}}}


@pytest.fixture
def fake() -> Iterator[FakeFeishu]:
    server = FakeFeishu(app_id="cli_lc", app_secret=APP_SECRET).start()
    yield server
    server.stop()


@pytest.fixture
def ws(fake: FakeFeishu) -> Iterator[FakeLongConn]:
    server = FakeLongConn(fake).start()
    yield server
    server.stop()


@pytest.fixture
def home(tmp_path: Path, redis_url: str, fake: FakeFeishu) -> Iterator[Home]:
    h = Home(tmp_path, redis_url, {"enabled": True, "mode": "long_connection", "app_id": "cli_lc",
                                   "app_secret": APP_SECRET, "domain": fake.base_url})
    try:
        yield h
    finally:
        h.stop_all()


def channel_tasks(redis_url: str) -> list[dict[str, Any]]:
    """The Celery messages waiting on the `outbound` queue (the worker is not running)."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return [json.loads(raw)["headers"] for raw in client.lrange("outbound", 0, -1)]
    finally:
        client.close()


def test_an_event_is_recorded_once_and_enqueued(home: Home, ws: FakeLongConn) -> None:
    proc = home.spawn("feishu")
    ws.wait_clients(1)
    event = message_event("om_lc_1")
    first = ws.wait_response(ws.push(event))
    assert first["payload"]["code"] == 200
    again = ws.wait_response(ws.push(event))  # Feishu redelivers the same message
    assert again["payload"]["code"] == 200
    rows = home.sql("SELECT channel, event_key, status, payload FROM channel_events")
    assert [(r[0], r[1], r[2]) for r in rows] == [("feishu", "om_lc_1", "pending")]
    assert json.loads(rows[0][3])["event"]["message"]["message_id"] == "om_lc_1"
    tasks = channel_tasks(home.redis_url)
    assert len(tasks) == 1 and tasks[0]["task"] == "picobot.channel_event", tasks
    log = log_of(proc)
    assert APP_SECRET not in log and "t-secret" not in log  # nor the ws URL's session ticket


def test_other_event_types_are_acknowledged_and_not_recorded(home: Home, ws: FakeLongConn) -> None:
    home.spawn("feishu")
    ws.wait_clients(1)
    event = message_event("om_lc_2")
    event["header"]["event_type"] = "im.chat.member.bot.added_v1"
    assert ws.wait_response(ws.push(event))["payload"]["code"] == 200
    assert home.sql("SELECT count(*) FROM channel_events")[0][0] == 0


def test_one_process_connects_and_a_standby_takes_over(home: Home, ws: FakeLongConn) -> None:
    first = home.spawn("first")
    ws.wait_clients(1)
    second = home.spawn("second")
    wait_for(lambda: "standing by" in log_of(second), 60, "the second process did not stand by")
    assert ws.clients == 1 and ws.connects == 1
    os.killpg(first.pid, signal.SIGKILL)  # no clean release: the lease has to expire
    first.wait()
    wait_for(lambda: ws.connects == 2 and ws.clients == 1, 40, "the standby did not take over")
    assert "connected" in log_of(second).split("standing by", 1)[1]
    reply = ws.wait_response(ws.push(message_event("om_lc_3")))
    assert reply["payload"]["code"] == 200
    assert home.sql("SELECT event_key FROM channel_events")[0][0] == "om_lc_3"


def test_reconnects_after_the_server_drops_the_socket(home: Home, ws: FakeLongConn) -> None:
    home.spawn("feishu")
    ws.wait_clients(1)
    assert ws.drop() == 1
    wait_for(lambda: ws.connects == 2 and ws.clients == 1, 30, "the client did not reconnect")
    assert ws.wait_response(ws.push(message_event("om_lc_4")))["payload"]["code"] == 200


def test_retries_a_failing_endpoint_with_backoff(home: Home, ws: FakeLongConn) -> None:
    ws.fail_endpoint = 3
    proc = home.spawn("feishu")
    ws.wait_clients(1, timeout=40)
    assert ws.endpoint_calls == 4
    assert log_of(proc).count("reconnecting in") == 3


def test_sigterm_stops_a_connected_process(home: Home, ws: FakeLongConn) -> None:
    proc = home.spawn("feishu")
    ws.wait_clients(1)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == 0  # the process's own deadline is 5 s (SHUTDOWN_DEADLINE_SECS)
    wait_for(lambda: ws.clients == 0, 10, "the socket was left open")
    assert stopped_cleanly(log_of(proc))


def test_sigterm_stops_a_process_stuck_on_the_endpoint(home: Home, ws: FakeLongConn) -> None:
    ws.hang_endpoint = True  # the endpoint POST never answers
    proc = home.spawn("feishu")
    wait_for(lambda: ws.endpoint_calls >= 1, 60, "the endpoint was not called")
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    assert stopped_cleanly(log_of(proc))


def test_sigterm_stops_a_standby(home: Home, ws: FakeLongConn) -> None:
    home.spawn("first")
    ws.wait_clients(1)
    second = home.spawn("second")
    wait_for(lambda: "standing by" in log_of(second), 60, "the second process did not stand by")
    os.killpg(second.pid, signal.SIGINT)
    assert second.wait(timeout=10) == 0
    assert stopped_cleanly(log_of(second))
    assert ws.clients == 1


def test_refuses_a_channel_in_webhook_mode(tmp_path: Path, redis_url: str, fake: FakeFeishu) -> None:
    h = Home(tmp_path, redis_url, {"enabled": True, "mode": "webhook", "app_id": "cli_lc", "app_secret": APP_SECRET,
                                   "verification_token": "vtok", "domain": fake.base_url})
    proc = h.spawn("feishu")
    assert proc.wait(timeout=60) == 2
    assert 'mode is \'webhook\'; set it to "long_connection"' in log_of(proc)
    assert not [c for c in fake.calls if c["path"] == "/callback/ws/endpoint"]


def test_backoff_is_exponential_capped_and_jittered() -> None:
    assert [backoff_delay(n, lambda: 1.0) for n in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert [backoff_delay(n, lambda: 0.0) for n in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff_delay(50, lambda: 1.0) == BACKOFF_CAP_SECS


def test_up_starts_a_client_per_long_connection_channel(tmp_path: Path) -> None:
    from picobot.channels.feishu.longconn import long_connection_channels
    from picobot.config.loader import load_config

    cfg = base_config("http://127.0.0.1:9", 19999)
    cfg["channels"] = {
        "feishu": {"enabled": True, "mode": "long_connection", "app_id": "a1", "app_secret": "s1"},
        "lark": {"type": "feishu", "enabled": True, "mode": "long_connection", "app_id": "a2", "app_secret": "s2"},
        "hooked": {"type": "feishu", "enabled": True, "app_id": "a3", "app_secret": "s3", "verification_token": "v"},
        "off": {"type": "feishu", "enabled": False, "mode": "long_connection"},
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    config = load_config(home=tmp_path, environ={"PICOBOT_TEST_KEY": API_KEY}, cwd=tmp_path)
    assert long_connection_channels(config) == ["feishu", "lark"]


def test_procfile_and_compose_run_picobot_feishu() -> None:
    import shlex

    import yaml

    root = Path(__file__).resolve().parent.parent
    lines = dict(line.split(":", 1) for line in (root / "Procfile").read_text().splitlines() if ":" in line)
    assert shlex.split(lines["feishu"]) == ["picobot", "feishu"]  # = picobot run channels:feishu:feishu
    service = yaml.safe_load((root / "docker-compose.yml").read_text())["services"]["feishu"]
    assert service["command"] == ["picobot", "feishu"] and service["profiles"] == ["feishu"]


def test_ws_urls_lose_their_query_in_log_lines() -> None:
    from picobot.channels.feishu.ws_sdk import scrub

    line = scrub("connected to wss://msg-frontier.feishu.cn/ws/v2?device_id=7&access_key=k1&ticket=t2 [conn_id=7]")
    assert line == "connected to wss://msg-frontier.feishu.cn/ws/v2?… [conn_id=7]"


def test_picobot_up_runs_the_long_connection(tmp_path: Path, fake: FakeFeishu, ws: FakeLongConn) -> None:
    home = tmp_path / "home"
    home.mkdir()
    cfg = base_config("http://127.0.0.1:9", free_port())
    cfg["channels"] = {"feishu": {"enabled": True, "mode": "long_connection", "app_id": "cli_lc",
                                  "app_secret": APP_SECRET, "domain": fake.base_url}}
    (home / "config.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DATABASE_URL", "REDIS_URL"))}
    env.update(PICOBOT_HOME=str(home), PICOBOT_TEST_KEY=API_KEY, PICOBOT_WORKERS="1")  # the client is the point here
    with open(tmp_path / "up.log", "wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "picobot", "up", "--embedded-redis"], env=env, cwd=tmp_path,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ws.wait_clients(1, timeout=90)
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(timeout=30)
    wait_for(lambda: ws.clients == 0, 10, "up left the Feishu connection open")


def test_a_holder_that_loses_its_lease_disconnects(home: Home, ws: FakeLongConn) -> None:
    proc = home.spawn("feishu")
    ws.wait_clients(1)
    client = redis.Redis.from_url(home.redis_url, decode_responses=True)
    try:
        assert client.pttl("picobot:feishu:ws:cli_lc") > 0  # renewed with an expiry, never held forever
        client.set("picobot:feishu:ws:cli_lc", "another-process", xx=True, px=60_000)
        wait_for(lambda: ws.clients == 0, 30, "the holder kept its connection without the lease")
        assert "lost the lease" in log_of(proc)
        client.delete("picobot:feishu:ws:cli_lc")  # the other process went away: this one takes over again
        wait_for(lambda: ws.connects == 2 and ws.clients == 1, 30, "the process did not take the lease again")
    finally:
        client.close()
