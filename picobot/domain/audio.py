"""A voice message in a message's content: `{"type": "audio", "url": "data:audio/<type>;base64,..."}`."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

DATA_AUDIO = re.compile(r"data:audio/[A-Za-z0-9.+-]{1,64}(?:;[A-Za-z0-9._+=-]{1,64}){0,4};base64,", re.ASCII)
SPOKEN_MARK = "🎤 "  # the stored text of a heard voice message starts with it


def is_audio(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "audio"


def has_audio(content: Any) -> bool:
    return isinstance(content, list) and any(is_audio(b) for b in content)


def audio_block(mime: str, data: bytes) -> dict[str, Any]:
    """The content block of a voice message (what channels and the web UI send)."""
    return {"type": "audio", "url": f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"}


def audio_of(url: Any) -> tuple[str, bytes] | None:
    """(MIME type, bytes) of a valid `data:audio/` URL, or None."""
    head = DATA_AUDIO.match(url) if isinstance(url, str) else None
    if head is None:
        return None
    mime = url[len("data:"):head.end() - len(";base64,")].split(";")[0].lower()
    try:
        return mime, base64.b64decode(url[head.end():], validate=True)
    except (binascii.Error, ValueError):
        return None
