"""API keys for the OpenAI-compatible endpoint (`/v1`): named, scoped to one agent, hashed at rest.

`picobot apikeys create NAME [--agent A]` prints a key once; the database keeps only its SHA-256
(as device tokens are: picobot/auth/tokens.py), so a copy of the database lets nobody in. A key opens
only `/v1` and only its agent's model; a paired device token opens `/v1` for every agent.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError

from picobot.auth.tokens import clock, digest, is_stale, new_id, new_secret, presentable
from picobot.storage import api_keys as store

if TYPE_CHECKING:
    from picobot.storage.db import Database

KEY_PREFIX = "pbk_"
SHOWN_CHARS = 8  # "pbk_" and 4 random characters: enough to tell keys apart in a list, useless to guess with
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ApiKeyError(ValueError):
    """A name or agent `picobot apikeys` cannot use; the text says why."""


@dataclass(frozen=True)
class ApiKey:
    id: str
    name: str
    agent: str
    prefix: str
    created_at: float
    last_used_at: float | None
    revoked_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class IssuedKey:
    key: str  # shown once; never stored
    info: ApiKey


def _key(row: Any) -> ApiKey:
    return ApiKey(id=row.id, name=row.name, agent=row.agent, prefix=row.prefix, created_at=row.created_at,
                  last_used_at=row.last_used_at, revoked_at=row.revoked_at)


def _taken(name: str) -> ApiKeyError:
    return ApiKeyError(f"a live key named {name!r} exists; revoke it first or choose another name")


def looks_like_key(token: str) -> bool:
    return token.startswith(KEY_PREFIX)


class ApiKeys:
    """Keys against the database. Stateless apart from `db`; `now` is injectable for tests."""

    def __init__(self, db: "Database"):
        self.db = db

    def create(self, name: str, agent: str, now: float | None = None) -> IssuedKey:
        if not NAME.match(name or ""):
            raise ApiKeyError(f"a key name is 1-64 letters, digits, '_', '.' or '-', starting with a letter or "
                              f"digit; got {name[:80]!r}")
        now = clock(now)
        key = new_secret(KEY_PREFIX)
        try:
            with self.db.write() as s:
                if store.live_by_name(s, name) is not None:
                    raise _taken(name)
                row = store.add(s, new_id("key_", 6), name, digest(key), key[:SHOWN_CHARS], agent, now)
                return IssuedKey(key, _key(row))
        except IntegrityError:  # a racing create of the same name won
            raise _taken(name) from None

    def verify(self, token: str | None, now: float | None = None) -> ApiKey | None:
        if not presentable(token, KEY_PREFIX):
            return None
        now = clock(now)
        with self.db.connect() as conn:
            row = store.find_live(conn, digest(token))
        if row is None:
            return None
        key = _key(row)
        if is_stale(key.last_used_at, now):
            with self.db.write() as s:
                store.touch(s, key.id, now)
        return key

    def keys(self, include_revoked: bool = False) -> list[ApiKey]:
        with self.db.read() as s:
            return [_key(r) for r in store.list_keys(s, include_revoked)]

    def revoke(self, name: str, now: float | None = None) -> bool:
        with self.db.write() as s:
            return store.revoke(s, name, clock(now))
