"""Recover sessions whose wake-up was lost or whose worker died.

Runs every few seconds (beat). For each session with pending or claimed input and no
live lease: a `running` turn is declared interrupted (its input goes back to the queue,
or, after `max_turn_attempts`, is reported failed to the user), then a turn task is
enqueued. Nothing here depends on a pub/sub message or a broker delivery arriving.
"""

from __future__ import annotations

import logging
import time

from picobot.coord import keys
from picobot.runtime.attempts import give_back
from picobot.runtime.heartbeat import worker_turns
from picobot.runtime.lease import Lease, is_held
from picobot.runtime.services import Runtime
from picobot.runtime.session_messages import run_after
from picobot.storage import inbound, turns

log = logging.getLogger("picobot.sweeper")

DEAD_WORKER = "the worker running it stopped"
GRACE_SECS = 2.5  # a live worker re-takes a lost lease within ~1 s and re-beats within 2 s


def sweep(rt: Runtime) -> dict[str, int]:
    rt.redis.set(keys.SWEEP_LAST, repr(time.time()), ex=3600)
    # the plugins' lost work first (sub-agent runs of dead workers, whose background reports are
    # input for the check below; deliveries and channel events whose task was lost)
    rt.plugins.call("picobot_sweep", ports=rt)
    with rt.db.read() as s:
        candidates = [sid for sid in inbound.sessions_with_work(s.connection()) if not is_held(rt.redis, sid)]
        stale = [t.session_id for t in turns.running(s) if not is_held(rt.redis, t.session_id)]
    candidates = list(dict.fromkeys(candidates + stale))
    if not candidates:
        return {"woken": 0, "interrupted": 0}
    time.sleep(GRACE_SECS)
    woken = interrupted = 0
    for sid in candidates:
        lease = Lease(rt.redis, sid, rt.config.gateway.turn_lease_secs)
        if not lease.acquire():
            continue  # a worker holds it (again): nothing to recover
        try:
            interrupted += _interrupt_dead_turns(rt, sid)
        finally:
            lease.release()
        with rt.db.connect() as conn:
            if inbound.has_pending(conn, sid):
                rt.queue.enqueue_turn(sid)
                woken += 1
    if woken or interrupted:
        log.info("sweeper woke %d session(s), interrupted %d dead turn(s)", woken, interrupted)
    return {"woken": woken, "interrupted": interrupted}


def _still_running(rt: Runtime, worker: str, turn_id: str, started_at: float) -> bool:
    """The turn's worker is alive and says it runs the turn (or started it after its last beat)."""
    beat = worker_turns(rt.redis, worker)
    if beat is None:
        return False
    at, running = beat
    return turn_id in running or started_at > at - 1.0


def _interrupt_dead_turns(rt: Runtime, session_id: str) -> int:
    with rt.db.read() as s:
        running = [(t.id, t.worker, t.started_at) for t in turns.running(s, session_id)]
    count = 0
    for turn_id, worker, started_at in running:
        if _still_running(rt, worker, turn_id, started_at):
            continue  # a live worker re-takes a lease it lost (slow renewal, Redis restart)
        with rt.db.begin() as conn:
            if not turns.interrupt(conn, turn_id, DEAD_WORKER):
                continue  # it finished meanwhile
            count += 1
            after: list = []
            ended = give_back(conn, session_id, turn_id, rt.config.gateway.max_turn_attempts, DEAD_WORKER,
                              ports=rt, after=after)
        if ended:
            rt.publisher.publish(ended)
        run_after(after)
    return count
