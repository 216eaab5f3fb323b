"""The inbound queue: every accepted user input, drained by turns in sequence order.

Every message passes through here twice (accepted, then claimed by a turn), so these are Core
statements on a Connection, built once at import; callers holding an ORM session pass
`session.connection()`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, exists, func, insert, select, update

from picobot.domain.text import repair_content, sendable_content
from picobot.storage.models import (
    INBOUND_CANCELLED, INBOUND_CLAIMED, INBOUND_DONE, INBOUND_PENDING, MODE_QUEUE, MODE_STEER, TURN_RUNNING,
    InboundRow, SessionRow, TurnRow,
)
from picobot.storage.upsert import InsertIfAbsent

MAX_CLAIM = 64  # inputs one turn takes at most (the per-session pending limit)

_i = InboundRow.__table__
_s = SessionRow.__table__
_t = TurnRow.__table__


@dataclass(frozen=True)
class Input:
    """A claimed input, as a turn sees it (attempts counts this claim)."""

    id: int
    seq: int
    mode: str
    content: Any
    sender_id: str
    attempts: int
    platform_message_id: str | None = None  # e.g. `job:<job_id>:<due_at>` for a scheduled job's input
    created_at: float | None = None  # when it was stored (the first claim only reads it: turn latency)


@dataclass(frozen=True)
class Queued:
    id: int
    seq: int


_IS_PENDING = (_i.c.session_id == bindparam("sid")) & (_i.c.status == INBOUND_PENDING)

_ANY_PENDING = select(_i.c.id).where(_IS_PENDING).limit(1)
_COUNT_PENDING = select(func.count()).select_from(_i).where(_IS_PENDING)
_INTAKE_STATE = select(
    select(func.count()).select_from(_i).where(_IS_PENDING).scalar_subquery(),
    exists().where(_t.c.session_id == bindparam("sid"), _t.c.status == TURN_RUNNING),
)
_BY_PLATFORM_ID = select(_i.c.id, _i.c.seq).where(_i.c.channel == bindparam("channel"),
                                                  _i.c.platform_message_id == bindparam("pmid"))
_NEXT_SEQ = (update(_s).where(_s.c.id == bindparam("sid"))
             .values(next_seq=_s.c.next_seq + 1, updated_at=bindparam("now")).returning(_s.c.next_seq))
_INSERT = insert(_i).returning(_i.c.id)
_INSERT_IF_NEW = InsertIfAbsent(_i, ["channel", "platform_message_id"])
_PENDING_ROWS = (select(_i.c.id, _i.c.seq, _i.c.mode, _i.c.content, _i.c.sender_id, _i.c.attempts,
                        _i.c.platform_message_id, _i.c.created_at)
                 .where(_IS_PENDING).order_by(_i.c.seq).limit(MAX_CLAIM))
_PENDING_STEER_ROWS = (select(_i.c.id, _i.c.seq, _i.c.mode, _i.c.content, _i.c.sender_id, _i.c.attempts)
                       .where(_IS_PENDING, _i.c.mode == MODE_STEER).order_by(_i.c.seq).limit(MAX_CLAIM))
_CLAIM = (update(_i).where(_i.c.id.in_(bindparam("ids", expanding=True)))
          .values(status=INBOUND_CLAIMED, turn_id=bindparam("turn"), attempts=_i.c.attempts + 1,
                  claimed_at=bindparam("now")))
_FINISH = (update(_i).where(_i.c.turn_id == bindparam("turn"), _i.c.status == INBOUND_CLAIMED)
           .values(status=bindparam("status")))
_RELEASE = (update(_i).where(_i.c.turn_id == bindparam("turn"), _i.c.status == INBOUND_CLAIMED)
            .values(status=INBOUND_PENDING, turn_id=None))
_CANCEL_PENDING = update(_i).where(_IS_PENDING).values(status=INBOUND_CANCELLED)
_WITH_WORK = select(_i.c.session_id).where(_i.c.status.in_([INBOUND_PENDING, INBOUND_CLAIMED])).distinct()
_CLAIMED_BY = (select(_i.c.id, _i.c.seq, _i.c.mode, _i.c.content, _i.c.sender_id, _i.c.attempts)
               .where(_i.c.turn_id == bindparam("turn"), _i.c.status == INBOUND_CLAIMED).order_by(_i.c.seq))
_SET_STATUS = update(_i).where(_i.c.id.in_(bindparam("ids", expanding=True))).values(status=bindparam("status"))


def enqueue(
    conn: Connection, session_id: str, channel: str, content: Any, sender_id: str, mode: str = MODE_STEER,
    platform_message_id: str | None = None,
) -> tuple[Queued, bool]:
    """Record input durably; returns (row, created). A repeated platform id returns the first row."""
    if platform_message_id:
        existing = conn.execute(_BY_PLATFORM_ID, {"channel": channel, "pmid": platform_message_id}).first()
        if existing is not None:
            return Queued(existing.id, existing.seq), False
    now = time.time()
    seq = conn.execute(_NEXT_SEQ, {"sid": session_id, "now": now}).scalar_one()
    values = {"session_id": session_id, "seq": seq, "mode": mode, "content": content, "sender_id": sender_id,
              "channel": channel, "platform_message_id": platform_message_id, "status": INBOUND_PENDING,
              "attempts": 0, "created_at": now}
    if not platform_message_id:
        return Queued(conn.execute(_INSERT, values).scalar_one(), seq), True
    # a concurrent duplicate of the same platform event waits for the first one's commit, then yields
    row_id = _INSERT_IF_NEW.run(conn, values)
    if row_id is None:
        existing = conn.execute(_BY_PLATFORM_ID, {"channel": channel, "pmid": platform_message_id}).one()
        return Queued(existing.id, existing.seq), False
    return Queued(row_id, seq), True


def intake_state(conn: Connection, session_id: str) -> tuple[int, bool]:
    """(pending inputs, whether a turn is running) for a session, in one round trip."""
    count, busy = conn.execute(_INTAKE_STATE, {"sid": session_id}).one()
    return int(count or 0), bool(busy)


def _inputs(rows: Any, bump: int) -> list[Input]:
    # Content is made sendable here, not only at intake: a row stored by an older version (or
    # written by hand) must not be able to break every turn of its dialog.
    return [Input(r.id, r.seq, r.mode, sendable_content(r.content), repair_content(r.sender_id),
                  r.attempts + bump, getattr(r, "platform_message_id", None), getattr(r, "created_at", None))
            for r in rows]


def _take(conn: Connection, taken: list[Input], turn_id: str) -> list[Input]:
    if taken:
        conn.execute(_CLAIM, {"ids": [r.id for r in taken], "turn": turn_id, "now": time.time()})
    return taken


def claim_first(conn: Connection, session_id: str, turn_id: str) -> list[Input]:
    """Claim the oldest pending input and the steer input right behind it (up to a queued one)."""
    taken: list[Input] = []
    for row in _inputs(conn.execute(_PENDING_ROWS, {"sid": session_id}), 1):
        if taken and row.mode == MODE_QUEUE:
            break
        taken.append(row)
    return _take(conn, taken, turn_id)


def claim_steer(conn: Connection, session_id: str, turn_id: str) -> list[Input]:
    """Claim pending steer input that arrived while the turn runs (never /queue input)."""
    return _take(conn, _inputs(conn.execute(_PENDING_STEER_ROWS, {"sid": session_id}), 1), turn_id)


def claimed_by(conn: Connection, turn_id: str) -> list[Input]:
    """The inputs a turn holds (attempts as stored)."""
    return _inputs(conn.execute(_CLAIMED_BY, {"turn": turn_id}), 0)


def set_status(conn: Connection, ids: list[int], status: str) -> None:
    if ids:
        conn.execute(_SET_STATUS, {"ids": ids, "status": status})


def finish(conn: Connection, turn_id: str, status: str = INBOUND_DONE) -> None:
    conn.execute(_FINISH, {"turn": turn_id, "status": status})


def release_claims(conn: Connection, turn_id: str) -> int:
    """Put a dead turn's input back in the queue, to be run again."""
    return conn.execute(_RELEASE, {"turn": turn_id}).rowcount


def cancel_pending(conn: Connection, session_id: str) -> int:
    return conn.execute(_CANCEL_PENDING, {"sid": session_id}).rowcount


def has_pending(conn: Connection, session_id: str) -> bool:
    return conn.execute(_ANY_PENDING, {"sid": session_id}).first() is not None


def count_pending(conn: Connection, session_id: str) -> int:
    return conn.execute(_COUNT_PENDING, {"sid": session_id}).scalar() or 0


def sessions_with_work(conn: Connection) -> list[str]:
    """Sessions that have pending or claimed input."""
    return list(conn.execute(_WITH_WORK).scalars())
