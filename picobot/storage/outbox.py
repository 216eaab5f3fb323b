"""Outbound deliveries to external channels: recorded in the producer's transaction, delivered per lane.

A lane is one (channel, chat_id): its rows go out in id order. A pending row may wait for
`next_attempt_at` (backoff after a transient error); a failed row is final until retried by hand.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, func, or_, select, update
from sqlalchemy.orm import Session

from picobot.storage.models import OutboxRow, OutboxStatus
from picobot.storage.upsert import InsertIfAbsent

PENDING, SENT, FAILED = OutboxStatus.PENDING, OutboxStatus.SENT, OutboxStatus.FAILED
DEFERRED = OutboxStatus.DEFERRED

_o = OutboxRow.__table__
# A turn run twice (a worker died after committing) records each delivery once: first one wins.
_ADD = InsertIfAbsent(_o, ["idempotency_key"])


def add(conn: Connection | Session, channel: str, chat_id: str, payload: dict[str, Any], idempotency_key: str,
        session_id: str | None = None, turn_id: str | None = None, kind: str = "message") -> bool:
    """Record a delivery; False when one with this idempotency key is recorded already."""
    if isinstance(conn, Session):
        conn = conn.connection()
    now = time.time()
    return _ADD.run(conn, {
        "channel": channel, "chat_id": chat_id, "session_id": session_id, "turn_id": turn_id, "kind": kind,
        "payload": payload, "idempotency_key": idempotency_key, "status": PENDING, "attempts": 0,
        "created_at": now, "updated_at": now,
    }) is not None


def lane(conn: Connection, channel: str, chat_id: str, limit: int = 50) -> list[Any]:
    """The lane's pending rows, oldest first."""
    q = (select(_o).where(_o.c.status == PENDING, _o.c.channel == channel, _o.c.chat_id == chat_id)
         .order_by(_o.c.id).limit(limit))
    return list(conn.execute(q))


def has_key(conn: Connection, idempotency_key: str) -> bool:
    """Whether a delivery with this idempotency key was recorded (of any status)."""
    return conn.execute(select(OutboxRow.id).where(OutboxRow.idempotency_key == idempotency_key)
                        .limit(1)).first() is not None


def status_of(conn: Connection, row_id: int) -> str | None:
    return conn.execute(select(_o.c.status).where(_o.c.id == row_id)).scalar()


def _set(conn: Connection, row_id: int, only_if: str, **values: Any) -> bool:
    values["updated_at"] = time.time()
    stmt = update(_o).where(_o.c.id == row_id, _o.c.status == only_if).values(**values)
    return conn.execute(stmt).rowcount > 0


def mark_sent(conn: Connection, row_id: int, result: dict[str, Any] | None) -> bool:
    return _set(conn, row_id, PENDING, status=SENT, sent_at=time.time(), result=result,
                attempts=_o.c.attempts + 1, next_attempt_at=None)


def mark_retry(conn: Connection, row_id: int, error: str, code: str | None, next_attempt_at: float) -> bool:
    return _set(conn, row_id, PENDING, attempts=_o.c.attempts + 1, last_error=error, error_code=code,
                next_attempt_at=next_attempt_at)


def mark_failed(conn: Connection, row_id: int, error: str, code: str | None) -> bool:
    return _set(conn, row_id, PENDING, status=FAILED, attempts=_o.c.attempts + 1, last_error=error,
                error_code=code, next_attempt_at=None)


def retry(conn: Connection, row_id: int) -> Any | None:
    """A failed row back to pending (delivered again, in its lane's order); the row, or None if not failed."""
    if not _set(conn, row_id, FAILED, status=PENDING, next_attempt_at=None, attempts=0):
        return None
    return conn.execute(select(_o).where(_o.c.id == row_id)).first()


def due_lanes(conn: Connection, now: float, created_before: float, limit: int = 500) -> list[tuple[str, str]]:
    """Lanes with a pending row that is due: its backoff is over, or it waits since before `created_before`."""
    due = or_(_o.c.next_attempt_at <= now, _o.c.next_attempt_at.is_(None) & (_o.c.created_at <= created_before))
    q = select(_o.c.channel, _o.c.chat_id).where(_o.c.status == PENDING, due).distinct().limit(limit)
    return [(r.channel, r.chat_id) for r in conn.execute(q)]


def counts(conn: Connection) -> dict[str, dict[str, int]]:
    """{channel: {status: rows}}."""
    out: dict[str, dict[str, int]] = {}
    q = select(_o.c.channel, _o.c.status, func.count()).group_by(_o.c.channel, _o.c.status)
    for channel, status, n in conn.execute(q):
        out.setdefault(channel, {})[status] = int(n)
    return out


def totals(conn: Connection) -> dict[str, int]:
    """Rows per status over all channels (pending and failed for /health)."""
    q = select(_o.c.status, func.count()).where(_o.c.status.in_([PENDING, FAILED])).group_by(_o.c.status)
    found = {status: int(n) for status, n in conn.execute(q)}
    return {PENDING: found.get(PENDING, 0), FAILED: found.get(FAILED, 0)}


def latest(conn: Connection, status: str | None = None, limit: int = 50) -> list[Any]:
    q = select(_o).order_by(_o.c.id.desc()).limit(limit)
    if status:
        q = q.where(_o.c.status == status)
    return list(conn.execute(q))


def progress_of(conn: Connection, row_id: int) -> dict[str, Any]:
    """What an adapter noted about a row's delivery so far (e.g. the parts already sent); {} when nothing."""
    result = conn.execute(select(_o.c.result).where(_o.c.id == row_id)).scalar()
    return dict(result) if isinstance(result, dict) else {}


def note_progress(conn: Connection, row_id: int, progress: dict[str, Any]) -> bool:
    """Keep an adapter's progress on a pending row (in `result`), so a retry resumes where it stopped."""
    return _set(conn, row_id, PENDING, result=progress)


def mark_deferred(conn: Connection, row_id: int, error: str, code: str | None) -> bool:
    """Hold a pending row until its chat writes again (`release_deferred`); when it was held is kept in `result`."""
    return _set(conn, row_id, PENDING, status=DEFERRED, last_error=error, error_code=code, next_attempt_at=None,
                result={"held_at": time.time()})


def release_deferred(conn: Connection, channel: str, chat_id: str) -> int:
    """The chat's held rows back to pending (they keep their place: lanes go in id order); how many."""
    stmt = (update(_o).where(_o.c.status == DEFERRED, _o.c.channel == channel, _o.c.chat_id == chat_id)
            .values(status=PENDING, attempts=0, updated_at=time.time()))
    return conn.execute(stmt).rowcount


def page(conn: Connection, *, status: str | None = None, channel: str | None = None, chat_id: str | None = None,
         before: int | None = None, limit: int = 50) -> list[Any]:
    """Rows newest first, filtered; `before` (an id) continues a listing after its last row (ids only grow)."""
    q = select(_o).order_by(_o.c.id.desc()).limit(limit)
    if status:
        q = q.where(_o.c.status == status)
    if channel:
        q = q.where(_o.c.channel == channel)
    if chat_id:
        q = q.where(_o.c.chat_id == chat_id)
    if before is not None:
        q = q.where(_o.c.id < before)
    return list(conn.execute(q))
