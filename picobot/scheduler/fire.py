"""Fire one due time of one job, exactly once: claim the run in SQL, advance, dispatch the kind.

    fire(rt, job_id, due_at)
      scheduler off / job gone / not active -> nothing
      claim_run(job_id, due_at)  (UNIQUE in SQL)  -> taken already: "duplicate" (second beat,
                                                     beat restart, redelivered task)
      a scheduled due time advances next_due_at (a one-shot ends `completed`), the redbeat entry
      is re-written for the next due time, then the kind runs and its outcome is recorded.

Beat sends due times in batches (picobot/scheduler/batch.py, one transaction for many); this
path serves "run now", batches' internal_event jobs and a batch that failed as a whole.

Agent kinds (agent_task, silent_agent_task) only store their input; the run's outcome is recorded
when that input's turn ends (`on_turn_finished`, called by the turn runner; the input's
platform_message_id is `job:<job_id>:<due_at>`).
"""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select, update

from picobot.scheduler import keys
from picobot.storage.models import JobRunOutcome

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.scheduler")

INPUT_PREFIX = "job:"
BUDGET_EXCEEDED = JobRunOutcome.BUDGET_EXCEEDED  # the turn's status and the run's outcome
RUN_KEY = keys.RUN_PREFIX  # + run id -> the worker running a non-agent run (liveness)


def job_view(row: dict[str, Any] | None) -> Any:
    """A job row (storage/jobs.py dict) with attribute access, or None."""
    return None if row is None else SimpleNamespace(**row)


def input_id(job_id: str, due_at: float) -> str:
    return f"{INPUT_PREFIX}{job_id}:{due_at!r}"


def parse_input_id(pmid: str | None) -> tuple[str, float] | None:
    """(job_id, due_at) of a job's input id, None for anything else (job ids may contain ':')."""
    if not pmid or not pmid.startswith(INPUT_PREFIX):
        return None
    job_id, sep, due = pmid[len(INPUT_PREFIX):].rpartition(":")
    try:
        return (job_id, float(due)) if sep and job_id else None
    except ValueError:
        return None


def fire(rt: "Ports", job_id: str, due_at: float | None, manual: bool = False) -> str:
    """Run the job's due time `due_at` once (None: now, as a manual run); returns the outcome."""
    from picobot.scheduler import sync
    from picobot.scheduler.schedules import next_due
    from picobot.storage import jobs as store

    if not rt.config.scheduler.enabled:
        return "disabled"
    if due_at is None:
        due_at, manual = time.time(), True
    with rt.db.begin() as conn:
        job = job_view(store.get(conn, job_id))
        if job is None or job.state != "active":
            log.debug("job %s: not active; due %s not fired", job_id, due_at)
            return "inactive"
        scheduled = job.next_due_at is not None and abs(float(job.next_due_at) - due_at) < 1e-6
        if not scheduled and not manual:
            if store.run_for(conn, job_id, due_at) is not None:
                log.debug("job %s: due %s fired already", job_id, due_at)
                return "duplicate"
            log.debug("job %s: stale wake-up for %s (next due %s)", job_id, due_at, job.next_due_at)
            return "stale"
        run_id = store.claim_run(conn, job_id, due_at)
        if run_id is None:
            log.debug("job %s: due %s fired already", job_id, due_at)
            return "duplicate"
        if scheduled:
            tz = job.timezone or rt.config.time.timezone
            nxt = next_due(job.schedule, due_at, tz, job.created_at)
            store.set_next_due(conn, job_id, nxt, last_due_at=due_at, completed=nxt is None, expect_next=job.next_due_at)
    if scheduled:
        sync.push_job(rt, job_id)  # the next wake-up (or none: completed)
    return _run(rt, job, run_id, due_at)


def _run(rt: "Ports", job: Any, run_id: int, due_at: float) -> str:  # job: a job_view
    from picobot.scheduler import kinds
    from picobot.storage import jobs as store

    rt.redis.set(RUN_KEY + str(run_id), rt.worker_name, ex=6 * 3600)
    try:
        outcome, error, session_id = kinds.run(rt, job, due_at)
    except Exception as exc:  # a bug or an outage: recorded on the run, never lost
        log.exception("job %s failed", job.id)
        outcome, error, session_id = "failed", f"{type(exc).__name__}: {exc}"[:2000], None
    with rt.db.begin() as conn:
        if outcome == "running":
            if session_id is not None:  # kinds.run names the session it started
                store.set_run_session(conn, run_id, session_id)
        else:
            end_run(conn, run_id, outcome, error)
    rt.redis.delete(RUN_KEY + str(run_id))
    if outcome == "failed":
        log.warning("job %s due %s failed: %s", job.id, due_at, error)
    return outcome


def on_turn_finished(rt: "Ports", pmids: list[str], turn_id: str, status: str, error: str | None) -> None:
    """A turn that answered job input ended: record ok/failed on those runs (silent: one notice on failure)."""
    from picobot.scheduler import kinds
    from picobot.storage import jobs as store

    for pmid in pmids:
        parsed = parse_input_id(pmid)
        if parsed is None:
            continue
        job_id, due_at = parsed
        outcome = {"completed": "ok", BUDGET_EXCEEDED: BUDGET_EXCEEDED}.get(status, "failed")
        why = None if outcome == "ok" else (error or f"the turn ended {status}")
        first_today = False
        with rt.db.begin() as conn:
            run = store.run_for(conn, job_id, due_at)
            changed = run is not None and end_run(conn, run["id"], outcome, why, turn_id=turn_id or None)
            job = job_view(store.get(conn, job_id))
            if changed and run is not None and outcome == BUDGET_EXCEEDED:  # told once a UTC day, not at every fire
                first_today = not store.other_runs_with(conn, job_id, outcome, _utc_midnight(), run["id"])
        if first_today and job is not None:
            kinds.notify_budget(rt, job, why or "", due_at)
        elif changed and outcome == "failed" and job is not None and job.kind == "silent_agent_task":
            kinds.notify_failure(rt, job, why or "", due_at)


def _utc_midnight() -> float:
    now = time.time()
    return now - now % 86400


def end_run(conn: Connection, run_id: int, outcome: str, error: str | None, turn_id: str | None = None) -> bool:
    """Give a `running` run its outcome; False when it had one already (so a notice goes out once)."""
    from picobot.storage import jobs as store

    values: dict[str, Any] = {"outcome": outcome, "ended_at": time.time(),
                              "error": None if error is None else error[:4000]}
    if turn_id is not None:
        values["turn_id"] = turn_id
    changed = conn.execute(update(store.RUNS).where(store.RUNS.c.id == run_id, store.RUNS.c.outcome == "running")
                           .values(**values)).rowcount
    if changed:
        job_id = conn.execute(select(store.RUNS.c.job_id).where(store.RUNS.c.id == run_id)).scalar()
        if job_id is not None:  # the run updated just above, in this transaction
            store.set_outcome(conn, job_id, outcome)
    return bool(changed)
