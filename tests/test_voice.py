"""Voice: speech to text before the turn, text to speech after it, through real HTTP to the fake servers.

The runtime is real (SQL, a private Redis, the plugin host); the steps a worker runs are called in
order here (channel event -> turn -> delivery lane), against the fake Bot API and the fake model
server's `/v1/audio/*` endpoints.
"""

from __future__ import annotations

import json
import logging
import math
import socket
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.app import App as Runtime, build_runtime
from picobot.channels import delivery, events
from picobot.channels.telegram import intake
from picobot.config import load_config
from picobot.config.schema import Config, SttConfig, TtsConfig
from picobot.demo.llm.audio import ogg_opus_silence
from picobot.domain.audio import audio_block
from picobot.errors import ConfigError
from picobot.gateway.inbound import InboundMessage
from picobot.gateway.intake import Gateway
from picobot.plugins.types import AudioClip
from picobot.runtime import turn_runner
from picobot.storage import messages as message_store
from picobot.storage.models import OutboxRow
from picobot.voice.client import VoiceError, sniff, speak, transcribe
from scripts.fake_telegram import FakeTelegram
from tests.conftest import add_rule
from tests.stack import base_config
from tests.telegram_fake import RecordingQueue
from tests.http_client import HTTP

KEY = "sk-voice-secret-0123456789abcdef"
CHAT = 4242


def voice_bytes(said: str) -> bytes:
    """A real Ogg Opus file with the fake transcriber's marker after it (what it 'hears')."""
    return ogg_opus_silence(25) + f"SAY:{said}\n".encode()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runtime(tmp_path: Path, llm: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, fake_tg: FakeTelegram | None,
            voice: dict[str, Any] | None, **gateway: Any) -> Runtime:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cfg = base_config(llm.url, 1, **gateway)
    cfg["memory"] = {"enabled": False}
    cfg["titles"] = {"enabled": False}
    if fake_tg is not None:
        cfg["channels"] = {"telegram": {"enabled": True, "token": fake_tg.token, "base_url": fake_tg.base_url,
                                        "allow_from": [str(CHAT)]}}
    if voice is not None:
        cfg["voice"] = voice
    (home / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-voice-llm-key")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return build_runtime(load_config(), RecordingQueue(), migrate=True)  # type: ignore[arg-type]


def voice_cfg(llm: Any, stt: bool = True, tts: bool = True, tts_keys: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    if stt:
        cfg["stt"] = {"base_url": llm.openai_url, "api_key": KEY, "model": "whisper-1"}
    if tts:
        cfg["tts"] = {"base_url": llm.openai_url, "api_key": KEY, "model": "tts-1", "voice": "alloy", **(tts_keys or {})}
    return cfg


@pytest.fixture
def fake_tg() -> Iterator[FakeTelegram]:
    fake = FakeTelegram().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def made(tmp_path: Path, llm: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Runtime]]:
    runtimes: list[Runtime] = []
    yield runtimes
    for rt in runtimes:
        rt.close()


def make(made: list[Runtime], tmp_path: Path, llm: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch,
         fake_tg: FakeTelegram | None, voice: dict[str, Any] | None, **gateway: Any) -> Runtime:
    rt = runtime(tmp_path, llm, redis_url, monkeypatch, fake_tg, voice, **gateway)
    made.append(rt)
    return rt


def send_voice(rt: Runtime, fake_tg: FakeTelegram, data: bytes, kind: str = "voice") -> str:
    """A Telegram voice message from the user, through the intake, the event task and the gateway: its session."""
    file_id = fake_tg.add_file(data, path=f"voice/file_{len(fake_tg.files)}.oga")
    update = fake_tg.message(chat_id=CHAT, text=None, queue=False, **{kind: {
        "file_id": file_id, "file_unique_id": "uq" + file_id[-6:], "duration": 2, "mime_type": "audio/ogg",
        "file_size": len(data)}})
    assert intake.accept(rt, "telegram", update) == intake.RECORDED
    [event_id] = rt.queue.events[-1:]
    assert events.process(rt, event_id) == "done"
    return rt.queue.turns[-1]


# ---- the clients against the fake server -----------------------------------------------------


def test_transcription_goes_over_http_to_the_fake_and_sends_the_key(llm: Any) -> None:
    stt = SttConfig(base_url=llm.openai_url, api_key=KEY, language="en")
    assert transcribe(stt, AudioClip(voice_bytes("turn on the lights"), "audio/ogg")) == "turn on the lights"
    [request] = [r for r in llm.requests() if r["path"].endswith("/audio/transcriptions")]
    assert request["body"]["model"] == "whisper-1" and request["body"]["language"] == "en"
    assert request["body"]["file"]["filename"] == "voice.ogg"
    import hashlib

    assert request["auth"]["authorization"] == hashlib.sha256(KEY.encode()).hexdigest()


def test_speech_in_opus_is_a_real_ogg_opus_file(llm: Any) -> None:
    clip = speak(TtsConfig(base_url=llm.openai_url, api_key=KEY), "Hello there, this is the answer.")
    assert clip.format == "opus" and clip.mime == "audio/ogg"
    assert clip.data.startswith(b"OggS") and b"OpusHead" in clip.data[:100] and b"OpusTags" in clip.data
    [request] = [r for r in llm.requests() if r["path"].endswith("/audio/speech")]
    assert request["body"] == {"model": "tts-1", "input": "Hello there, this is the answer.", "voice": "alloy",
                               "response_format": "opus"}


def test_speech_in_another_format_is_known_by_its_bytes(llm: Any) -> None:
    clip = speak(TtsConfig(base_url=llm.openai_url, format="mp3"), "hi")
    assert clip.format == "wav" and sniff(clip.data) == "wav"  # the fake answers WAV for anything but opus


def test_a_server_that_is_down_is_a_clear_voice_error(llm: Any) -> None:
    stt = SttConfig(base_url=f"http://127.0.0.1:{closed_port()}/v1", api_key=KEY, timeout_secs=5)
    with pytest.raises(VoiceError) as caught:
        transcribe(stt, AudioClip(voice_bytes("x"), "audio/ogg"))
    assert "could not be reached" in str(caught.value) and KEY not in str(caught.value)


def test_an_error_status_is_a_voice_error_without_the_key(llm: Any) -> None:
    stt = SttConfig(base_url=llm.openai_url, api_key=KEY)
    with pytest.raises(VoiceError) as caught:
        transcribe(stt, AudioClip(voice_bytes("FAIL 503"), "audio/ogg"))
    assert "HTTP 503" in str(caught.value) and caught.value.transient and KEY not in str(caught.value)


def test_audio_over_the_stt_limit_is_refused_before_any_request(llm: Any) -> None:
    stt = SttConfig(base_url=llm.openai_url, max_bytes=100)
    with pytest.raises(VoiceError) as caught:
        transcribe(stt, AudioClip(b"x" * 101, "audio/ogg"))
    assert "voice.stt.max_bytes" in str(caught.value) and not caught.value.transient
    assert not [r for r in llm.requests() if "/audio/" in r["path"]]


# ---- Telegram in and out ----------------------------------------------------------------------


def test_a_telegram_voice_message_is_heard_answered_and_spoken(made: list, tmp_path: Path, llm: Any, redis_url: str,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               fake_tg: FakeTelegram,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rt = make(made, tmp_path, llm, redis_url, monkeypatch, fake_tg, voice_cfg(llm))
    add_rule(llm, "what time is it in Lisbon", {"content": "It is noon in Lisbon."})
    sid = send_voice(rt, fake_tg, voice_bytes("what time is it in Lisbon"))
    assert turn_runner.drain_session(rt, sid) == 1
    # the model got the transcript, marked, and nothing of the audio
    chat = [r for r in llm.requests() if r["path"].endswith("/chat/completions")][-1]
    sent_text = json.dumps(chat["body"]["messages"], ensure_ascii=False)
    assert "🎤 what time is it in Lisbon" in sent_text and "data:audio" not in sent_text
    assert delivery.deliver_lane(rt, "telegram", str(CHAT))["sent"] == 3
    texts = fake_tg.texts(CHAT)
    assert texts == ["🎤 “what time is it in Lisbon”", "It is noon in Lisbon."]
    [voice] = fake_tg.voices_to(CHAT)
    assert voice["kind"] == "voice" and voice["data"].startswith(b"OggS") and b"OpusHead" in voice["data"][:100]
    assert voice["reply_to"] is not None  # it answers the user's voice message
    speech = [r for r in llm.requests() if r["path"].endswith("/audio/speech")]
    assert speech[-1]["body"]["input"] == "It is noon in Lisbon."
    # the key never reached a log line, an outbox row or a stored message
    assert KEY not in caplog.text
    with rt.db.connect() as conn:
        dumped = json.dumps([dict(r._mapping) for r in conn.execute(OutboxRow.__table__.select())],
                            default=str)
    assert KEY not in dumped


def test_an_audio_file_is_heard_too(made: list, tmp_path: Path, llm: Any, redis_url: str,
                                    monkeypatch: pytest.MonkeyPatch, fake_tg: FakeTelegram) -> None:
    rt = make(made, tmp_path, llm, redis_url, monkeypatch, fake_tg, voice_cfg(llm, tts=False))
    add_rule(llm, "play the file", {"content": "done"})
    sid = send_voice(rt, fake_tg, voice_bytes("play the file"), kind="audio")
    assert turn_runner.drain_session(rt, sid) == 1
    assert delivery.deliver_lane(rt, "telegram", str(CHAT))["sent"] == 3  # heard, answer, voice row done empty
    assert fake_tg.texts(CHAT) == ["🎤 “play the file”", "done"]
    assert fake_tg.voices_to(CHAT) == []  # no voice.tts: no spoken answer
    with rt.db.connect() as conn:
        [voice_row] = conn.execute(OutboxRow.__table__.select().where(OutboxRow.__table__.c.kind == "voice")).mappings()
    assert voice_row["status"] == "sent" and "voice.tts" in json.dumps(dict(voice_row), default=str)


def test_without_stt_the_user_is_told_what_to_configure(made: list, tmp_path: Path, llm: Any, redis_url: str,
                                                        monkeypatch: pytest.MonkeyPatch, fake_tg: FakeTelegram) -> None:
    rt = make(made, tmp_path, llm, redis_url, monkeypatch, fake_tg, None)
    before = len([r for r in llm.requests() if r["path"].endswith("/chat/completions")])
    sid = send_voice(rt, fake_tg, voice_bytes("hello"))
    assert turn_runner.drain_session(rt, sid) == 1
    delivery.deliver_lane(rt, "telegram", str(CHAT))
    [answer] = fake_tg.texts(CHAT)
    assert "voice.stt" in answer and "voice message" in answer
    assert len([r for r in llm.requests() if r["path"].endswith("/chat/completions")]) == before  # no model call
    assert fake_tg.voices_to(CHAT) == []


def test_stt_down_tells_the_user_and_keeps_the_audio(made: list, tmp_path: Path, llm: Any, redis_url: str,
                                                     monkeypatch: pytest.MonkeyPatch, fake_tg: FakeTelegram,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    down = {"stt": {"base_url": f"http://127.0.0.1:{closed_port()}/v1", "api_key": KEY, "timeout_secs": 5}}
    rt = make(made, tmp_path, llm, redis_url, monkeypatch, fake_tg, down)
    data = voice_bytes("remember the milk")
    sid = send_voice(rt, fake_tg, data)
    assert turn_runner.drain_session(rt, sid) == 1
    delivery.deliver_lane(rt, "telegram", str(CHAT))
    [answer] = fake_tg.texts(CHAT)
    assert "could not be transcribed" in answer and "could not be reached" in answer and KEY not in answer
    kept = list((rt.config.home / "voice" / "unheard").iterdir())
    assert [p.read_bytes() for p in kept] == [data]  # the input is not lost
    assert kept[0].name in answer
    assert KEY not in caplog.text


def test_an_oversized_voice_message_is_refused_clearly(made: list, tmp_path: Path, llm: Any, redis_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rt = make(made, tmp_path, llm, redis_url, monkeypatch, None, voice_cfg(llm))
    limit = rt.config.gateway.max_audio_bytes
    big = [{"type": "text", "text": "listen"}, audio_block("audio/ogg", b"\0" * (limit + 1))]
    reply = Gateway(rt).submit(InboundMessage(channel="web", chat_id="c1", sender_id="u", content=big))
    assert reply.kind == "rejected" and reply.code == "too_large" and "gateway.max_audio_bytes" in reply.text
    assert rt.queue.turns == []  # nothing stored, nothing started
    two = [audio_block("audio/ogg", b"a"), audio_block("audio/ogg", b"b")]
    reply = Gateway(rt).submit(InboundMessage(channel="web", chat_id="c1", sender_id="u", content=two))
    assert reply.code == "bad_content" and "at most one audio block" in reply.text
    bad = [{"type": "audio", "url": "data:image/png;base64,AAAA"}]
    reply = Gateway(rt).submit(InboundMessage(channel="web", chat_id="c1", sender_id="u", content=bad))
    assert reply.code == "bad_content" and "data:audio/" in reply.text


def test_a_telegram_voice_message_over_the_limit_is_refused_with_a_notice(made: list, tmp_path: Path, llm: Any,
                                                                          redis_url: str,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          fake_tg: FakeTelegram) -> None:
    rt = make(made, tmp_path, llm, redis_url, monkeypatch, fake_tg, voice_cfg(llm), max_audio_bytes=200)
    file_id = fake_tg.add_file(voice_bytes("a long story"), path="voice/long.oga")
    update = fake_tg.message(chat_id=CHAT, text=None, queue=False, voice={"file_id": file_id, "file_unique_id": "l1",
                                                                         "duration": 60, "mime_type": "audio/ogg"})
    assert intake.accept(rt, "telegram", update) == intake.RECORDED
    assert events.process(rt, rt.queue.events[-1]) == "done"
    assert rt.queue.turns == []  # refused before anything was stored
    delivery.deliver_lane(rt, "telegram", str(CHAT))
    [notice] = fake_tg.texts(CHAT)
    assert "gateway.max_audio_bytes" in notice and "200" in notice
    assert not [r for r in llm.requests() if r["path"].endswith("/audio/transcriptions")]


def test_a_web_voice_message_is_stored_as_its_transcript(made: list, tmp_path: Path, llm: Any, redis_url: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    rt = make(made, tmp_path, llm, redis_url, monkeypatch, None, voice_cfg(llm, tts=False))
    add_rule(llm, "book a table", {"content": "Booked."})
    content = [audio_block("audio/webm", b"\x1aE\xdf\xa3" + b"SAY:book a table\n")]
    reply = Gateway(rt).submit(InboundMessage(channel="web", chat_id="c2", sender_id="u", content=content))
    assert reply.kind == "accepted"
    assert turn_runner.drain_session(rt, reply.session_id) == 1
    with rt.db.connect() as conn:
        history = message_store.load_history(conn, reply.session_id)
    got = json.dumps([m.to_dict() for m in history], ensure_ascii=False)
    assert "🎤 book a table" in got and "data:audio" not in got and "Booked." in got
    upload = [r for r in llm.requests() if r["path"].endswith("/audio/transcriptions")][-1]
    assert upload["body"]["file"]["filename"] == "voice.webm"


# ---- hostile config ---------------------------------------------------------------------------

_junk = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                  st.text(max_size=50), st.text(alphabet="\ud800\udfff\x00 ", max_size=5),
                  st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
                  st.recursive(st.lists(st.none(), max_size=1), lambda inner: st.lists(inner, max_size=1),
                               max_leaves=60))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(section=st.sampled_from(["stt", "tts"]),
       key=st.sampled_from(["base_url", "api_key", "model", "language", "timeout_secs", "max_bytes", "voice",
                            "format", "max_chars", "bogus"]),
       value=_junk)
def test_hostile_voice_config_is_a_key_path_error_or_a_sane_value(section: str, key: str, value: Any) -> None:
    base = {"base_url": "http://127.0.0.1:9/v1"}
    try:
        cfg = Config.model_validate({"voice": {section: {**base, key: value}}})
    except ConfigError as exc:
        assert exc.key_path.startswith(f"voice.{section}"), exc.key_path
        return
    except Exception as exc:  # pydantic's ValidationError: the loader turns it into a key path
        from pydantic import ValidationError

        assert isinstance(exc, ValidationError)
        assert all(e["loc"][:2] == ("voice", section) for e in exc.errors())
        return
    part = getattr(cfg.voice, section)
    assert part.base_url.startswith(("http://", "https://"))
    for name in ("timeout_secs",):
        assert math.isfinite(getattr(part, name)) and 0 < getattr(part, name) <= 600
    assert type(getattr(part, "max_bytes", getattr(part, "max_chars", 1))) is int
    if part.api_key is not None:
        assert KEY not in repr(part) and (len(part.api_key) < 8 or part.api_key not in repr(cfg))


def test_voice_config_errors_name_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for bad, path in [({"stt": {"base_url": "ftp://x"}}, "voice.stt.base_url"),
                      ({"tts": {"base_url": "http://x", "format": "ogg"}}, "voice.tts.format"),
                      ({"stt": {"base_url": "http://x", "timeout_secs": True}}, "voice.stt.timeout_secs"),
                      ({"stt": {"base_url": "http://x", "model": "a b"}}, "voice.stt.model"),
                      ({"stt": {"base_url": "http://x", "language": "english!"}}, "voice.stt.language"),
                      ({"stt": {}}, "voice.stt.base_url"),
                      ({"tts": {"base_url": "http://x", "speed": 2}}, "voice.tts.speed")]:
        (tmp_path / "config.json").write_text(json.dumps({"voice": bad}))
        monkeypatch.setenv("PICOBOT_HOME", str(tmp_path))
        with pytest.raises(ConfigError) as caught:
            load_config()
        assert caught.value.key_path == path, (bad, caught.value.key_path)


def test_the_api_key_is_masked_wherever_the_config_is_shown(tmp_path: Path) -> None:
    from picobot.config.secrets import masked, secret_values

    cfg = Config.model_validate({"voice": {"stt": {"base_url": "http://x/v1", "api_key": KEY},
                                           "tts": {"base_url": "http://x/v1", "api_key": KEY}}})
    assert KEY in secret_values(cfg)
    assert KEY not in json.dumps(masked(cfg)) and KEY not in repr(cfg)


# ---- WeChat: iLink sends its own transcript ---------------------------------------------------


def test_a_wechat_voice_item_is_its_transcript_marked_as_heard(tmp_path: Path) -> None:
    from picobot.channels.wechat.config import WeChatConfig
    from picobot.channels.wechat.inbound import to_inbound

    said = {"message_id": "77", "from_user_id": "u@im.wechat", "message_type": 1, "context_token": "c",
            "item_list": [{"type": 3, "voice_item": {"encode_type": 6, "playtime": 2000, "text": "call mum"}}]}
    [inbound] = to_inbound({"message": said}, WeChatConfig(), "wechat", tmp_path)
    assert inbound.content == "🎤 call mum"
    silent = {**said, "message_id": "78", "item_list": [{"type": 3, "voice_item": {"encode_type": 6}}]}
    [inbound] = to_inbound({"message": silent}, WeChatConfig(), "wechat", tmp_path)
    assert inbound.content.startswith("🎤 [voice message without a transcript")


# ---- /stop ------------------------------------------------------------------------------------


def test_stop_cuts_a_transcription_in_flight(llm: Any) -> None:
    import threading

    from picobot.domain.cancel import CancelToken

    stt = SttConfig(base_url=llm.openai_url, api_key=KEY, timeout_secs=120)
    cancel = CancelToken()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(transcribe(stt, AudioClip(voice_bytes("WAIT 600000 too late"), "audio/ogg"), cancel=cancel))
        except VoiceError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    from tests.stack import wait_for

    wait_for(lambda: any(r["path"].endswith("/audio/transcriptions") for r in llm.requests()), 30,
             "the transcription never reached the server")
    cancel.cancel()
    worker.join(120)  # the server would answer in ten minutes
    assert not worker.is_alive()
    [result] = outcome  # ended by /stop, not by the server's answer
    assert isinstance(result, VoiceError) and str(result) == "stopped"


def test_a_turn_stopped_while_hearing_ends_stopped_without_a_model_call(made: list, tmp_path: Path, llm: Any,
                                                                        redis_url: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from picobot.domain.cancel import CancelToken
    from picobot.runtime.audio_input import hear
    from picobot.plugins.types import StageContext

    rt = make(made, tmp_path, llm, redis_url, monkeypatch, None, voice_cfg(llm, tts=False))
    cancel = CancelToken()
    cancel.cancel()
    content, why = hear(rt, StageContext("web:c:default", "web", "c", "u", "t1"),
                        [audio_block("audio/ogg", voice_bytes("never heard"))], cancel)
    assert why == "stopped" and content == "🎤 [voice message, not transcribed]"
    assert not [r for r in llm.requests() if r["path"].endswith("/audio/transcriptions")]


def test_speech_in_another_format_goes_as_an_audio_file_without_ffmpeg(made: list, tmp_path: Path, llm: Any,
                                                                       redis_url: str,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       fake_tg: FakeTelegram) -> None:
    empty = tmp_path / "no-ffmpeg"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no ffmpeg to convert with
    rt = make(made, tmp_path, llm, redis_url, monkeypatch, fake_tg, voice_cfg(llm, tts_keys={"format": "mp3"}))
    add_rule(llm, "say it in mp3", {"content": "Here it is."})
    sid = send_voice(rt, fake_tg, voice_bytes("say it in mp3"))
    assert turn_runner.drain_session(rt, sid) == 1
    assert delivery.deliver_lane(rt, "telegram", str(CHAT))["sent"] == 3
    [sent] = fake_tg.voices_to(CHAT)
    assert sent["kind"] == "audio" and sent["data"].startswith(b"RIFF") and sent["content_type"] == "audio/wav"


def test_speech_that_keeps_failing_is_given_up_and_the_text_went_anyway(made: list, tmp_path: Path, llm: Any,
                                                                        redis_url: str,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        fake_tg: FakeTelegram) -> None:
    voice = voice_cfg(llm)
    voice["tts"]["base_url"] = f"http://127.0.0.1:{closed_port()}/v1"
    rt = make(made, tmp_path, llm, redis_url, monkeypatch, fake_tg, voice)
    add_rule(llm, "speak up", {"content": "I cannot."})
    sid = send_voice(rt, fake_tg, voice_bytes("speak up"))
    assert turn_runner.drain_session(rt, sid) == 1
    delivery.deliver_lane(rt, "telegram", str(CHAT))
    assert fake_tg.texts(CHAT) == ["🎤 “speak up”", "I cannot."]
    table = OutboxRow.__table__
    for _ in range(5):  # each retry of the voice row, due at once
        with rt.db.begin() as conn:
            conn.execute(table.update().where(table.c.kind == "voice", table.c.status == "pending")
                         .values(next_attempt_at=None))
        delivery.deliver_lane(rt, "telegram", str(CHAT))
    with rt.db.connect() as conn:
        [row] = conn.execute(table.select().where(table.c.kind == "voice")).mappings()
    assert row["status"] == "failed" and row["attempts"] <= 3 and "could not be reached" in row["last_error"]
    assert KEY not in row["last_error"] and fake_tg.voices_to(CHAT) == []


# ---- hostile audio blocks through the gateway ---------------------------------------------------

_b64 = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", max_size=40)
_audio_url = st.one_of(
    st.builds(lambda t, p: f"data:audio/{t};base64,{p}", st.text(max_size=12), _b64),
    st.builds(lambda p: f"data:image/png;base64,{p}", _b64), st.text(max_size=30),
    st.just("data:audio/ogg;base64,"), st.just("data:audio/ogg;base64,AAA"), st.just("data:audio/ogg,AAAA"),
    st.text(alphabet="\ud800\udfff\x00", max_size=4), st.none(), st.integers(), st.floats(allow_nan=True),
    st.lists(st.none(), max_size=2), st.recursive(st.none(), lambda x: st.lists(x, max_size=1), max_leaves=50))
_block = st.one_of(st.fixed_dictionaries({"type": st.just("audio"), "url": _audio_url}),
                   st.fixed_dictionaries({"type": st.just("audio")}),
                   st.just({"type": "text", "text": "hi"}))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(blocks=st.lists(_block, min_size=1, max_size=4))
def test_hostile_audio_blocks_are_refused_clearly_or_stored_whole(made: list, tmp_path: Path, llm: Any,
                                                                  redis_url: str, monkeypatch: pytest.MonkeyPatch,
                                                                  blocks: list) -> None:
    from picobot.domain.audio import audio_of

    rt = made[0] if made else make(made, tmp_path, llm, redis_url, monkeypatch, None, voice_cfg(llm))
    before = len(rt.queue.turns)
    reply = Gateway(rt).submit(InboundMessage(channel="web", chat_id="hostile", sender_id="u", content=blocks))
    audios = [b for b in blocks if b.get("type") == "audio"]
    if reply.kind == "rejected":
        assert reply.code in ("bad_content", "too_large", "rate_limited") and reply.text
        assert len(rt.queue.turns) == before  # nothing stored, nothing started
        return
    assert len(audios) <= 1 and all(audio_of(b["url"]) is not None for b in audios)


def test_the_fake_transcribes_in_each_openai_shape(llm: Any) -> None:
    files = {"file": ("v.ogg", voice_bytes("in every shape"), "audio/ogg")}
    for fmt, check in [("json", lambda r: r.json() == {"text": "in every shape"}),
                       ("text", lambda r: r.text == "in every shape" and r.headers["content-type"].startswith("text/")),
                       ("verbose_json", lambda r: r.json()["text"] == "in every shape" and "segments" in r.json())]:
        r = HTTP.post(f"{llm.openai_url}/audio/transcriptions", data={"model": "whisper-1", "response_format": fmt},
                       files=files)
        assert r.status_code == 200 and check(r), (fmt, r.text)
    assert HTTP.post(f"{llm.openai_url}/audio/transcriptions", data={"model": "m"}).status_code == 400


def test_health_says_what_voice_has(made: list, tmp_path: Path, llm: Any, redis_url: str,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from picobot.runtime.health import check_health

    rt = make(made, tmp_path, llm, redis_url, monkeypatch, None, voice_cfg(llm, stt=False))
    entry = check_health(rt)["checks"]["voice"]
    assert entry["ok"] is True and entry["stt"] is False and entry["tts"] is True and entry["tts_format"] == "opus"
    assert KEY not in json.dumps(entry)
