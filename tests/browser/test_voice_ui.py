"""The web UI's voice messages: an audio file attached in the composer goes as an `audio` block, the worker
hears it (the fake model server's /v1/audio/transcriptions), the transcript is shown as the user's message,
and the answer carries a player whose audio the server makes (/api/speech, the fake's /v1/audio/speech).
Real Chromium, a real stack with `voice` configured."""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import pytest

from picobot.demo.llm.audio import ogg_opus_silence
from tests.browser.conftest import screenshot
from tests.browser.test_web_ui import open_chat, user_texts, wait_idle
from tests.conftest import add_rule
from tests.stack import Stack, base_config

pytestmark = pytest.mark.slow

KEY = "sk-voice-ui-secret-0123456789"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    """This module's stack: voice in and out against the fake model server."""
    from picobot.cli.embedded_redis import free_port

    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["voice"] = {"stt": {"base_url": fake_llm.openai_url, "api_key": KEY},
                    "tts": {"base_url": fake_llm.openai_url, "api_key": KEY, "voice": "alloy"}}
    s = Stack(tmp_path_factory.mktemp("voice-ui"), fake_llm.url, config=cfg)
    s.port = port
    try:
        s.start(workers=1, beat=False)
        yield s
    finally:
        s.stop()


def test_a_voice_message_is_heard_shown_and_its_answer_can_be_played(stack: Stack, llm: Any, new_page: Any,
                                                                     page_errors: Any) -> None:
    token = uuid.uuid4().hex[:8]
    said = f"{token} what is on my calendar"
    add_rule(llm, said, {"content": "Nothing today."})
    page = new_page()
    open_chat(page, stack)
    page.set_input_files("#attach-input", files=[{"name": "note.ogg", "mimeType": "audio/ogg",
                                                  "buffer": ogg_opus_silence(25) + f"SAY:{said}\n".encode()}])
    page.wait_for_selector(".voice-thumb audio")
    page.click("#send-btn")
    page.wait_for_function("(t) => [...document.querySelectorAll('.messages .msg.user .user-text')]"
                           ".some((e) => e.textContent.includes(t))", arg=said, timeout=30_000)
    wait_idle(page)
    assert f"🎤 {said}" in user_texts(page)
    page.wait_for_selector(".messages .msg.assistant .speech audio")
    src = page.locator(".messages .msg.assistant .speech audio").last.get_attribute("src")
    assert src.startswith("/api/speech/")
    resp = page.request.get(stack.http + src)
    assert resp.status == 200 and resp.headers["content-type"] == "audio/ogg"
    assert resp.body().startswith(b"OggS") and b"OpusHead" in resp.body()[:100]
    speech = [r for r in llm.requests() if r["path"].endswith("/audio/speech")]
    assert speech and speech[-1]["body"]["input"] == "Nothing today."
    screenshot(page, "voice-message")
    assert KEY not in stack.all_logs()
    assert not page_errors.errors, page_errors.errors


def test_speech_of_anything_but_an_answer_is_refused(stack: Stack, new_page: Any) -> None:
    page = new_page()
    open_chat(page, stack)
    for path in ("/api/speech/999999999", "/api/speech/abc"):
        assert page.request.get(stack.http + path).status == 404
    voice = page.request.get(stack.http + "/api/voice").json()
    assert voice["stt"] is True and voice["tts"] is True and voice["max_audio_bytes"] > 0
