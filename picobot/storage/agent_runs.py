"""Sub-agent runs (`agent_runs`): Core statements, built once; every `task` call runs two or three.

A run moves queued -> running -> completed | failed | cancelled | interrupted. Each move is a
conditional UPDATE on the state it leaves, so two parties (a worker and the sweeper, a run and a
cancel) can never both move it: the loser sees rowcount 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

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
