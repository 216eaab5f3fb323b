"""Runs left `running` by a worker that died: settle them, never leave them silently open.

Called by every sync (30 s). A run older than STALE_SECS that is still `running`:
- agent kinds (the run has a session): the input `job:<id>:<due>` decides. Pending or claimed:
  the turn machinery still owns it (the session sweeper re-runs the input of a dead worker's turn,
  up to gateway.max_turn_attempts) — leave it. Done/failed/cancelled without an outcome on the
  run (the worker died between the turn's commit and the hook): the input's turn decides ok/failed.
  No input at all: failed, "the worker stopped before the job's input was stored".
- other kinds: failed, "the worker stopped", when the worker that ran it is gone (its
  picobot:scheduler:run:<id> key is missing or its heartbeat expired).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sqlalchemy import select

from picobot.runtime.heartbeat import worker_turns
from picobot.storage.models import INBOUND_CLAIMED, INBOUND_DONE, INBOUND_PENDING, InboundRow, TurnRow

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.scheduler")

STALE_SECS = 30.0
WORKER_STOPPED = "the worker stopped while running this job"
NO_INPUT = "the worker stopped before the job's input was stored"

_i, _t = InboundRow.__table__, TurnRow.__table__


def settle_stale_runs(rt: "Ports", now: float | None = None) -> int:
    from picobot.scheduler.fire import RUN_KEY, end_run, input_id, on_turn_finished
    from picobot.storage import jobs as store

    now = time.time() if now is None else now
    runs = store.RUNS
    with rt.db.connect() as conn:
        stale = conn.execute(select(runs.c.id, runs.c.job_id, runs.c.due_at, runs.c.session_id).where(
            runs.c.outcome == "running", runs.c.created_at < now - STALE_SECS)).all()
    settled = 0
    for run in stale:
        if run.session_id:
            pmid = input_id(run.job_id, run.due_at)
            with rt.db.connect() as conn:
                row = conn.execute(select(_i.c.status, _i.c.turn_id).where(
                    _i.c.platform_message_id == pmid).limit(1)).first()
                turn = None if row is None or not row.turn_id else conn.execute(
                    select(_t.c.status, _t.c.error).where(_t.c.id == row.turn_id)).first()
            if row is not None and row.status in (INBOUND_PENDING, INBOUND_CLAIMED):
                continue
            if row is None:
                with rt.db.begin() as conn:
                    settled += int(end_run(conn, run.id, "failed", NO_INPUT))
                continue
            status = "completed" if row.status == INBOUND_DONE and (turn is None or turn.status == "completed") \
                else (turn.status if turn is not None else row.status)
            on_turn_finished(rt, [pmid], row.turn_id or "", status, turn.error if turn is not None else None)
            settled += 1
            continue
        worker = rt.redis.get(RUN_KEY + str(run.id))
        if isinstance(worker, str) and worker and worker_turns(rt.redis, worker) is not None:
            continue  # its worker is alive and still at it
        with rt.db.begin() as conn:
            settled += int(end_run(conn, run.id, "failed", WORKER_STOPPED))
    if settled:
        log.warning("scheduler: settled %d run(s) of stopped workers", settled)
    return settled
