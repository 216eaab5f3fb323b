"""Recover sessions whose wake-up was lost or whose worker died.

Runs every few seconds (beat). For each session with pending or claimed input and no
live lease: a `running` turn is declared interrupted (its input goes back to the queue,
or, after `max_turn_attempts`, is reported failed to the user), then a turn task is
enqueued. Nothing here depends on a pub/sub message or a broker delivery arriving.
"""

from __future__ import annotations

import logging
import time

from picobot.domain.messages import MARKER_TURN_ERROR, ChatMessage
from picobot.runtime import keys
from picobot.runtime.heartbeat import worker_turns
from picobot.runtime.lease import Lease, is_held
from picobot.runtime.services import Runtime
from picobot.storage import inbound, messages, turns
from picobot.storage.models import INBOUND_FAILED, TURN_INTERRUPTED

log = logging.getLogger("picobot.sweeper")

GRACE_SECS = 2.5  # a live worker re-takes a lost lease within ~1 s and re-beats within 2 s


def sweep(rt: Runtime) -> dict[str, int]:
    rt.redis.set(keys.SWEEP_LAST, repr(time.time()), ex=3600)
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
    max_attempts = rt.config.gateway.max_turn_attempts
    count = 0
    failed: list[tuple[str, list[int]]] = []
    with rt.db.write() as s:
        for turn in turns.running(s, session_id):
            if _still_running(rt, turn.worker, turn.id, turn.started_at):
                continue  # a live worker re-takes a lease it lost (slow renewal, Redis restart)
            count += 1
            turn.status = TURN_INTERRUPTED
            turn.finished_at = time.time()
            turn.error = "the worker running this turn stopped"
            conn = s.connection()
            rows = inbound.claimed_by(conn, turn.id)
            if rows and max(r.attempts for r in rows) >= max_attempts:
                inbound.set_status(conn, [r.id for r in rows], INBOUND_FAILED)
                note = (f"⚠ Your message could not be answered: the worker running it stopped "
                        f"{max(r.attempts for r in rows)} time(s). Please send it again.")
                messages.append(conn, session_id, turn.id, [ChatMessage(role="user", content=r.content) for r in rows]
                                + [ChatMessage(role="assistant", content=note, marker=MARKER_TURN_ERROR)])
                failed.append((turn.id, [r.seq for r in rows]))
            else:
                inbound.release_claims(conn, turn.id)
    for turn_id, seqs in failed:
        rt.publisher.publish({
            "type": "turn_completed", "session_id": session_id, "turn_id": turn_id, "status": "failed",
            "final_text": "", "error": "The worker running this turn stopped; the message was not answered.",
            "inbound_seqs": seqs, "usage": {"input_tokens": 0, "output_tokens": 0},
        })
    return count
