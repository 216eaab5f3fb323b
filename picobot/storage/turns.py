"""Turn records: one row per turn, with its status from start to completion.

`start` and `finish` run once per turn on the hot path: Core statements on a Connection.
"""

from __future__ import annotations

import time

from sqlalchemy import Connection, bindparam, insert, select, update
from sqlalchemy.orm import Session

from picobot.domain.messages import Usage
from picobot.storage.models import TURN_FAILED, TURN_INTERRUPTED, TURN_RUNNING, TurnRow

_t = TurnRow.__table__

_START = insert(_t)
_FINISH = (update(_t).where(_t.c.id == bindparam("turn"), _t.c.status == TURN_RUNNING)
           .values(status=bindparam("status"), finished_at=bindparam("now"), input_tokens=bindparam("inp"),
                   output_tokens=bindparam("out"), final_text=bindparam("final"), error=bindparam("err"),
                   inbound_seqs=bindparam("seqs", type_=_t.c.inbound_seqs.type)))

_INTERRUPT = (update(_t).where(_t.c.id == bindparam("turn"), _t.c.status == TURN_RUNNING)
              .values(status=TURN_INTERRUPTED, finished_at=bindparam("now"), error=bindparam("err")))


def start(conn: Connection, turn_id: str, session_id: str, worker: str, attempt: int, inbound_seqs: list[int]) -> None:
    conn.execute(_START, {"id": turn_id, "session_id": session_id, "status": TURN_RUNNING, "worker": worker,
                          "attempt": attempt, "started_at": time.time(), "input_tokens": 0, "output_tokens": 0,
                          "inbound_seqs": inbound_seqs})


def finish(conn: Connection, turn_id: str, status: str, usage: Usage, final_text: str | None, error: str | None,
           inbound_seqs: list[int]) -> bool:
    """Close a running turn. False when it no longer runs (the sweeper declared it dead): a fence."""
    return conn.execute(_FINISH, {
        "turn": turn_id, "status": status, "now": time.time(), "inp": usage.input_tokens, "out": usage.output_tokens,
        "final": final_text, "err": error, "seqs": inbound_seqs,
    }).rowcount == 1


_MARK_FAILED = update(_t).where(_t.c.id == bindparam("turn")).values(status=TURN_FAILED, error=bindparam("err"))


def mark_failed(conn: Connection, turn_id: str, error: str) -> None:
    """Record that a turn's input was given up on (after the turn was interrupted)."""
    conn.execute(_MARK_FAILED, {"turn": turn_id, "err": error})


def interrupt(conn: Connection, turn_id: str, error: str) -> bool:
    """Mark a running turn interrupted (its input is then released by the caller); False if it no longer runs."""
    return conn.execute(_INTERRUPT, {"turn": turn_id, "now": time.time(), "err": error}).rowcount == 1


_RUNNING_IDS = select(_t.c.id).where(_t.c.session_id == bindparam("sid"), _t.c.status == TURN_RUNNING)


def running_ids(conn: Connection, session_id: str) -> list[str]:
    return list(conn.execute(_RUNNING_IDS, {"sid": session_id}).scalars())


def get(s: Session, turn_id: str) -> TurnRow | None:
    return s.get(TurnRow, turn_id)


def running(s: Session, session_id: str | None = None) -> list[TurnRow]:
    q = select(TurnRow).where(TurnRow.status == TURN_RUNNING)
    if session_id:
        q = q.where(TurnRow.session_id == session_id)
    return list(s.scalars(q))
