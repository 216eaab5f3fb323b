"""Voice on the plugin SDK: hears voice messages before a turn and speaks answers to users who spoke.

`picobot_transcribe` runs in the worker, before the turn's model call (the core calls it for an
input's `audio` block); `picobot_speech` runs where a spoken answer is delivered (the outbound task
of a channel, the web process for the web UI's player). No tool: nothing of this is in the prompt.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

from picobot.plugins import hookimpl
from picobot.plugins.types import AudioClip, Transcript

log = logging.getLogger("picobot.voice")

NO_STT = ("This is a voice message, but speech-to-text is not configured here: voice messages need "
          "`voice.stt` in config.json (see docs/VOICE.md). Please type your message.")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class VoicePlugin:
    @hookimpl
    def picobot_transcribe(self, ctx: Any, audio: AudioClip, ports: Any, cancel: Any) -> Transcript:
        from picobot.voice.client import VoiceError, transcribe

        stt = ports.config.voice.stt
        if stt is None:
            return Transcript(error=NO_STT)
        started = time.monotonic()
        try:
            text = transcribe(stt, audio, cancel=cancel)
        except VoiceError as exc:
            if cancel is not None and cancel.cancelled:
                return Transcript(error="stopped")
            kept = _keep(ports.config.home, ctx, audio)
            log.warning("voice message of %s not transcribed (%s bytes): %s", ctx.session_id, len(audio.data), exc)
            where = f" It is kept as {kept}." if kept else ""
            return Transcript(error=f"Your voice message could not be transcribed: {exc}.{where} "
                                    "Please send it again later, or type it.")
        log.info("voice message of %s transcribed: %d bytes -> %d characters in %.1f s", ctx.session_id,
                 len(audio.data), len(text), time.monotonic() - started)
        if not text:
            return Transcript(error="Nothing could be heard in your voice message. Please try again, or type it.")
        return Transcript(text=text)

    @hookimpl
    def picobot_speech(self, text: str, ports: Any) -> AudioClip | str | None:
        from picobot.voice.client import VoiceError, speak
        from picobot.voice.convert import to_ogg_opus

        tts = ports.config.voice.tts
        if tts is None:
            return None
        try:
            return to_ogg_opus(speak(tts, text))
        except VoiceError as exc:
            log.warning("speech for an answer failed: %s", exc)
            return str(exc)

    @hookimpl
    def picobot_health(self, ports: Any) -> dict[str, Any] | None:
        voice = ports.config.voice
        if voice.stt is None and voice.tts is None:
            return None
        from picobot.voice.convert import ffmpeg

        return {"voice": {"ok": True, "stt": voice.stt is not None, "tts": voice.tts is not None,
                          "tts_format": voice.tts.format if voice.tts else None,
                          "ffmpeg": ffmpeg() is not None}}


def _keep(home: Path, ctx: Any, audio: AudioClip) -> str | None:
    """Save a voice message that was not heard under `<home>/voice/unheard/` (the input is not lost)."""
    from picobot.voice.client import extension

    name = _UNSAFE.sub("_", f"{ctx.turn_id or int(time.time())}")[:80] + f".{extension(audio.mime)}"
    folder = Path(home) / "voice" / "unheard"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(audio.data)
    except OSError as exc:
        log.warning("a voice message that was not heard could not be saved (%s)", type(exc).__name__)
        return None
    return f"voice/unheard/{name}"
