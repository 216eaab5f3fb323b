"""Feishu event crypto: decrypt `{"encrypt": …}` bodies, check X-Lark-Signature and the token.

The algorithms are the lark-oapi SDK's (core/utils/decryptor.py, event/dispatcher_handler.py):
key = sha256(encrypt_key); body = base64(iv[16] + AES-256-CBC(pkcs7(json))); signature =
sha256_hex(timestamp + nonce + encrypt_key + raw body bytes). Uses `cryptography`, never the SDK
(it costs ~2 s and ~160 MB to import). Every compare is constant-time. Errors:

    CryptoError
    ├── BadPayload     the encrypted text is not base64 / not whole blocks / bad padding / not UTF-8
    ├── BadSignature   missing or wrong signature, or wrong verification token
    └── StaleRequest   the request timestamp is missing, malformed or outside the freshness window
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import time

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

BLOCK = 16


class CryptoError(Exception):
    """A request failed a cryptographic check; the text never holds a secret or the payload."""


class BadPayload(CryptoError):
    pass


class BadSignature(CryptoError):
    pass


class StaleRequest(CryptoError):
    pass


def _key(encrypt_key: str) -> bytes:
    return hashlib.sha256(encrypt_key.encode("utf-8")).digest()


def decrypt(encrypted: str, encrypt_key: str) -> str:
    """The plaintext (JSON text) of an `encrypt` field; BadPayload when it cannot be one."""
    try:
        raw = base64.b64decode(encrypted.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise BadPayload("the encrypt field is not base64") from None
    if len(raw) < 2 * BLOCK or len(raw) % BLOCK:
        raise BadPayload("the encrypt field is not whole AES blocks")
    decryptor = Cipher(algorithms.AES(_key(encrypt_key)), modes.CBC(raw[:BLOCK])).decryptor()
    padded = decryptor.update(raw[BLOCK:]) + decryptor.finalize()
    unpadder = padding.PKCS7(BLOCK * 8).unpadder()
    try:
        plain = unpadder.update(padded) + unpadder.finalize()
        return plain.decode("utf-8")
    except ValueError:  # bad padding (wrong key or garbage), or not UTF-8
        raise BadPayload("the encrypt field does not decrypt with the configured encrypt_key") from None


def encrypt(plaintext: str, encrypt_key: str, iv: bytes | None = None) -> str:
    """The `encrypt` field Feishu would send for `plaintext` (used by tests and the fake sender)."""
    iv = iv or os.urandom(BLOCK)
    padder = padding.PKCS7(BLOCK * 8).padder()
    padded = padder.update(plaintext.encode("utf-8")) + padder.finalize()
    encryptor = Cipher(algorithms.AES(_key(encrypt_key)), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode("ascii")


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """X-Lark-Signature for a raw request body."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def check_signature(headers: dict[str, str], body: bytes, encrypt_key: str, max_age_secs: int,
                    now: float | None = None) -> None:
    """Raise BadSignature / StaleRequest unless the lower-cased `headers` sign `body` freshly."""
    timestamp = headers.get("x-lark-request-timestamp", "")
    nonce = headers.get("x-lark-request-nonce", "")
    given = headers.get("x-lark-signature", "")
    if not given:
        raise BadSignature("no X-Lark-Signature header")
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        raise StaleRequest("X-Lark-Request-Timestamp is missing or not a number of seconds")
    age = (time.time() if now is None else now) - int(timestamp)
    if abs(age) > max_age_secs:
        raise StaleRequest(f"the request timestamp is {int(age)} s away from now (limit {max_age_secs} s)")
    expected = signature(timestamp, nonce, encrypt_key, body)
    if not hmac.compare_digest(expected.encode("ascii"), given.strip().lower().encode("utf-8", "replace")):
        raise BadSignature("X-Lark-Signature does not match the body")


def check_token(given: object, expected: str) -> None:
    """Raise BadSignature unless `given` is the verification token (constant-time)."""
    if not isinstance(given, str) or not hmac.compare_digest(given.encode("utf-8", "replace"),
                                                             expected.encode("utf-8")):
        raise BadSignature("wrong or missing verification token")
