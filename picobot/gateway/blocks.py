"""Content blocks a message may carry: text, images by absolute http(s) or base64 `data:image/` URL, and
one voice message: `{"type": "audio", "url": "data:audio/<type>;base64,..."}` (heard before the turn)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from picobot.domain.audio import DATA_AUDIO as _DATA_AUDIO

# data:image/<subtype>[;param=value...];base64,<payload>; the payload is checked separately (it may be MBs)
_DATA_IMAGE = re.compile(r"data:image/[A-Za-z0-9.+-]{1,64}(?:;[A-Za-z0-9._+=-]{1,64}){0,4};base64,", re.ASCII)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}", re.ASCII)
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]{0,19}):")

BLOCK_SHAPE = ('Each content block must be {"type": "text", "text": ...}, '
               '{"type": "image_url", "url": ...} or {"type": "audio", "url": "data:audio/..."}.')
AUDIO_USAGE = 'An audio block needs a "data:audio/<type>;base64,..." URL'
USAGE = 'An image_url block needs an absolute http:// or https:// URL, or a "data:image/<type>;base64,..." URL'


class BadBlock(ValueError):
    """A content block that cannot be sent to a model; the text says why and how to fix it."""


def measure_blocks(blocks: list) -> tuple[int, int]:
    """(characters of text and http(s) URLs, decoded bytes of data: images); BadBlock when one is invalid.
    Audio blocks are checked and counted by `audio_bytes`, not here."""
    chars = image_bytes = 0
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "audio":
            continue
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            chars += len(block["text"])
        elif kind == "image_url" and isinstance(block.get("url"), str):
            if problem := image_problem(block["url"]):
                raise BadBlock(problem)
            image_bytes += data_image_bytes(block["url"])
            chars += 0 if block["url"].startswith("data:") else len(block["url"])
        else:
            raise BadBlock(BLOCK_SHAPE)
    return chars, image_bytes


def image_problem(url: str) -> str | None:
    """Why `url` cannot be sent to a model as an image, or None. Never repeats the URL (it may hold a token)."""
    if url.startswith("data:"):
        return _data_problem(url)
    if not url.strip():
        return f"{USAGE}; this one is empty."
    scheme = _SCHEME.match(url)
    if scheme is None:
        return f"{USAGE}; this one is relative."
    if scheme.group(1).lower() not in ("http", "https"):
        return f"{USAGE}; {scheme.group(1).lower()!r} URLs are not allowed."
    if _UNSAFE.search(url):
        return f"{USAGE}; this one contains spaces or control characters."
    try:
        host = urlsplit(url).hostname
    except ValueError:
        host = None
    return None if host else f"{USAGE}; this one has no host."


def _data_problem(url: str) -> str | None:
    head = _DATA_IMAGE.match(url)
    if head is None:
        return f"{USAGE}; a data: URL must be an image in base64."
    payload = url[head.end():]
    if not payload or len(payload) % 4 or not _BASE64.fullmatch(payload):
        return f"{USAGE}; the base64 payload of this data: URL is empty or invalid."
    return None


def data_image_bytes(url: str) -> int:
    """Decoded size of a valid `data:` image URL (0 for any other URL)."""
    head = _DATA_IMAGE.match(url) if url.startswith("data:") else None
    if head is None:
        return 0
    payload = url[head.end():]
    return len(payload) * 3 // 4 - (len(payload) - len(payload.rstrip("=")))


def audio_bytes(blocks: list) -> int:
    """Decoded bytes of the message's audio block (0 without one); BadBlock when it is invalid or not alone."""
    found = [b for b in blocks if isinstance(b, dict) and b.get("type") == "audio"]
    if not found:
        return 0
    if len(found) > 1:
        raise BadBlock("A message carries at most one audio block (one voice message).")
    url = found[0].get("url")
    head = _DATA_AUDIO.match(url) if isinstance(url, str) else None
    if head is None or not isinstance(url, str):
        raise BadBlock(f"{AUDIO_USAGE}.")
    payload = url[head.end():]
    if not payload or len(payload) % 4 or not _BASE64.fullmatch(payload):
        raise BadBlock(f"{AUDIO_USAGE}; the base64 payload is empty or invalid.")
    return len(payload) * 3 // 4 - (len(payload) - len(payload.rstrip("=")))

