"""/ws frames in and out: strict JSON both ways, so no client input can make a reply unsendable."""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Iterable

log = logging.getLogger("picobot.web.ws")

MAX_DEPTH = 32  # real frames nest 4 deep (a block list in a message); deeper is an attack
MAX_INT_DIGITS = 4300  # Python's own cap on converting digits to int; no frame needs a tenth of it


class FrameError(ValueError):
    """A client frame that is not strict JSON; the text says what is wrong."""


def _no_constants(name: str) -> Any:
    # json.loads accepts NaN and Infinity, which no browser's JSON.parse reads back
    raise FrameError(f"{name} is not JSON; send numbers as finite decimals.")


def _finite_float(text: str) -> float:
    # 1e400 is valid JSON but overflows to Infinity, which no reply could carry back
    value = float(text)
    if not math.isfinite(value):
        raise FrameError(f"The number {text[:40]} is too large; send numbers as finite decimals.")
    return value


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise FrameError(f"A number in the frame has {digits} digits; the limit is {MAX_INT_DIGITS}.")
    return int(text)


def parse_frame(raw: str | bytes) -> Any:
    """The frame's JSON value; FrameError when it is not strict JSON or nests too deeply."""
    try:
        value = json.loads(raw, parse_constant=_no_constants, parse_float=_finite_float, parse_int=_bounded_int)
    except FrameError:
        raise
    except RecursionError:
        raise FrameError(f"The frame nests deeper than {MAX_DEPTH} levels.") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameError(f"The frame is not valid JSON: {exc}") from None
    if depth_exceeds(value, MAX_DEPTH):
        raise FrameError(f"The frame nests deeper than {MAX_DEPTH} levels.")
    return value


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when containers nest more than `limit` deep (iterative: no recursion on hostile input)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def frame_bytes(raw: str | bytes) -> int:
    """A frame's size in UTF-8 bytes, as gateway.max_frame_bytes counts it."""
    if isinstance(raw, bytes):
        return len(raw)
    return len(raw.encode("utf-8", "surrogatepass"))


def has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def repair_text(text: str) -> str:
    """Lone surrogates (legal in JSON, not in UTF-8) become U+FFFD; valid pairs are kept."""
    if not has_lone_surrogate(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def scrub(value: Any, depth: int = 0) -> Any:
    """A copy of `value` that strict JSON can carry: repaired strings, no NaN/Infinity, bounded depth."""
    if isinstance(value, str):
        return repair_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if depth >= MAX_DEPTH * 4 and isinstance(value, (dict, list, tuple)):
        return None
    if isinstance(value, dict):
        return {repair_text(str(k)): scrub(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v, depth + 1) for v in value]
    return value


def _dumps(frame: Any) -> str:
    return json.dumps(frame, ensure_ascii=False, allow_nan=False, default=str)


def encode_frame(frame: dict[str, Any]) -> tuple[str, int]:
    """The frame as strict JSON text and its UTF-8 size; falls back to a repaired copy, then to an error."""
    try:
        text = _dumps(frame)
        return text, len(text.encode("utf-8"))
    except (ValueError, TypeError, RecursionError, UnicodeEncodeError):
        pass
    try:
        text = _dumps(scrub(frame))
        return text, len(text.encode("utf-8"))
    except (ValueError, TypeError, RecursionError, UnicodeEncodeError) as exc:
        log.error("could not encode a %s frame: %s", str(frame.get("type"))[:40], type(exc).__name__)
    text = _dumps({"type": "error", "code": "internal", "error": "PicoBot could not encode its reply."})
    return text, len(text)
