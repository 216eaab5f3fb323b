"""Recovering runs a dead worker left behind (run by the sweeper every few seconds).

A running run whose worker no longer beats, or beats without it, is interrupted: a background one
also reports that to its parent session (a continuation turn), a foreground one needs nothing more
(its parent turn is interrupted too and re-run). A run still queued long after it was enqueued lost
its Celery message (a worker died holding it): it is enqueued again, at most once a minute, and its
claim makes a second delivery a no-op.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from picobot.runtime.heartbeat import worker_turns
from picobot.storage import agent_runs
from picobot.storage.models import RUN_INTERRUPTED
from picobot.subagents import keys
from picobot.subagents.inbox import post
from picobot.subagents.runner import report_run

if TYPE_CHECKING:
    from picobot.runtime.ports import AgentPorts

log = logging.getLogger("picobot.subagents")

DEAD_WORKER = "the worker running it stopped"
REQUEUE_AFTER_SECS = 30.0
REQUEUE_EVERY_SECS = 60


def recover_runs(rt: "AgentPorts") -> int:
    """Interrupt dead runs and re-enqueue lost ones; returns how many were interrupted. Never raises."""
    try:
        with rt.db.connect() as conn:
            running = agent_runs.running(conn)
            stale = agent_runs.queued_before(conn, time.time() - REQUEUE_AFTER_SECS)
        interrupted = sum(_interrupt(rt, run) for run in running if not _alive(rt, run))
        for run_id in stale:
            _requeue(rt, run_id)
        return interrupted
    except Exception:  # the session sweep that follows must run whatever happens here
        log.exception("recovering sub-agent runs failed")
        return 0


def _alive(rt: "AgentPorts", run: Any) -> bool:
    beat = worker_turns(rt.redis, run.worker)
    if beat is None:
        return False
    at, running = beat
    return run.id in running or (run.started_at or 0) > at - 1.0  # started after its worker's last beat


def _interrupt(rt: "AgentPorts", run: Any) -> int:
    with rt.db.begin() as conn:
        if not agent_runs.end_active(conn, run.id, RUN_INTERRUPTED, DEAD_WORKER):
            return 0  # it finished meanwhile
        full = agent_runs.get(conn, run.id)
        told = bool(run.background) and full is not None and post(
            conn, full, RUN_INTERRUPTED, f"{DEAD_WORKER} before it finished; start it again if it is still needed")
    log.warning("sub-agent run %s interrupted: %s", run.id, DEAD_WORKER)
    if full is not None:
        report_run(rt, run.id, full["session_id"], RUN_INTERRUPTED, DEAD_WORKER, full["subagent_type"],
                   full["description"], (full["definition"] or {}).get("plan_item_id"))
    if told and full is not None:
        try:
            rt.queue.enqueue_turn(full["session_id"])
        except Exception as exc:  # stored: the session sweep starts it
            log.warning("report of run %s not enqueued (%s)", run.id, type(exc).__name__)
    return 1


def _requeue(rt: "AgentPorts", run_id: str) -> None:
    if rt.redis.set(keys.run_requeued(run_id), "1", nx=True, ex=REQUEUE_EVERY_SECS):
        rt.queue.enqueue_subagent(run_id)
