"""SQL of the scheduler: job definitions (`scheduled_jobs`) and one run row per due time (`job_runs`).

`claim_run` is the exactly-once gate: INSERT … ON CONFLICT (job_id, due_at) DO NOTHING, so a second
beat, a beat restart or a redelivered task finds the row and does nothing. Plain Core statements on a
Connection (from `db.begin()` / `db.connect()`) or an ORM Session's `.connection()`.
"""

from __future__ import annotations

import time
from types import EllipsisType
from typing import Any

from sqlalchemy import Connection, bindparam, case, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from picobot.storage.models import (
    JOB_ACTIVE, JOB_RUN_MISSED, JOB_RUN_RUNNING, JobRunRow, ScheduledJobRow,
)
from picobot.storage.upsert import InsertIfAbsent

JOBS = ScheduledJobRow.__table__
RUNS = JobRunRow.__table__
_CLAIM = InsertIfAbsent(RUNS, ["job_id", "due_at"])
_DIALECT_INSERT: dict[str, Any] = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}
JOB_COLUMNS = tuple(c.name for c in JOBS.columns)
RUN_COLUMNS = tuple(c.name for c in RUNS.columns)


def _job(row: Any) -> dict[str, Any] | None:
    return None if row is None else dict(row._mapping)


def upsert(conn: Connection, values: dict[str, Any], *, now: float | None = None) -> dict[str, Any]:
    """Create or replace a job. Replacing bumps `version` (and keeps `created_at` unless given); returns the row."""
    now = time.time() if now is None else now
    values = {k: v for k, v in values.items() if k in JOB_COLUMNS and k not in ("version", "updated_at")}
    old = get(conn, values["id"], for_update=True)
    if old is None:
        values.setdefault("created_at", now)
        values.setdefault("state", JOB_ACTIVE)
        values.setdefault("source", "user")
        values.setdefault("payload", {})
        conn.execute(JOBS.insert().values(**values, updated_at=now, version=1))
    else:
        conn.execute(update(JOBS).where(JOBS.c.id == values["id"])
                     .values(**values, updated_at=now, version=old["version"] + 1))
    row = get(conn, values["id"])
    if row is None:  # written above in this same transaction
        raise RuntimeError(f"job {values['id']!r} vanished while being written")
    return row


def get(conn: Connection, job_id: str, *, for_update: bool = False) -> dict[str, Any] | None:
    q = select(JOBS).where(JOBS.c.id == job_id)
    if for_update and conn.dialect.name == "postgresql":
        q = q.with_for_update()
    return _job(conn.execute(q).first())


def get_many(conn: Connection, job_ids: list[str]) -> list[dict[str, Any]]:
    """The jobs of these ids that exist (one query; a batch of fires loads its jobs with it)."""
    if not job_ids:
        return []
    return [dict(r._mapping) for r in conn.execute(select(JOBS).where(JOBS.c.id.in_(job_ids)))]


def list_jobs(conn: Connection, *, source: str | None = None, states: tuple[str, ...] | None = None,
              scopes: list[str] | None = None) -> list[dict[str, Any]]:
    """Jobs ordered by id; `scopes` ("channel:chat_id") keeps those whose owner_scope is one of them
    (target filtering is done by the caller: JSON columns are not portable to filter on)."""
    q = select(JOBS).order_by(JOBS.c.id)
    if source is not None:
        q = q.where(JOBS.c.source == source)
    if states is not None:
        q = q.where(JOBS.c.state.in_(states))
    if scopes is not None:
        q = q.where(JOBS.c.owner_scope.in_(scopes))
    return [dict(r._mapping) for r in conn.execute(q)]


def delete_job(conn: Connection, job_id: str, *, keep_runs: bool = False) -> bool:
    """Delete a job (and its run history unless `keep_runs`); False when there was none."""
    gone = conn.execute(delete(JOBS).where(JOBS.c.id == job_id)).rowcount
    if not keep_runs:
        conn.execute(delete(RUNS).where(RUNS.c.job_id == job_id))
    return bool(gone)


def set_state(conn: Connection, job_id: str, state: str, *, next_due_at: float | None | EllipsisType = ...,
              now: float | None = None) -> bool:
    """Set a job's state (and next_due_at when given); bumps `version`. False when no such job."""
    values: dict[str, Any] = {"state": state, "updated_at": time.time() if now is None else now,
                              "version": JOBS.c.version + 1}
    if next_due_at is not ...:
        values["next_due_at"] = next_due_at
    return bool(conn.execute(update(JOBS).where(JOBS.c.id == job_id).values(**values)).rowcount)


def set_next_due(conn: Connection, job_id: str, next_due_at: float | None, *, last_due_at: float | None = None,
                 completed: bool = False, expect_next: float | None | EllipsisType = ...) -> bool:
    """Advance a job's schedule (not a user edit: `version` stays). `completed` ends a one-shot.
    `expect_next`: only when next_due_at is still that value (compare-and-set); False otherwise."""
    values: dict[str, Any] = {"next_due_at": next_due_at}
    if last_due_at is not None:
        values["last_due_at"] = last_due_at
    if completed:
        values["state"] = "completed"
    q = update(JOBS).where(JOBS.c.id == job_id)
    if expect_next is not ...:
        q = q.where(JOBS.c.next_due_at.is_(None) if expect_next is None else JOBS.c.next_due_at == expect_next)
    return bool(conn.execute(q.values(**values)).rowcount)


_ADVANCE = (update(JOBS).where(JOBS.c.id == bindparam("jid"), JOBS.c.next_due_at == bindparam("expect"))
            .values(next_due_at=bindparam("nxt"), last_due_at=bindparam("last"),
                    state=case((bindparam("done") == 1, "completed"), else_=JOBS.c.state)))


def claim_runs(conn: Connection, pairs: list[tuple[str, float]], *, now: float | None = None) -> dict[tuple[str, float], int]:
    """`claim_run` for many due times in one statement: {(job_id, due_at): new run id} of those
    claimed here; a pair missing from it was claimed already."""
    if not pairs:
        return {}
    now = time.time() if now is None else now
    rows = [{"job_id": job_id, "due_at": due_at, "created_at": now, "started_at": now, "ended_at": None,
             "outcome": JOB_RUN_RUNNING} for job_id, due_at in pairs]
    stmt = (_DIALECT_INSERT[conn.dialect.name](RUNS).values(rows)
            .on_conflict_do_nothing(index_elements=["job_id", "due_at"])
            .returning(RUNS.c.id, RUNS.c.job_id, RUNS.c.due_at))
    return {(r.job_id, float(r.due_at)): int(r.id) for r in conn.execute(stmt)}


def advance_many(conn: Connection, items: list[tuple[str, float, float | None]]) -> int:
    """`set_next_due` of many fires, as (job_id, due_at fired, next_due_at), compare-and-set on due_at
    (a job moved meanwhile stays), in one executemany of a statement built once; how many moved."""
    if not items:
        return 0
    return int(conn.execute(_ADVANCE, [{"jid": job_id, "expect": due_at, "nxt": nxt, "last": due_at,
                                        "done": int(nxt is None)} for job_id, due_at, nxt in items]).rowcount)


def set_outcome(conn: Connection, job_id: str, outcome: str) -> None:
    conn.execute(update(JOBS).where(JOBS.c.id == job_id).values(last_outcome=outcome))


def due(conn: Connection, before: float, limit: int | None = None) -> list[dict[str, Any]]:
    """Active jobs with next_due_at <= before, soonest first."""
    q = (select(JOBS).where(JOBS.c.state == JOB_ACTIVE, JOBS.c.next_due_at.is_not(None),
                            JOBS.c.next_due_at <= before).order_by(JOBS.c.next_due_at, JOBS.c.id))
    if limit is not None:
        q = q.limit(limit)
    return [dict(r._mapping) for r in conn.execute(q)]


def claim_run(conn: Connection, job_id: str, due_at: float, *, now: float | None = None,
              outcome: str = JOB_RUN_RUNNING) -> int | None:
    """Record that this due time runs; the new run id, or None when it was claimed already."""
    now = time.time() if now is None else now
    started = now if outcome == JOB_RUN_RUNNING else None
    ended = None if outcome == JOB_RUN_RUNNING else now
    return _CLAIM.run(conn, {"job_id": job_id, "due_at": due_at, "created_at": now, "started_at": started,
                             "ended_at": ended, "outcome": outcome})


def record_missed(conn: Connection, job_id: str, due_at: float, *, error: str | None = None,
                  now: float | None = None) -> int | None:
    """A due time that passed while nothing ran (misfire): a visible `missed` run, once."""
    run_id = claim_run(conn, job_id, due_at, now=now, outcome=JOB_RUN_MISSED)
    if run_id is not None and error:
        conn.execute(update(RUNS).where(RUNS.c.id == run_id).values(error=error[:4000]))
    return run_id


def finish_run(conn: Connection, run_id: int, outcome: str, *, error: str | None = None,
               session_id: str | None = None, turn_id: str | None = None, now: float | None = None,
               update_job: bool = True) -> None:
    """End a run with its outcome (ok | failed | skipped | missed); the job's last_outcome follows."""
    values: dict[str, Any] = {"outcome": outcome, "ended_at": time.time() if now is None else now}
    if error is not None:
        values["error"] = error[:4000]
    if session_id is not None:
        values["session_id"] = session_id
    if turn_id is not None:
        values["turn_id"] = turn_id
    conn.execute(update(RUNS).where(RUNS.c.id == run_id).values(**values))
    if update_job:
        job_id = conn.execute(select(RUNS.c.job_id).where(RUNS.c.id == run_id)).scalar()
        if job_id is not None:
            set_outcome(conn, job_id, outcome)


def set_run_session(conn: Connection, run_id: int, session_id: str, turn_id: str | None = None) -> None:
    values: dict[str, Any] = {"session_id": session_id}
    if turn_id is not None:
        values["turn_id"] = turn_id
    conn.execute(update(RUNS).where(RUNS.c.id == run_id).values(**values))


def run_for(conn: Connection, job_id: str, due_at: float) -> dict[str, Any] | None:
    return _job(conn.execute(select(RUNS).where(RUNS.c.job_id == job_id, RUNS.c.due_at == due_at)).first())


def runs(conn: Connection, job_id: str, limit: int = 20) -> list[dict[str, Any]]:
    """A job's runs, newest due time first."""
    q = select(RUNS).where(RUNS.c.job_id == job_id).order_by(RUNS.c.due_at.desc(), RUNS.c.id.desc()).limit(limit)
    return [dict(r._mapping) for r in conn.execute(q)]


def running_by_session(conn: Connection, session_id: str) -> list[dict[str, Any]]:
    """Runs still `running` that fed input into this session (S2 closes them when the turn commits)."""
    q = (select(RUNS).where(RUNS.c.session_id == session_id, RUNS.c.outcome == JOB_RUN_RUNNING)
         .order_by(RUNS.c.id))
    return [dict(r._mapping) for r in conn.execute(q)]


def run_by_session_input(conn: Connection, session_id: str, job_id: str, due_at: float) -> dict[str, Any] | None:
    """The run of (job_id, due_at) if it fed this session (platform_message_id `job:<id>:<due_at>`)."""
    q = select(RUNS).where(RUNS.c.job_id == job_id, RUNS.c.due_at == due_at, RUNS.c.session_id == session_id)
    return _job(conn.execute(q).first())


def other_runs_with(conn: Connection, job_id: str, outcome: str, ended_since: float, run_id: int) -> int:
    """How many runs of the job besides `run_id` ended with `outcome` since `ended_since` (epoch seconds)."""
    q = (select(func.count()).select_from(RUNS)
         .where(RUNS.c.job_id == job_id, RUNS.c.outcome == outcome, RUNS.c.ended_at >= ended_since,
                RUNS.c.id != run_id))
    return int(conn.execute(q).scalar() or 0)


def count(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(JOBS)).scalar() or 0)
