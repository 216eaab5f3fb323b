"""SQL of the channel event inbox: raw platform events, recorded once per (channel, event_key)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, select, update

from picobot.storage.models import ChannelEventRow, ChannelEventStatus
from picobot.storage.upsert import InsertIfAbsent

PENDING, DONE, IGNORED = ChannelEventStatus.PENDING, ChannelEventStatus.DONE, ChannelEventStatus.IGNORED
FAILED = ChannelEventStatus.FAILED

_e = ChannelEventRow.__table__
_ADD = InsertIfAbsent(_e, ["channel", "event_key"])


def record(conn: Connection, channel: str, event_key: str, payload: dict[str, Any]) -> tuple[int, bool]:
    """(event id, created): a redelivered event finds the first row and records nothing."""
    row_id = _ADD.run(conn, {"channel": channel, "event_key": event_key, "payload": payload, "status": PENDING,
                             "attempts": 0, "received_at": time.time()})
    if row_id is not None:
        return int(row_id), True
    existing = conn.execute(select(_e.c.id).where(_e.c.channel == channel, _e.c.event_key == event_key)).scalar_one()
    return int(existing), False


def get(conn: Connection, event_id: int) -> Any | None:
    return conn.execute(select(_e).where(_e.c.id == event_id)).first()


def start_attempt(conn: Connection, event_id: int) -> int | None:
    """Count one processing attempt of a pending event; its attempts now, or None if not pending."""
    changed = conn.execute(update(_e).where(_e.c.id == event_id, _e.c.status == PENDING)
                           .values(attempts=_e.c.attempts + 1)).rowcount
    if not changed:
        return None
    return conn.execute(select(_e.c.attempts).where(_e.c.id == event_id)).scalar_one()


def finish(conn: Connection, event_id: int, status: str, error: str | None = None) -> bool:
    stmt = (update(_e).where(_e.c.id == event_id, _e.c.status == PENDING)
            .values(status=status, error=error, processed_at=time.time()))
    return conn.execute(stmt).rowcount > 0


def note_error(conn: Connection, event_id: int, error: str, uncount: bool = False) -> None:
    """Keep the last error; `uncount` gives the attempt back (an outage is not the event's fault)."""
    values: dict[str, Any] = {"error": error}
    if uncount:
        values["attempts"] = _e.c.attempts - 1
    conn.execute(update(_e).where(_e.c.id == event_id).values(**values))


def stale(conn: Connection, received_before: float, limit: int = 200) -> list[int]:
    """Pending events received before the given time (their task was lost or failed)."""
    q = (select(_e.c.id).where(_e.c.status == PENDING, _e.c.received_at <= received_before)
         .order_by(_e.c.id).limit(limit))
    return [int(i) for i in conn.execute(q).scalars()]


def counts(conn: Connection) -> dict[str, int]:
    from sqlalchemy import func

    return {s: int(n) for s, n in conn.execute(select(_e.c.status, func.count()).group_by(_e.c.status))}
