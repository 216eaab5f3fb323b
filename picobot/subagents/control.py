"""Stopping runs: `/stop` on the parent session, `task action=cancel`, and the poller a background run
uses to notice either.

Foreground runs share their parent's cancellation (a stopped turn stops its children at once).
A background run may be on any worker, so it is told through the same Redis stop flag a turn uses
(`picobot:stop:<run id>`), polled by the run itself; a queued run is simply cancelled in SQL and its
task finds nothing to claim.
"""

from __future__ import annotations

import logging
import threading

import redis

from picobot.domain.cancel import CancelToken
from picobot.coord import keys
from picobot.runtime import control
from picobot.storage import agent_runs
from picobot.storage.db import Database
from picobot.storage.models import RUN_CANCELLED, RUN_QUEUED

log = logging.getLogger("picobot.subagents")

POLL_SECS = 0.25
STOPPED_BY_USER = "stopped by /stop"


def stop_session_runs(db: Database, r: redis.Redis, session_id: str) -> int:
    """Cancel every queued or running run of the session (the whole tree); returns how many."""
    with db.begin() as conn:
        active = agent_runs.active_of_session(conn, session_id)
        for run_id, status in active:
            if status == RUN_QUEUED:
                agent_runs.end_active(conn, run_id, RUN_CANCELLED, STOPPED_BY_USER)
    # queued ones too: a worker may be claiming one right now
    control.request_stop(r, [run_id for run_id, _ in active])
    return len(active)


def cancel_run(db: Database, r: redis.Redis, run_id: str, why: str) -> str:
    """Cancel one run: at once when queued, through its stop flag when running. Returns its status then."""
    with db.begin() as conn:
        run = agent_runs.get(conn, run_id)
        if run is None:
            return "missing"
        if run["status"] == RUN_QUEUED and agent_runs.end_active(conn, run_id, RUN_CANCELLED, why):
            return RUN_CANCELLED
    control.request_stop(r, [run_id])  # also when it was queued a moment ago and is being claimed now
    return run["status"]


class StopPoller:
    """Cancels `cancel` once the run's stop flag appears; one light thread per background run."""

    def __init__(self, r: redis.Redis, run_id: str, cancel: CancelToken):
        self._r = r
        self._key = keys.stop(run_id)
        self._cancel = cancel
        self._done = threading.Event()
        threading.Thread(target=self._loop, name=f"run-stop-{run_id[:8]}", daemon=True).start()

    def close(self) -> None:
        self._done.set()

    def _loop(self) -> None:
        while not self._done.wait(POLL_SECS):
            try:
                if self._r.exists(self._key):
                    self._cancel.cancel("stopped")
                    return
            except redis.RedisError as exc:  # Redis hiccup: the run goes on; the next poll tries again
                log.warning("stop poll for a sub-agent run failed: %s", exc)
