"""Sub-agent runs (`agent_runs`): Core statements, built once; every `task` call runs two or three.

A run moves queued -> running -> completed | failed | cancelled | interrupted. Each move is a
conditional UPDATE on the state it leaves, so two parties (a worker and the sweeper, a run and a
cancel) can never both move it: the loser sees rowcount 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Connection, bindparam, func, insert, select, update

from picobot.domain.messages import Usage
from picobot.storage.models import (
    RUN_ACTIVE, RUN_CANCELLED, RUN_INTERRUPTED, RUN_QUEUED, RUN_RUNNING, AgentRunRow, SessionRow,
)

_r = AgentRunRow.__table__
_s = SessionRow.__table__

_INSERT = insert(_r)
_LOCK_SESSION = select(_s.c.id).where(_s.c.id == bindparam("sid")).with_for_update()
_CHILDREN_OF_TURN = (select(func.count()).select_from(_r)
                     .where(_r.c.turn_id == bindparam("turn"), _r.c.parent_run_id.is_(None)))
_CHILDREN_OF_RUN = select(func.count()).select_from(_r).where(_r.c.parent_run_id == bindparam("parent"))
_CLAIM = (update(_r).where(_r.c.id == bindparam("rid"), _r.c.status == RUN_QUEUED)
          .values(status=RUN_RUNNING, worker=bindparam("worker"), started_at=bindparam("now")))
_FINISH = (update(_r).where(_r.c.id == bindparam("rid"), _r.c.status == RUN_RUNNING)
           .values(status=bindparam("status"), result=bindparam("result"), error=bindparam("err"),
                   input_tokens=bindparam("inp"), output_tokens=bindparam("out"), finished_at=bindparam("now")))
_END_ACTIVE = (update(_r).where(_r.c.id == bindparam("rid"), _r.c.status.in_(RUN_ACTIVE))
               .values(status=bindparam("status"), error=bindparam("err"), finished_at=bindparam("now")))
_ADD_USAGE = (update(_s).where(_s.c.id == bindparam("sid"))
              .values(input_tokens=_s.c.input_tokens + bindparam("inp"),
                      output_tokens=_s.c.output_tokens + bindparam("out")))
_GET = select(_r).where(_r.c.id == bindparam("rid"))
_OF_SESSION = (select(_r).where(_r.c.session_id == bindparam("sid"))
               .order_by(_r.c.created_at.desc()).limit(bindparam("limit")))
_RECENT = select(_r).order_by(_r.c.created_at.desc()).limit(bindparam("limit"))
_ACTIVE_OF_SESSION = select(_r.c.id, _r.c.status).where(_r.c.session_id == bindparam("sid"),
                                                          _r.c.status.in_(RUN_ACTIVE))
_RUNNING = select(_r.c.id, _r.c.worker, _r.c.started_at, _r.c.background).where(_r.c.status == RUN_RUNNING)
_SESSION_CHANNEL = select(_s.c.channel, _s.c.chat_id, _s.c.agent).where(_s.c.id == bindparam("sid"))
_QUEUED_BEFORE = select(_r.c.id).where(_r.c.status == RUN_QUEUED, _r.c.created_at < bindparam("before"))


@dataclass(frozen=True)
class NewRun:
    id: str
    session_id: str
    turn_id: str
    parent_run_id: str | None
    depth: int
    background: bool
    subagent_type: str
    definition: dict[str, Any]
    description: str
    prompt: str
    sender_id: str


def children_started(conn: Connection, turn_id: str, parent_run_id: str | None) -> int:
    """How many runs the agent (the main one when parent_run_id is None) started in this turn."""
    if parent_run_id is None:
        return conn.execute(_CHILDREN_OF_TURN, {"turn": turn_id}).scalar_one()
    return conn.execute(_CHILDREN_OF_RUN, {"parent": parent_run_id}).scalar_one()


def lock_session(conn: Connection, session_id: str) -> None:
    """Serialise run admission per session (PostgreSQL row lock; SQLite has one writer anyway)."""
    conn.execute(_LOCK_SESSION, {"sid": session_id})


def insert_run(conn: Connection, run: NewRun, worker: str | None = None) -> None:
    """A new run: `running` at once when a worker is given (foreground), else `queued`."""
    now = time.time()
    conn.execute(_INSERT, {**run.__dict__, "status": RUN_RUNNING if worker else RUN_QUEUED, "worker": worker or "",
                           "input_tokens": 0, "output_tokens": 0, "created_at": now,
                           "started_at": now if worker else None})


def claim(conn: Connection, run_id: str, worker: str) -> bool:
    """queued -> running; False when it is no longer queued (cancelled, or another worker took it)."""
    return conn.execute(_CLAIM, {"rid": run_id, "worker": worker, "now": time.time()}).rowcount == 1


def finish(conn: Connection, run_id: str, session_id: str, status: str, result: str | None, error: str | None,
           usage: Usage) -> bool:
    """running -> a final status, with its usage added to the session's totals; False if fenced out."""
    done = conn.execute(_FINISH, {"rid": run_id, "status": status, "result": result, "err": error,
                                  "inp": usage.input_tokens, "out": usage.output_tokens,
                                  "now": time.time()}).rowcount == 1
    if done and (usage.input_tokens or usage.output_tokens):
        conn.execute(_ADD_USAGE, {"sid": session_id, "inp": usage.input_tokens, "out": usage.output_tokens})
    return done


def end_active(conn: Connection, run_id: str, status: str, error: str) -> bool:
    """queued or running -> cancelled / interrupted (no result); False when it had ended already."""
    assert status in (RUN_CANCELLED, RUN_INTERRUPTED)
    return conn.execute(_END_ACTIVE, {"rid": run_id, "status": status, "err": error, "now": time.time()}).rowcount == 1


def get(conn: Connection, run_id: str) -> dict[str, Any] | None:
    row = conn.execute(_GET, {"rid": run_id}).first()
    return dict(row._mapping) if row is not None else None


def of_session(conn: Connection, session_id: str, limit: int = 20) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(_OF_SESSION, {"sid": session_id, "limit": limit})]


def recent(conn: Connection, limit: int = 50) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(_RECENT, {"limit": limit})]


def active_of_session(conn: Connection, session_id: str) -> list[tuple[str, str]]:
    """(id, status) of the session's queued and running runs."""
    return [(r.id, r.status) for r in conn.execute(_ACTIVE_OF_SESSION, {"sid": session_id})]


def running(conn: Connection) -> list[Any]:
    """Every running run: id, worker, started_at, background."""
    return list(conn.execute(_RUNNING))


def queued_before(conn: Connection, before: float) -> list[str]:
    return list(conn.execute(_QUEUED_BEFORE, {"before": before}).scalars())


def session_view(conn: Connection, session_id: str) -> Any:
    """(channel, chat_id, agent) of a run's session; None when it is gone."""
    return conn.execute(_SESSION_CHANNEL, {"sid": session_id}).first()



class TurnRef(NamedTuple):
    session_id: str
    turn_id: str
    newest: float  # creation time of the turn's newest (matching) run


_STREAM_BATCH = 200


def turns_page(conn: Connection, status: str | None = None, before: float | None = None,
               limit: int = 20) -> list[TurnRef]:
    """The newest turns that started runs (of `status`, if given), newest first.

    Runs are read newest first (ix_agent_runs_created) until `limit` turns are found, so a page
    costs about its own runs, not the table. `before` continues a listing after its last turn: a
    turn whose newest matching run is at or after `before` was on an earlier page and is skipped.
    (Two turns whose newest runs were created in the same microsecond could straddle a page edge
    and one be skipped; creation times are `time.time()` floats.) Whole turns, so a page can draw
    each turn's tree complete.
    """
    q = select(_r.c.session_id, _r.c.turn_id, _r.c.created_at).order_by(_r.c.created_at.desc())
    if status:
        q = q.where(_r.c.status == status)
    if before is not None:
        q = q.where(_r.c.created_at < before)
    found: dict[tuple[str, str], float] = {}
    seen: set[tuple[str, str]] = set()
    waiting: list[TurnRef] = []
    rows = conn.execute(q.execution_options(yield_per=_STREAM_BATCH))
    try:
        for row in rows:
            key = (row.session_id, row.turn_id)
            if key in seen:
                continue
            seen.add(key)
            waiting.append(TurnRef(row.session_id, row.turn_id, row.created_at))
            if len(found) + len(waiting) >= limit:
                _settle(conn, waiting, found, status, before)
                if len(found) >= limit:
                    break
    finally:
        rows.close()
    _settle(conn, waiting, found, status, before)
    return [TurnRef(sid, tid, newest) for (sid, tid), newest in list(found.items())[:limit]]


def _settle(conn: Connection, waiting: list[TurnRef], found: dict[tuple[str, str], float], status: str | None,
            before: float | None) -> None:
    """Move the waiting turns into `found`, but for those an earlier page showed (a newer run exists)."""
    if not waiting:
        return
    shown: set[tuple[str, str]] = set()
    if before is not None:
        q = (select(_r.c.session_id, _r.c.turn_id).distinct()
             .where(_r.c.turn_id.in_({t.turn_id for t in waiting}), _r.c.created_at >= before))
        if status:
            q = q.where(_r.c.status == status)
        shown = {(r.session_id, r.turn_id) for r in conn.execute(q)}
    for t in waiting:
        if (t.session_id, t.turn_id) not in shown:
            found[(t.session_id, t.turn_id)] = t.newest
    waiting.clear()

def of_turns(conn: Connection, turn_ids: list[str]) -> list[dict[str, Any]]:
    """Every run of these turns, oldest first (parents before their children)."""
    if not turn_ids:
        return []
    q = select(_r).where(_r.c.turn_id.in_(turn_ids)).order_by(_r.c.created_at, _r.c.id)
    return [dict(r._mapping) for r in conn.execute(q)]


def children_of(conn: Connection, run: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs a run started itself, oldest first (they share its turn: ix_agent_runs_turn finds them)."""
    q = (select(_r).where(_r.c.turn_id == run["turn_id"], _r.c.parent_run_id == run["id"])
         .order_by(_r.c.created_at, _r.c.id))
    return [dict(r._mapping) for r in conn.execute(q)]
