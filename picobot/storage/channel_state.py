"""SQL of `channel_state`: small durable values a channel keeps per (channel, key) — a cursor, tokens, seen keys."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, delete, select

from picobot.storage.models import ChannelStateRow
from picobot.storage.upsert import InsertIfAbsent, Upsert

_s = ChannelStateRow.__table__
_PUT = Upsert(_s, ["channel", "key"], ["value", "updated_at"])
_ADD = InsertIfAbsent(_s, ["channel", "key"], returning="key")


def get(conn: Connection, channel: str, key: str) -> dict[str, Any] | None:
    value = conn.execute(select(_s.c.value).where(_s.c.channel == channel, _s.c.key == key)).scalar()
    return dict(value) if isinstance(value, dict) else None


def get_fresh(conn: Connection, channel: str, keys: list[str], since: float) -> dict[str, Any] | None:
    """The value of the first of `keys` written at or after `since`, or None."""
    if not keys:
        return None
    q = select(_s.c.key, _s.c.value).where(_s.c.channel == channel, _s.c.key.in_(keys), _s.c.updated_at >= since)
    found = {row.key: row.value for row in conn.execute(q)}
    for key in keys:
        if key in found:
            return dict(found[key]) if isinstance(found[key], dict) else {}
    return None


def put(conn: Connection, channel: str, key: str, value: dict[str, Any], at: float | None = None) -> None:
    _PUT.run(conn, {"channel": channel, "key": key, "value": value, "updated_at": time.time() if at is None else at})


def add(conn: Connection, channel: str, key: str, value: dict[str, Any]) -> bool:
    """Insert unless the key exists; True when inserted."""
    return _ADD.run(conn, {"channel": channel, "key": key, "value": value, "updated_at": time.time()}) is not None


def remove(conn: Connection, channel: str, key: str) -> None:
    conn.execute(delete(_s).where(_s.c.channel == channel, _s.c.key == key))


def remove_prefix(conn: Connection, channel: str, prefix: str, before: float | None = None) -> int:
    """Delete the channel's keys starting with `prefix` (only those written before `before`, if given)."""
    stmt = delete(_s).where(_s.c.channel == channel, _s.c.key.startswith(prefix, autoescape=True))
    if before is not None:
        stmt = stmt.where(_s.c.updated_at < before)
    return conn.execute(stmt).rowcount
