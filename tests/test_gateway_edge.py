"""The gateway's edge against a real web process: rate limits, reverse proxies, /health, and
what `picobot up` prints."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
import sqlalchemy
import websocket
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.cli.embedded_redis import free_port, redis_server_binary
from picobot.config.schema import GatewayConfig, RateLimitsConfig
from picobot.gateway.limits import Limited, RateLimits, SocketSlot
from picobot.auth.pairing import MAX_FAILURES, FailureLimiter, Pairing
from picobot.storage.db import Database
from picobot.storage.models import InboundRow, SessionRow
from tests.stack import Stack, WsClient, issue_token, wait_for
from tests.http_client import HTTP

LIMITS = {"messages_per_chat_per_minute": 3, "messages_per_device_per_minute": 6,
          "new_dialogs_per_chat_per_hour": 2, "sockets_per_device": 3}
BAD_CODE = "AAAA-AAAA"


@pytest.fixture(scope="module")
def direct(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    """Clients reach the web process directly (no trusted proxies); no worker, so health is degraded."""
    s = Stack(tmp_path_factory.mktemp("direct"), fake_llm.url, gateway={"rate_limits": LIMITS})
    try:
        s.start_web()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    """Behind one reverse proxy: the tests play the proxy by sending X-Forwarded-For."""
    s = Stack(tmp_path_factory.mktemp("proxied"), fake_llm.url, gateway={"trusted_proxies": 1})
    try:
        s.start_web()
        yield s
    finally:
        s.stop()


def _client(stack: Stack, token: str, chat: str | None = None) -> WsClient:
    return WsClient(stack.ws_url, chat or "rl-" + uuid.uuid4().hex[:8], token=token)


def _count(stack: Stack, column: Any, *where: Any) -> int:
    db = Database(stack.database_url)
    try:
        with db.read() as s:
            return s.scalar(sqlalchemy.select(sqlalchemy.func.count(column)).where(*where)) or 0
    finally:
        db.dispose()


def _assert_limited(frame: dict[str, Any], setting: str) -> None:
    assert frame["code"] == "rate_limited", frame
    assert isinstance(frame["retry_after"], int) and frame["retry_after"] >= 1
    assert setting in frame["error"]


# --- rate limits ---------------------------------------------------------------------------


def test_messages_over_the_chat_limit_are_refused_and_not_stored(direct: Stack) -> None:
    c = _client(direct, issue_token(direct.database_url, "chat-limit"))
    for i in range(3):
        assert c.say(f"within the limit {i}")["type"] == "accepted"
    refused = c.say("one too many")
    assert refused["type"] == "rejected" and refused["fate"] == "rejected"
    _assert_limited(refused, "messages_per_chat_per_minute")
    assert refused["retry_after"] <= 60
    c.send({"type": "command", "command": "/queue also too many", "id": "q"})
    _assert_limited(c.recv_until(lambda f: f.get("id") == "q"), "messages_per_chat_per_minute")
    assert _inbound(direct, c.session_id) == [f"within the limit {i}" for i in range(3)]
    c.close()


def _inbound(stack: Stack, session_id: str) -> list[Any]:
    db = Database(stack.database_url)
    try:
        with db.read() as s:
            return list(s.scalars(sqlalchemy.select(InboundRow.content).where(InboundRow.session_id == session_id)
                                  .order_by(InboundRow.seq)))
    finally:
        db.dispose()


def test_messages_over_the_device_limit_are_refused_in_any_chat(direct: Stack) -> None:
    token = issue_token(direct.database_url, "device-limit")
    clients = [_client(direct, token) for _ in range(3)]
    for c in clients:  # 2 per chat: under the chat limit, 6 in all: the device limit
        assert [c.say(f"msg {i}")["type"] for i in range(2)] == ["accepted", "accepted"]
    refused = clients[0].say("the seventh, and only the third in this chat")
    _assert_limited(refused, "messages_per_device_per_minute")
    assert _count(direct, InboundRow.id, InboundRow.session_id == clients[0].session_id) == 2
    other = _client(direct, issue_token(direct.database_url, "another device"))
    assert other.say("another device is not limited")["type"] == "accepted"
    for c in clients + [other]:
        c.close()


def test_new_dialogs_over_the_limit_are_refused_and_not_created(direct: Stack) -> None:
    c = _client(direct, issue_token(direct.database_url, "dialogs"))
    assert [c.command(f"/new plan {i}")["type"] for i in range(2)] == ["command", "command"]
    before = _count(direct, SessionRow.id, SessionRow.chat_id == c.chat_id)
    refused = c.command("/new one too many")
    assert refused["type"] == "rejected"
    _assert_limited(refused, "new_dialogs_per_chat_per_hour")
    assert _count(direct, SessionRow.id, SessionRow.chat_id == c.chat_id) == before == 3
    c.close()


def _open_raw(stack: Stack, token: str) -> websocket.WebSocket:
    return websocket.create_connection(f"{stack.ws_url}?chat_id=sock-{uuid.uuid4().hex[:6]}", timeout=30,
                                       header=[f"Authorization: Bearer {token}"])


def test_sockets_over_the_device_limit_are_refused_with_1013(direct: Stack) -> None:
    token = issue_token(direct.database_url, "sockets")
    held = [_client(direct, token) for _ in range(3)]
    extra = _open_raw(direct, token)
    _assert_limited(json.loads(extra.recv()), "sockets_per_device")
    opcode, data = extra.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE and int.from_bytes(data[:2], "big") == 1013
    extra.close()
    assert _client(direct, issue_token(direct.database_url, "other sockets")).ready["type"] == "ready"
    held.pop().close()  # a closed socket gives its slot back

    def reconnects() -> bool:
        ws = _open_raw(direct, token)
        try:
            return json.loads(ws.recv())["type"] == "ready"
        finally:
            ws.close()
    wait_for(reconnects, 15, "the closed socket's slot was not given back")
    for c in held:
        c.close()


def test_limits_fail_open_when_redis_is_down(caplog: pytest.LogCaptureFixture) -> None:
    # no retries: redis-py's default three, with backoff, take ~4 s a call here and change nothing below
    dead = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    limits = RateLimits(dead, RateLimitsConfig(messages_per_chat_per_minute=1, sockets_per_device=1))
    with caplog.at_level(logging.INFO, logger="picobot.gateway.limits"):
        assert [limits.message("cli_chat:x", "dev:d") for _ in range(3)] == [None] * 3
        assert isinstance(limits.open_socket("dev:d"), SocketSlot)
        assert limits.new_dialog("cli_chat:x") is None
    assert len([r for r in caplog.records if "rate limits are off" in r.message]) == 1  # logged once


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chat=st.text(max_size=300), device=st.one_of(st.none(), st.text(max_size=80)))
def test_any_chat_or_device_name_gets_its_own_counter(redis_url: str, chat: str, device: str | None) -> None:
    r = redis.Redis.from_url(redis_url)
    limits = RateLimits(r, RateLimitsConfig(messages_per_chat_per_minute=1, messages_per_device_per_minute=0))
    first, second = limits.message(chat, device), limits.message(chat, device)
    r.flushdb()
    assert first is None and isinstance(second, Limited) and 1 <= second.retry_after <= 60


@pytest.mark.parametrize("bad", [True, -1, "lots", 1.5, None, [], {"n": 1}])
def test_rate_limit_and_proxy_settings_refuse_wrong_types(bad: Any) -> None:
    with pytest.raises(Exception, match="rate_limits.sockets_per_device"):
        GatewayConfig(rate_limits={"sockets_per_device": bad})
    with pytest.raises(Exception, match="trusted_proxies"):
        GatewayConfig(trusted_proxies=bad)
    assert GatewayConfig(rate_limits={"sockets_per_device": 0}).rate_limits.sockets_per_device == 0  # 0 = off


# --- reverse proxies and the pairing failure limit -----------------------------------------


def _pair(stack: Stack, code: str, forwarded_for: str | None = None) -> httpx.Response:
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    return HTTP.post(stack.http + "/api/pair", json={"code": code, "cookie": False}, headers=headers, timeout=10)


def test_a_spoofed_forwarded_for_does_not_dodge_the_pairing_limit(direct: Stack) -> None:
    try:
        for i in range(MAX_FAILURES):
            assert _pair(direct, BAD_CODE, f"192.0.2.{i + 1}").status_code == 401
        locked = _pair(direct, BAD_CODE, "192.0.2.200")
        assert locked.status_code == 429 and locked.json()["error"] == "rate_limited"
    finally:
        direct.redis().delete(FailureLimiter.PREFIX + "127.0.0.1")


def test_behind_a_trusted_proxy_each_real_client_is_limited_on_its_own(proxied: Stack) -> None:
    attacker, neighbour = "198.51.100.7", "198.51.100.8"
    for _ in range(MAX_FAILURES):
        assert _pair(proxied, BAD_CODE, attacker).status_code == 401
    assert _pair(proxied, BAD_CODE, attacker).status_code == 429
    assert _pair(proxied, BAD_CODE, neighbour).status_code == 401  # wrong code, but not locked out
    db = Database(proxied.database_url)
    try:
        code = Pairing(db).new_code().code
    finally:
        db.dispose()
    paired = _pair(proxied, code, neighbour)
    assert paired.status_code == 200 and paired.json()["token"]


@pytest.mark.parametrize("peer, counted_as", [
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),  # one host holds a whole /64: rotating within it
    ("2001:db8:1:2:ffff::9", "2001:db8:1:2::/64"),  # does not buy more guesses
    ("::ffff:192.0.2.5", "192.0.2.5"),
    ("192.0.2.5", "192.0.2.5"),
    ("not an address" * 10, ("not an address" * 10)[:64]),
])
def test_pairing_failures_are_counted_per_client_network(peer: str, counted_as: str) -> None:
    from flask import Flask

    from web.auth import client_address

    with Flask(__name__).test_request_context(environ_base={"REMOTE_ADDR": peer}):
        assert client_address() == counted_as


# --- /health -------------------------------------------------------------------------------


def _health(stack: Stack, forwarded_for: str | None = None, token: str | None = None) -> httpx.Response:
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return HTTP.get(stack.http + "/health", headers=headers, timeout=10)


@pytest.mark.parametrize("client", ["203.0.113.9", "127.0.0.1"])  # a forged loopback via the proxy too
def test_health_from_elsewhere_without_a_token_says_only_ok_or_not(proxied: Stack, client: str) -> None:
    resp = _health(proxied, client)
    assert resp.status_code == 503  # no worker runs in this stack
    assert resp.json() == {"status": "degraded"}


def test_health_details_need_a_paired_device_or_this_machine(proxied: Stack, direct: Stack) -> None:
    paired = _health(proxied, "203.0.113.9", token=proxied.token)
    assert paired.status_code == 200 and paired.json()["checks"]["workers"]["ok"] is False
    assert _health(proxied, "203.0.113.9", token="not-a-token").json() == {"status": "degraded"}
    local = _health(proxied)
    assert local.status_code == 200 and "checks" in local.json() and "connections" in local.json()
    # without trusted proxies a relayed request arrives from loopback, but is not local
    assert _health(direct, "203.0.113.9").json() == {"status": "degraded"}
    page = HTTP.get(proxied.http + "/api/health", headers={"Authorization": f"Bearer {proxied.token}",
                                                            "X-Forwarded-For": "203.0.113.9"}, timeout=10)
    assert page.status_code == 200 and "workers" in page.json()["checks"]  # the Health page's source


# --- picobot up ----------------------------------------------------------------------------


@pytest.mark.slow
def test_up_prints_no_redis_password(tmp_path: Path, llm) -> None:  # type: ignore[no-untyped-def]
    password = "redis-pw-" + uuid.uuid4().hex
    port, web_port = free_port(), free_port()
    (tmp_path / "redis").mkdir()
    redis_proc = subprocess.Popen([redis_server_binary(), "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                                   "--requirepass", password, "--dir", str(tmp_path / "redis")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"gateway": {"port": web_port}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DATABASE_URL", "PICOBOT_"))}
    env.update(PICOBOT_HOME=str(home), REDIS_URL=f"redis://:{password}@127.0.0.1:{port}/0",
               OPENAI_BASE_URL=f"{llm.url}/v1", OPENAI_API_KEY="sk-up-test-123456", OPENAI_MODEL="fake",
               PICOBOT_WORKERS="1")  # one worker is enough to print through; tests/test_cli.py runs one per core
    log_path = tmp_path / "up.log"
    with open(log_path, "wb") as log:
        up = subprocess.Popen([sys.executable, "-m", "picobot", "up"], env=env, cwd=tmp_path, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def worker_up() -> bool:
            try:
                return HTTP.get(f"http://127.0.0.1:{web_port}/health", timeout=2).json()["checks"]["workers"]["ok"]
            except Exception:
                return False
        wait_for(worker_up, 60, "picobot up did not become healthy")
    finally:
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=30)
        redis_proc.terminate()
        redis_proc.wait(timeout=10)
    out = log_path.read_text(errors="replace")
    assert f"Redis: redis://:********@127.0.0.1:{port}/0" in out
    assert password not in out
