"""The Channels page's API: every channel with its state and deliveries, a failed one retried, and a
WeChat QR login from the web (against the fake iLink), through the real Flask app and a real Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from picobot.app import App, build_runtime
from picobot.config import Config
from picobot.storage import outbox
from scripts.fake_wechat import FakeWeChat
from tests.stack import issue_token, wait_for


class _Queue:
    def __init__(self) -> None:
        self.lanes: list[tuple[str, str]] = []

    def enqueue_delivery(self, channel: str, chat_id: str, countdown: float = 0) -> None:
        self.lanes.append((channel, chat_id))

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


@pytest.fixture
def fake() -> Iterator[FakeWeChat]:
    f = FakeWeChat(hold_secs=0.5, qr_hold_secs=0.1).start()
    yield f
    f.stop()


@pytest.fixture
def runtime(tmp_path: Path, redis_url: str, fake: FakeWeChat) -> Iterator[App]:
    config = Config.model_validate({
        "home": str(tmp_path / "home"), "redis_url": redis_url,
        "channels": {"wx": {"type": "wechat", "enabled": True, "base_url": fake.base_url, "cdn_base_url": fake.cdn_url},
                     "sinkish": {"type": "tests.channel_sink:SinkAdapter", "enabled": True,
                                 "sink_url": "http://127.0.0.1:9/"}}})
    rt = build_runtime(config, _Queue(), migrate=True)  # type: ignore[arg-type]
    yield rt
    rt.close()


_APPS: list[Any] = []


@pytest.fixture(autouse=True)
def _stop_relays() -> Iterator[None]:
    yield
    while _APPS:  # the live relay of a WeChat channel follows Redis: stop it before that Redis goes
        relay = _APPS.pop().extensions.get("picobot.live")
        if relay is not None:
            relay.stop()


def _client(rt: App) -> tuple[Any, dict[str, str]]:
    from web.app import create_app

    token = issue_token(rt.config.database_url, "channels test")
    app = create_app(runtime=rt)
    _APPS.append(app)
    return app.test_client(), {"Authorization": f"Bearer {token}"}


def test_every_channel_with_its_state_and_deliveries_and_a_retry(runtime: App) -> None:
    client, auth = _client(runtime)
    assert client.get("/api/channels").status_code == 401
    with runtime.db.begin() as conn:
        outbox.add(conn, "sinkish", "c1", {"text": "hello there"}, "k1", kind="message")
    with runtime.db.begin() as conn:
        [row] = outbox.latest(conn, None, 5)
        assert outbox.mark_failed(conn, row.id, "the platform said no", "bad_request")
    channels = {c["key"]: c for c in client.get("/api/channels", headers=auth).get_json()["channels"]}
    assert set(channels) >= {"web", "cli_chat", "wx", "sinkish"}
    assert channels["web"]["state"] == "live" and channels["wx"]["state"] == "login_required"
    assert channels["wx"]["login"] is True and channels["sinkish"]["login"] is False
    [d] = channels["sinkish"]["deliveries"]
    assert d["text"] == "hello there" and d["chat_id"] == "c1" and d["status"] == "failed"
    assert d["error"] == "the platform said no" and channels["sinkish"]["counts"] == {"failed": 1}
    assert client.post(f"/api/deliveries/{d['id']}/retry", headers=auth).status_code == 200
    assert ("sinkish", "c1") in runtime.queue.lanes  # type: ignore[attr-defined]
    channels = {c["key"]: c for c in client.get("/api/channels", headers=auth).get_json()["channels"]}
    assert channels["sinkish"]["deliveries"][0]["status"] == "pending"


def test_a_wechat_login_from_the_web_page(runtime: App, fake: FakeWeChat) -> None:
    client, auth = _client(runtime)
    assert client.get("/api/channels/sinkish/login", headers=auth).status_code == 404
    assert client.get("/api/channels/wx/login", headers=auth).get_json() == {"state": "idle"}
    fake.qr_plan = ["wait", "scaned", "confirmed"]
    started = client.post("/api/channels/wx/login", headers=auth, json={})
    assert started.status_code == 202
    seen: dict[str, Any] = {}

    def finished() -> bool:
        view = client.get("/api/channels/wx/login", headers=auth).get_json()
        if view.get("qr"):
            seen["qr"], seen["url"] = view["qr"], view["url"]
        return view["state"] in ("done", "failed") and view

    view = wait_for(finished, 30, "the web login did not finish")
    assert view["state"] == "done", view
    assert "█" in seen["qr"] and seen["url"]
    channels = {c["key"]: c for c in client.get("/api/channels", headers=auth).get_json()["channels"]}
    assert channels["wx"]["state"] != "login_required"
