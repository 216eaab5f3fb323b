"""Intake, the Redis relay and the adapter, on a real Redis, with a stand-in for the SDK's ports
(conftest.Ports) and a platform that answers API calls from a thread."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from picobot.plugins import Delivery, DeliveryError
from picobot_qq import state
from picobot_qq.adapter import QQAdapter
from picobot_qq.intake import DUPLICATE, IGNORED, MALFORMED, META, RECORDED, RESPONSE, handle
from picobot_qq.link import Link
from qq_fakes import PNG, Ports

SELF = 10001


def event(message: Any, user: int = 20002, group: int | None = None, message_id: int = 501) -> dict[str, Any]:
    frame = {"time": 1700000000, "self_id": SELF, "post_type": "message", "message_id": message_id, "user_id": user,
             "message": message, "raw_message": "", "font": 0, "sender": {"user_id": user, "nickname": "alice"}}
    if group is None:
        frame.update(message_type="private", sub_type="friend")
    else:
        frame.update(message_type="group", sub_type="normal", group_id=group)
    return frame


class Platform:
    """Answers the frames a Link sends, like OneBot: message ids from 9000 up."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.link: Link | None = None
        self.fail_with: dict[str, Any] | None = None

    def send(self, text: str) -> None:
        call = json.loads(text)
        self.sent.append(call)
        answer = self.fail_with or {"status": "ok", "retcode": 0, "data": {"message_id": 9000 + len(self.sent)}}
        threading.Thread(target=lambda: self.link.frame(json.dumps({**answer, "echo": call["echo"]}))).start()


@pytest.fixture
def linked(ports: Ports, channel_key: str) -> Any:
    platform = Platform()
    platform.link = Link(ports, channel_key, platform.send, "forward")
    platform.link.start(str(SELF))
    yield platform
    platform.link.stop()


def test_intake_records_what_the_bot_answers_once(ports: Ports, channel_key: str) -> None:
    assert handle(ports, channel_key, json.dumps(event("hi"))) == RECORDED
    assert handle(ports, channel_key, json.dumps(event("hi"))) == DUPLICATE
    assert list(ports.events) == [(channel_key, f"{SELF}:501")]
    assert handle(ports, channel_key, json.dumps(event("hi", user=99999, message_id=2))) == IGNORED  # not allowed
    assert handle(ports, channel_key, json.dumps(event("hi", group=777, message_id=3))) == IGNORED  # no @
    assert handle(ports, channel_key, json.dumps(event(f"[CQ:at,qq={SELF}] hi", group=777, message_id=4))) == RECORDED
    assert handle(ports, channel_key, json.dumps(event("hi", user=SELF, message_id=5))) == IGNORED  # itself
    assert handle(ports, channel_key, "{not json") == MALFORMED
    assert handle(ports, channel_key, json.dumps({"post_type": "notice", "notice_type": "group_increase"})) == IGNORED
    assert handle(ports, channel_key, json.dumps({"status": "ok", "retcode": 0, "echo": "x"})) == RESPONSE
    assert len(ports.events) == 2


def test_meta_events_are_status_never_input(ports: Ports, channel_key: str) -> None:
    beat = {"time": 1700000001, "self_id": SELF, "post_type": "meta_event", "meta_event_type": "heartbeat",
            "status": {"online": True, "good": True}, "interval": 5000}
    assert handle(ports, channel_key, json.dumps(beat)) == META
    assert handle(ports, channel_key, json.dumps({**beat, "meta_event_type": "lifecycle", "sub_type": "connect"})) == META
    found = state.read_status(ports.redis, channel_key)
    assert (found["self_id"], found["online"], found["heartbeat_at"], found["lifecycle"]) == ("10001", True, 1700000001,
                                                                                             "connect")
    assert ports.events == {}


def test_a_private_answer_goes_through_the_relay(ports: Ports, channel_key: str, linked: Platform) -> None:
    adapter = QQAdapter(channel_key, ports.channel(channel_key), ports)
    result = adapter.deliver(Delivery(1, channel_key, "private:20002", "reply", {"text": "hello", "reply_to": "501"}))
    assert result == {"message_ids": ["9001"]}
    assert linked.sent[0]["action"] == "send_private_msg"
    assert linked.sent[0]["params"] == {"user_id": 20002, "message": [{"type": "text", "data": {"text": "hello"}}]}
    assert state.was_sent(ports.redis, channel_key, "9001")


def test_a_long_group_answer_is_split_and_quotes_first(ports: Ports, channel_key: str, linked: Platform) -> None:
    adapter = QQAdapter(channel_key, ports.channel(channel_key), ports)
    text = "\n\n".join(["p" * 3000, "q" * 3000])
    adapter.deliver(Delivery(2, channel_key, "group:777", "reply", {"text": text, "reply_to": "501"}))
    first, second = (call["params"] for call in linked.sent)
    assert first["group_id"] == 777 and first["message"] == [{"type": "reply", "data": {"id": "501"}},
                                                             {"type": "text", "data": {"text": "p" * 3000}}]
    assert second["message"] == [{"type": "text", "data": {"text": "q" * 3000}}]
    adapter.deliver(Delivery(2, channel_key, "group:777", "reply", {"text": text, "reply_to": "501"}))
    assert len(linked.sent) == 2  # a retried delivery sends nothing twice


def test_answer_files_go_as_base64_segments(ports: Ports, channel_key: str, linked: Platform, tmp_path: Path) -> None:
    workspace = ports.config.workspace_path()
    (workspace / "shot.png").write_bytes(PNG)
    (workspace / "notes.txt").write_text("notes")
    (tmp_path / "secret.txt").write_text("no")
    media = [{"path": str(workspace / "shot.png")}, {"path": str(workspace / "notes.txt"), "name": "n.txt"},
             {"path": str(tmp_path / "secret.txt")}, {"path": "relative"}, "junk"]
    adapter = QQAdapter(channel_key, ports.channel(channel_key), ports)
    adapter.deliver(Delivery(3, channel_key, "private:20002", "reply", {"text": "see", "media": media}))
    kinds = [call["params"]["message"][0]["type"] for call in linked.sent]
    assert kinds == ["text", "image", "file"]
    assert linked.sent[1]["params"]["message"][0]["data"]["file"].startswith("base64://iVBORw0KGgo")
    assert linked.sent[2]["params"]["message"][0]["data"]["name"] == "n.txt"


def test_delivery_errors(ports: Ports, channel_key: str, linked: Platform) -> None:
    adapter = QQAdapter(channel_key, ports.channel(channel_key), ports)
    with pytest.raises(DeliveryError) as bad_chat:
        adapter.deliver(Delivery(4, channel_key, "20002", "reply", {"text": "x"}))
    assert bad_chat.value.permanent
    linked.fail_with = {"status": "failed", "retcode": 1404, "wording": "no such friend"}
    with pytest.raises(DeliveryError) as refused:
        adapter.deliver(Delivery(5, channel_key, "private:20002", "reply", {"text": "x"}))
    assert refused.value.permanent and "no such friend" in str(refused.value)
    linked.fail_with = {"status": "failed", "retcode": 200, "wording": "busy"}
    with pytest.raises(DeliveryError) as busy:
        adapter.deliver(Delivery(6, channel_key, "private:20002", "reply", {"text": "x"}))
    assert not busy.value.permanent


def test_no_holder_fails_at_once_and_transient(ports: Ports, channel_key: str) -> None:
    adapter = QQAdapter(channel_key, ports.channel(channel_key), ports)
    with pytest.raises(DeliveryError) as exc:
        adapter.deliver(Delivery(7, channel_key, "private:20002", "reply", {"text": "x"}))
    assert not exc.value.permanent and "not connected" in str(exc.value)
    assert ports.redis.llen(state.key(channel_key, "calls")) == 0


def test_normalize_private_group_and_images(ports: Ports, channel_key: str) -> None:
    adapter = QQAdapter(channel_key, ports.channel(channel_key), ports)
    [private] = adapter.normalize(event("/help"))
    assert (private.chat_id, private.sender_id, private.content, private.platform_message_id) == (
        "private:20002", "20002", "/help", "501")
    ports.files["https://img.example/a.png"] = PNG
    message = [{"type": "at", "data": {"qq": str(SELF)}}, {"type": "text", "data": {"text": " what is this?"}},
               {"type": "image", "data": {"file": "a.png", "url": "https://img.example/a.png"}},
               {"type": "image", "data": {"file": "b.png", "url": "https://img.example/missing.png"}}]
    [group] = adapter.normalize(event(message, group=777))
    assert group.chat_id == "group:777" and group.metadata["chat_type"] == "group"
    assert group.content[0] == {"type": "text", "text": "what is this?"}
    assert group.content[1]["type"] == "image_url" and group.content[1]["url"].startswith("data:image/png;base64,")
    assert "could not be downloaded" in group.content[2]["text"]
    assert adapter.normalize(event("hi", group=777)) == []  # not addressed
    state.note_sent(ports.redis, channel_key, "9005", 60)
    assert adapter.normalize(event("[CQ:reply,id=9005]thanks", group=777))[0].content == "thanks"
    assert adapter.normalize(event([{"type": "record", "data": {"file": "x.amr"}}])) == []  # nothing readable
    assert adapter.normalize({"post_type": "message", "message_type": "private"}) == []
