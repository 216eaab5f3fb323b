"""The signature both ways: `X-PicoBot-Signature: sha256=<hex HMAC-SHA256(secret, "<ts>." + body)>`.

The timestamp is in the signed text, so a captured request cannot be re-sent with a fresh time;
one older (or newer) than TOLERANCE_SECS is refused, which bounds how long a capture is worth.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

TIMESTAMP_HEADER = "X-PicoBot-Timestamp"
SIGNATURE_HEADER = "X-PicoBot-Signature"
TOLERANCE_SECS = 300
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")


class SignatureError(ValueError):
    """Why a request's signature is not accepted (the text is safe to send back)."""


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """The header value for `body` sent at `timestamp` (unix seconds)."""
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode("ascii") + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def signed_headers(secret: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """Timestamp and signature headers for an outgoing body (the result callback)."""
    ts = int(time.time() if now is None else now)
    return {TIMESTAMP_HEADER: str(ts), SIGNATURE_HEADER: sign(secret, ts, body)}


def verify(secret: str, timestamp: str | None, signature: str | None, body: bytes,
           now: float | None = None) -> None:
    """Raise SignatureError unless `signature` signs `body` at a `timestamp` within the tolerance."""
    if not timestamp or not _TIMESTAMP.fullmatch(timestamp):
        raise SignatureError(f"{TIMESTAMP_HEADER} must be the unix time in whole seconds")
    if abs((time.time() if now is None else now) - int(timestamp)) > TOLERANCE_SECS:
        raise SignatureError(f"{TIMESTAMP_HEADER} is more than {TOLERANCE_SECS} s from the server's clock")
    match = _SIGNATURE.fullmatch(signature or "")
    if match is None:
        raise SignatureError(f"{SIGNATURE_HEADER} must be sha256=<64 hex digits>")
    expected = sign(secret, timestamp, body)[len("sha256="):]
    if not hmac.compare_digest(expected.encode("ascii"), match.group(1).lower().encode("ascii")):
        raise SignatureError("the signature does not match the body")
