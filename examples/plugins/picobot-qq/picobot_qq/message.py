"""OneBot v11 messages as plain data: frames read defensively, CQ codes and segment arrays parsed into
one segment list, answers split at QQ's limit, the HTTP event signature checked.

A message is either an array of segments (`[{"type": "text", "data": {"text": "hi"}}, …]`) or a
string with CQ codes (`hi [CQ:at,qq=10001] [CQ:image,file=…,url=…]`); both become the same list of
`Segment`s with string data. Anything that is not what the protocol says is dropped, never raised.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 32  # a frame nested deeper is not OneBot: dropped
MAX_SEGMENTS = 200
MAX_TEXT_CHARS = 100_000  # of one message; the rest is cut with a note
_CQ = re.compile(r"\[CQ:([A-Za-z_][A-Za-z0-9_.\-]{0,31})((?:,[^,\]]*)*)\]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class FrameError(ValueError):
    """A frame that is not a OneBot JSON object; the message says why (for the log)."""


@dataclass(frozen=True)
class Segment:
    type: str
    data: dict[str, str] = field(default_factory=dict)

    def get(self, key: str) -> str:
        return self.data.get(key, "")


# ---- frames ------------------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_frame(raw: Any, max_bytes: int) -> dict[str, Any]:
    """A frame (text or bytes) as a clean JSON object: no NaN, no lone surrogates, at most MAX_DEPTH deep."""
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > max_bytes:
            raise FrameError(f"the frame is over {max_bytes} bytes")
        raw = bytes(raw).decode("utf-8", "replace")
    if not isinstance(raw, str):
        raise FrameError(f"a frame of type {type(raw).__name__}")
    if len(raw) > max_bytes:
        raise FrameError(f"the frame is over {max_bytes} characters")
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise FrameError("the frame nests too deep") from None
    except ValueError as exc:
        raise FrameError(f"not JSON ({str(exc)[:100]})") from None
    if not isinstance(value, dict):
        raise FrameError(f"a JSON {type(value).__name__}, not an object")
    return clean(value)


def clean(value: Any, depth: int = 0) -> Any:
    """The value with lone surrogates replaced and non-finite numbers gone; FrameError when too deep."""
    if depth > MAX_DEPTH:
        raise FrameError(f"the frame nests deeper than {MAX_DEPTH}")
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {clean(str(k), depth + 1): clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v, depth + 1) for v in value]
    return value


def id_text(value: Any) -> str:
    """A OneBot id (a number, or digits as a string) as a string; "" for anything else."""
    if isinstance(value, bool):
        return ""
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) <= 32:
        return value.strip()
    return ""


# ---- segments ----------------------------------------------------------------------------------


_ESCAPES = {"&amp;": "&", "&#91;": "[", "&#93;": "]", "&#44;": ","}
_ESCAPE = re.compile(r"&(?:amp|#91|#93|#44);")


def unescape(text: str) -> str:
    """CQ escapes undone in one pass, so `&amp;#91;` stays the text `&#91;`."""
    return _ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], text)


def parse_cq(raw: str) -> list[Segment]:
    """A CQ-code string as segments: the text between codes as `text` segments."""
    found: list[Segment] = []
    pos = 0
    for match in _CQ.finditer(raw):
        if match.start() > pos:
            found.append(Segment("text", {"text": unescape(raw[pos:match.start()])}))
        data: dict[str, str] = {}
        for pair in match.group(2).split(",")[1:]:
            name, _, value = pair.partition("=")
            if name:
                data[name] = unescape(value)
        found.append(Segment(match.group(1), data))
        pos = match.end()
        if len(found) >= MAX_SEGMENTS:
            return found
    if pos < len(raw):
        found.append(Segment("text", {"text": unescape(raw[pos:])}))
    return found


def parse_message(message: Any) -> list[Segment]:
    """A message (segment array or CQ string) as segments; malformed items are left out."""
    if isinstance(message, str):
        return parse_cq(message)
    if not isinstance(message, list):
        return []
    found: list[Segment] = []
    for item in message[:MAX_SEGMENTS]:
        if not isinstance(item, dict) or not isinstance(item.get("type"), str) or not item["type"]:
            continue
        data = item.get("data")
        data = data if isinstance(data, dict) else {}
        found.append(Segment(item["type"][:32], {str(k): _scalar(v) for k, v in data.items() if _scalar(v) != ""}))
    return found


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return ""


def mentions(segments: list[Segment], self_id: str) -> bool:
    return bool(self_id) and any(s.type == "at" and s.get("qq") == self_id for s in segments)


def reply_id(segments: list[Segment]) -> str:
    return next((id_text(s.get("id")) for s in segments if s.type == "reply" and id_text(s.get("id"))), "")


def plain_text(segments: list[Segment], self_id: str) -> str:
    """The message's words: text, other people's @s and faces; the bot's own @ and the rest left out."""
    parts: list[str] = []
    for s in segments:
        if s.type == "text":
            parts.append(s.get("text"))
        elif s.type == "at" and s.get("qq") != self_id:
            parts.append("@all" if s.get("qq") == "all" else f"@{s.get('name') or s.get('qq')}")
        elif s.type == "face":
            parts.append(f"[face {s.get('id')[:8]}]" if s.get("id") else "[face]")
    text = "".join(parts).strip()
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + f"\n[… cut at {MAX_TEXT_CHARS} characters]"
    return text


# ---- outbound ----------------------------------------------------------------------------------


def split_text(text: str, limit: int) -> list[str]:
    """Parts of at most `limit` characters, cut at a paragraph, line or space boundary when there is one."""
    text = text.strip()
    parts: list[str] = []
    while len(text) > limit:
        cut = max(text.rfind("\n\n", 0, limit), text.rfind("\n", 0, limit), text.rfind(" ", 0, limit))
        if cut < limit // 2:
            cut = limit
        parts.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        parts.append(text)
    return parts


def text_segment(text: str) -> dict[str, Any]:
    return {"type": "text", "data": {"text": text}}


# ---- HTTP event signature ----------------------------------------------------------------------


def signature(secret: str, body: bytes) -> str:
    return "sha1=" + hmac.new(secret.encode("utf-8", "surrogatepass"), body, hashlib.sha1).hexdigest()


def signature_ok(secret: str, body: bytes, header: Any) -> bool:
    """The `X-Signature` OneBot sends with an HTTP event: `sha1=<HMAC-SHA1 of the body>`."""
    if not isinstance(header, str) or not header:
        return False
    return hmac.compare_digest(signature(secret, body).encode(), header.strip().lower().encode("utf-8", "replace"))


def bearer_ok(token: str, header: Any, query_token: Any = None) -> bool:
    """`Authorization: Bearer <token>` (or `Token <token>`, or `?access_token=`) matches the channel's token."""
    given = ""
    if isinstance(header, str):
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() in ("bearer", "token"):
            given = value.strip()
    if not given and isinstance(query_token, str):
        given = query_token
    return bool(token) and hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8", "replace"))
