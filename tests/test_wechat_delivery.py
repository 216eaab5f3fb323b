"""WeChatAdapter in process against the fake iLink: parts and client ids, resuming a half-sent delivery,
the delivery window, -14, media out. A real SQLite database and redis-server; the lane is run by the test."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from picobot.app import App as Runtime
from picobot.app import build_runtime
from picobot.channels import delivery, outbound
from picobot.channels.wechat import creds, media, state
from picobot.config import load_config
from picobot.storage.models import ChannelStateRow, OutboxRow
from scripts.fake_wechat import FakeWeChat
from tests.stack import base_config

USER = "u1@im.wechat"


class _Queue:
    def __init__(self) -> None:
        self.lanes: list[tuple[str, str, float]] = []
        self.events: list[int] = []

    def enqueue_delivery(self, channel: str, chat_id: str, countdown: float = 0) -> None:
        self.lanes.append((channel, chat_id, countdown))

    def enqueue_channel_event(self, event_id: int) -> None:
        self.events.append(event_id)

    def __getattr__(self, name: str) -> Any:  # turns, jobs, …: not used here
        return lambda *a, **k: None


@pytest.fixture
def fake() -> Iterator[FakeWeChat]:
    f = FakeWeChat().start()
    yield f
    f.stop()


@pytest.fixture
def rt(tmp_path: Path, fake: FakeWeChat, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    home = tmp_path / "home"
    home.mkdir()
    cfg = base_config("http://127.0.0.1:9", 1)
    cfg["memory"] = {"enabled": False}
    cfg["channels"] = {"wechat": {"type": "wechat", "enabled": True, "base_url": fake.base_url,
                                  "cdn_base_url": fake.cdn_url, "max_message_chars": 100}}
    (home / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-wechat")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    runtime = build_runtime(load_config(), _Queue(), migrate=True)
    creds.save(home / "wechat" / "credentials.json", creds.Credentials(token=fake.issue_token(), base_url=""))
    yield runtime
    runtime.close()


def _user_writes(rt: Runtime, fake: FakeWeChat, at: float | None = None) -> str:
    msg = fake.message(USER, "hi")
    fake.offer(msg)
    with rt.db.begin() as conn:
        state.note_context(conn, "wechat", USER, msg["context_token"])
        if at is not None:
            t = ChannelStateRow.__table__
            conn.execute(update(t).where(t.c.key == f"ctx:{USER}").values(updated_at=at))
    return msg["context_token"]


def _record(rt: Runtime, text: str, kind: str = "reply", **extra: Any) -> int:
    with rt.db.begin() as conn:
        outbound.record_message(conn, "wechat", USER, text, kind=kind if kind != "reply" else "message")
        row_id = conn.execute(select(OutboxRow.id).order_by(OutboxRow.id.desc())).scalar_one()
        payload = {**conn.execute(select(OutboxRow.payload).where(OutboxRow.id == row_id)).scalar_one(), **extra}
        conn.execute(update(OutboxRow).where(OutboxRow.id == row_id).values(kind=kind, payload=payload))
    return row_id


def _status(rt: Runtime, row_id: int) -> str:
    with rt.db.connect() as conn:
        return conn.execute(select(OutboxRow.status).where(OutboxRow.id == row_id)).scalar_one()


def test_long_text_goes_in_parts_with_stable_client_ids(rt: Runtime, fake: FakeWeChat) -> None:
    token = _user_writes(rt, fake)
    row = _record(rt, " ".join(f"word{i}" for i in range(80)))
    delivery.deliver_lane(rt, "wechat", USER)
    sent = [m for m in fake.sent if m["to_user_id"] == USER]
    assert len(sent) > 1 and all(len(m["item_list"]) == 1 for m in sent)
    assert all(len(m["item_list"][0]["text_item"]["text"]) <= 100 for m in sent)
    assert [m["client_id"] for m in sent] == [f"pb-{row}-{i}" for i in range(len(sent))]
    assert {m["context_token"] for m in sent} == {token}
    assert _status(rt, row) == "sent"


def test_a_retry_resumes_after_the_parts_already_sent(rt: Runtime, fake: FakeWeChat) -> None:
    _user_writes(rt, fake)
    row = _record(rt, " ".join(f"word{i}" for i in range(80)))
    calls = {"n": 0}
    original = fake.send

    def fail_third(msg: dict) -> dict:  # the platform fails once, on the third part
        calls["n"] += 1
        return {"ret": -1, "errmsg": "busy"} if calls["n"] == 3 else original(msg)

    fake.send = fail_third  # type: ignore[method-assign]
    delivery.deliver_lane(rt, "wechat", USER)
    assert _status(rt, row) == "pending" and len(fake.sent) == 2
    with rt.db.begin() as conn:
        conn.execute(update(OutboxRow).where(OutboxRow.id == row).values(next_attempt_at=None))
    delivery.deliver_lane(rt, "wechat", USER)
    assert _status(rt, row) == "sent"
    ids = [m["client_id"] for m in fake.sent]
    assert ids == [f"pb-{row}-{i}" for i in range(len(ids))] and fake.duplicates == 0


def test_a_background_message_outside_the_window_is_held_without_a_call(rt: Runtime, fake: FakeWeChat) -> None:
    _user_writes(rt, fake, at=time.time() - 25 * 3600)
    row = _record(rt, "the nightly digest", kind="message")
    delivery.deliver_lane(rt, "wechat", USER)
    assert _status(rt, row) == "deferred" and fake.sent == [] and fake.rejected == []


def test_minus_two_holds_a_reply_too(rt: Runtime, fake: FakeWeChat) -> None:
    _user_writes(rt, fake)
    fake.fail_next.append(-2)
    row = _record(rt, "an answer")
    delivery.deliver_lane(rt, "wechat", USER)
    assert _status(rt, row) == "deferred"


def test_minus_14_marks_login_required_and_retries(rt: Runtime, fake: FakeWeChat) -> None:
    from picobot.channels.wechat import status

    _user_writes(rt, fake)
    fake.expire_session()
    row = _record(rt, "an answer")
    delivery.deliver_lane(rt, "wechat", USER)
    assert _status(rt, row) == "pending"
    assert status.get_state(rt.redis, "wechat")["state"] == status.LOGIN_REQUIRED  # type: ignore[index]


def test_images_and_files_go_out_encrypted(rt: Runtime, fake: FakeWeChat, tmp_path: Path) -> None:
    _user_writes(rt, fake)
    workspace = rt.config.workspace_path()
    workspace.mkdir(parents=True, exist_ok=True)
    png = workspace / "chart.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(300))
    doc = workspace / "report.pdf"
    doc.write_bytes(os.urandom(5000))
    outside = tmp_path / "secret.png"  # the payload is not trusted: a file outside the workspace is not sent
    outside.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(300))
    row = _record(rt, "here you are", media=[{"path": str(png)}, {"path": str(outside)},
                                             {"path": str(doc), "name": "Report.pdf"}])
    delivery.deliver_lane(rt, "wechat", USER)
    assert _status(rt, row) == "sent"
    kinds = [m["item_list"][0]["type"] for m in fake.sent]
    assert kinds == [1, 2, 4]
    image_ref = fake.sent[1]["item_list"][0]["image_item"]["media"]
    file_item = fake.sent[2]["item_list"][0]["file_item"]
    assert media.download(image_ref, fake.cdn_url, 10_000) == png.read_bytes()
    assert media.download(file_item["media"], fake.cdn_url, 10_000) == doc.read_bytes()
    assert file_item["file_name"] == "Report.pdf"
    assert fake.blobs  # what the CDN holds is ciphertext
    assert all(doc.read_bytes()[:64] not in blob for blob in fake.blobs.values())
