"""A voice message becomes text before the turn: the `audio` block of an input is handed to the plugins
(`picobot_transcribe`, in the worker) and replaced by its transcript, marked "🎤 ". What is stored as
the user's message, shown in the web UI and sent to the model is that text; the audio itself stays only
in the input row (and, when it was not heard, in a file the answering plugin names)."""

from __future__ import annotations

from typing import Any

from picobot.domain.audio import SPOKEN_MARK, audio_of, has_audio, is_audio
from picobot.domain.messages import Content
from picobot.plugins.types import AudioClip, StageContext, Transcript

NOBODY_HEARS = "This is a voice message, but no plugin here transcribes voice messages; please type your message."
UNREADABLE = "The voice message could not be read (not base64 audio)."


def hear(rt: Any, stage: StageContext, content: Content, cancel: Any = None) -> tuple[Content, str | None]:
    """(content with its audio replaced by text, why it was not heard or None). Content without audio: unchanged."""
    if not has_audio(content):
        return content, None
    assert isinstance(content, list)
    blocks: list[dict[str, Any]] = []
    error: str | None = None
    for block in content:
        if not is_audio(block):
            blocks.append(block)
            continue
        parsed = audio_of(block.get("url"))
        if parsed is None:
            error = UNREADABLE
            blocks.append({"type": "text", "text": f"{SPOKEN_MARK}[voice message, not transcribed]"})
            continue
        mime, data = parsed
        found = rt.plugins.first("picobot_transcribe", ctx=stage, audio=AudioClip(data=data, mime=mime), ports=rt,
                                 cancel=cancel)
        if isinstance(found, Transcript) and isinstance(found.text, str) and found.text.strip():
            blocks.append({"type": "text", "text": SPOKEN_MARK + found.text.strip()})
        else:
            error = found.error if isinstance(found, Transcript) and found.error else NOBODY_HEARS
            blocks.append({"type": "text", "text": f"{SPOKEN_MARK}[voice message, not transcribed]"})
    if all(b.get("type") == "text" for b in blocks):
        return "\n\n".join(b["text"] for b in blocks if b["text"].strip()), error
    return blocks, error
