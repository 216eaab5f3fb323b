"""The credential-token primitives device tokens, pairing codes and API keys share.

A secret is shown once and stored only as its SHA-256 (hex), so a copy of the database lets nobody
in; a presented secret is verified by looking its hash up (the index does the matching, no plaintext
is ever compared). Plain SHA-256 and not a password hash (argon2, bcrypt): these secrets are 256
random bits, not something a person chose, so a salt or a slow hash would add nothing but make the
lookup by hash impossible. The standard library's `secrets` and `hashlib` are all this needs.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import TypeGuard

TOKEN_BYTES = 32
MAX_TOKEN_CHARS = 256  # longer is not ours: refused before hashing or a query
TOUCH_EVERY_SECS = 60  # last_used_at is refreshed at most this often (one write, not one per request)


def digest(secret: str) -> str:
    """What the database keeps of a secret: its SHA-256, hex."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_secret(prefix: str = "") -> str:
    """`prefix` + 256 random bits, URL-safe, never starting with "-" (`--token <t>` would read it as an option)."""
    while (token := prefix + secrets.token_urlsafe(TOKEN_BYTES)).startswith("-"):
        pass
    return token


def new_id(prefix: str, nbytes: int) -> str:
    """A record's public id: `prefix` + `nbytes` random bytes in hex (not a secret)."""
    return prefix + secrets.token_hex(nbytes)


def presentable(token: str | None, prefix: str = "") -> TypeGuard[str]:
    """Whether `token` is worth a lookup: present, not overlong, with the kind's prefix."""
    return token is not None and 0 < len(token) <= MAX_TOKEN_CHARS and token.startswith(prefix)


def is_stale(last_used_at: float | None, now: float) -> bool:
    """Whether a verified credential's last_used_at is old enough to be written again."""
    return last_used_at is None or now - last_used_at > TOUCH_EVERY_SECS


def clock(now: float | None) -> float:
    """`now` when a test gave one, else the time."""
    return time.time() if now is None else now
