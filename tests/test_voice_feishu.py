"""Voice on Feishu: an `audio` message is downloaded (message resources, type=file), heard before the turn,
and the answer goes back as text and as an audio message (im/v1/files upload of Ogg Opus, msg_type audio).
Real runtime, the fake Feishu and the fake model server's audio endpoints, all on loopback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from picobot.channels import delivery, events
from picobot.channels.feishu.adapter import _opus_ms
from picobot.demo.llm.audio import ogg_opus_silence
from picobot.runtime import turn_runner
from scripts.fake_feishu import FakeFeishu
from tests.conftest import add_rule
from tests.feishu_fake import fake_feishu, feishu_config  # noqa: F401 (fixtures)
from tests.test_voice import KEY, runtime, voice_cfg

CHAT = "oc_voice_chat"


def audio_event(message_id: str, file_key: str) -> dict[str, Any]:
    message = {"message_id": message_id, "root_id": "", "parent_id": "", "create_time": "1609073151345",
               "chat_id": CHAT, "chat_type": "p2p", "message_type": "audio",
               "content": json.dumps({"file_key": file_key, "duration": 2000})}
    return {"schema": "2.0",
            "header": {"event_id": f"ev_{message_id}", "event_type": "im.message.receive_v1", "create_time": "1",
                       "app_id": "cli_test"},
            "event": {"sender": {"sender_id": {"open_id": "ou_user", "union_id": "on_u", "user_id": "u"},
                                 "sender_type": "user", "tenant_key": "t"}, "message": message}}


def feishu_rt(tmp_path: Path, llm: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, fake: FakeFeishu,
              voice: dict[str, Any] | None) -> Any:
    from picobot.app import build_runtime
    from picobot.config import load_config
    from tests.telegram_fake import RecordingQueue

    rt = runtime(tmp_path, llm, redis_url, monkeypatch, None, voice)  # writes the home's config.json
    rt.close()
    home = rt.config.home
    cfg = json.loads((home / "config.json").read_text())
    cfg["channels"] = {"feishu": {"enabled": True, "app_id": fake.app_id, "app_secret": fake.app_secret,
                                  "domain": fake.base_url, "verification_token": "vtok", "encrypt_key": "ekey"}}
    (home / "config.json").write_text(json.dumps(cfg))
    return build_runtime(load_config(), RecordingQueue(), migrate=True)  # type: ignore[arg-type]


def test_a_feishu_voice_message_is_heard_and_answered_with_an_audio_message(
        tmp_path: Path, llm: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, fake_feishu: FakeFeishu) -> None:
    rt = feishu_rt(tmp_path, llm, redis_url, monkeypatch, fake_feishu, voice_cfg(llm))
    try:
        add_rule(llm, "is the train on time", {"content": "Yes, it is on time."})
        voice = ogg_opus_silence(25) + b"SAY:is the train on time\n"
        fake_feishu.add_resource("om_v1", "file_v3_in", voice, "audio/ogg")
        event_id, _ = events.record(rt.db, "feishu", "ev_om_v1", audio_event("om_v1", "file_v3_in"))
        assert events.process(rt, event_id) == "done"
        [sid] = rt.queue.turns
        assert turn_runner.drain_session(rt, sid) == 1
        assert delivery.deliver_lane(rt, "feishu", CHAT)["sent"] == 3
        kinds = [(m["msg_type"], m["reply_to"]) for m in fake_feishu.sent]
        assert kinds[0] == ("text", "om_v1") and "is the train on time" in json.dumps(
            fake_feishu.sent[0]["content"], ensure_ascii=False)
        assert kinds[-1] == ("audio", "om_v1")
        key = fake_feishu.sent[-1]["content"]["file_key"]
        upload = fake_feishu.files[key]
        assert upload["file_type"] == "opus" and upload["data"].startswith(b"OggS")
        assert int(upload["duration"]) == _opus_ms(upload["data"]) > 0
        resource = [c for c in fake_feishu.calls if "/resources/" in c["path"]]
        assert resource and resource[0]["query"] == {"type": "file"}
        assert KEY not in json.dumps(fake_feishu.calls, default=str)
    finally:
        rt.close()


def test_a_feishu_voice_message_without_stt_gets_the_configuration_hint(
        tmp_path: Path, llm: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, fake_feishu: FakeFeishu) -> None:
    rt = feishu_rt(tmp_path, llm, redis_url, monkeypatch, fake_feishu, None)
    try:
        fake_feishu.add_resource("om_v2", "file_v3_in2", ogg_opus_silence(10), "audio/ogg")
        event_id, _ = events.record(rt.db, "feishu", "ev_om_v2", audio_event("om_v2", "file_v3_in2"))
        assert events.process(rt, event_id) == "done"
        assert turn_runner.drain_session(rt, rt.queue.turns[-1]) == 1
        delivery.deliver_lane(rt, "feishu", CHAT)
        assert "voice.stt" in json.dumps([m["content"] for m in fake_feishu.sent], ensure_ascii=False)
        assert not [m for m in fake_feishu.sent if m["msg_type"] == "audio"]
    finally:
        rt.close()
