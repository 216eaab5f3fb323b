"""Per-session lease in Redis: one turn at a time per session, across all workers.

A thin layer over picobot.coord.lease, kept so its importers work; new code uses picobot.coord.
"""

from __future__ import annotations

import redis

from picobot.coord import keys, lease as _coord


class Lease(_coord.Lease):
    """The session's turn lease (or, with `key`, a lease on other work of the session); renew() re-takes it."""

    def __init__(self, r: redis.Redis, session_id: str, ttl_secs: float, key: str | None = None):
        super().__init__(r, key or keys.lease(session_id), ttl_secs, retake=True)


def is_held(r: redis.Redis, session_id: str) -> bool:
    return _coord.held(r, keys.lease(session_id))
