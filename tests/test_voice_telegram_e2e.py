"""Voice end to end on a real stack (web + worker + a real `picobot telegram` poller): a Telegram voice note
is fetched by the poller's update, downloaded and heard in the worker (the fake model server's speech to
text), answered, and the answer comes back as text and as a voice note (sendVoice, Ogg Opus)."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from picobot.demo.llm.audio import ogg_opus_silence
from scripts.fake_telegram import FakeTelegram
from tests.conftest import add_rule
from tests.stack import Stack, wait_for
from tests.test_telegram_e2e import log, settled, start_poller

pytestmark = pytest.mark.slow

TOKEN = "333333333:AAVoiceBotTokenForTheE2eTests_xyzw"
KEY = "sk-voice-e2e-secret-0123456789"
CHAT = 7101


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeTelegram]:
    f = FakeTelegram([TOKEN]).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def tg(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any, fake: FakeTelegram) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("voice-e2e"), fake_llm.url)
    cfg_path = s.home / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["channels"] = {"telegram": {"enabled": True, "token": TOKEN, "base_url": fake.base_url,
                                    "allow_from": [str(CHAT)], "poll_timeout_secs": 5}}
    cfg["voice"] = {"stt": {"base_url": fake_llm.openai_url, "api_key": KEY},
                    "tts": {"base_url": fake_llm.openai_url, "api_key": KEY, "voice": "alloy"}}
    cfg_path.write_text(json.dumps(cfg, indent=2))
    try:
        s.start()
        start_poller(s, "tg1")
        yield s
    finally:
        s.stop()


def test_a_voice_note_is_heard_answered_and_spoken_back(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    add_rule(llm, "when does the shop open", {"content": "At nine."})
    data = ogg_opus_silence(50) + b"SAY:when does the shop open\n"
    file_id = fake.add_file(data, "voice/file_1.oga")
    update = fake.message(chat_id=CHAT, text=None, token=TOKEN, voice={
        "file_id": file_id, "file_unique_id": "vq1", "duration": 1, "mime_type": "audio/ogg", "file_size": len(data)})
    sent = settled(tg, fake, CHAT, token=TOKEN)
    assert [m["text"] for m in sent] == ["🎤 “when does the shop open”", "At nine."]
    [voice] = fake.wait_voices(1, CHAT, token=TOKEN)
    assert voice["kind"] == "voice" and voice["data"].startswith(b"OggS") and b"OpusHead" in voice["data"][:100]
    assert voice["reply_to"] == update["message"]["message_id"]
    assert KEY not in tg.all_logs()
    wait_for(lambda: "transcribed" in tg.all_logs(), 10, "the worker logged no transcription")
    assert "tg1" in tg.procs and log(tg, "tg1")
