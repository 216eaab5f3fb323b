"""Watching the turns a worker runs: lease renewal and /stop, one thread per process.

`/stop` names the turns it stops: the command reads the session's running turns in the same
transaction that clears its pending input, so a turn claimed a moment earlier is stopped and a
later one has nothing left to run. Each stopped turn gets a Redis flag (polled, so a missed
message or a restarted subscriber loses nothing) and a pub/sub poke (instant).

The supervisor thread renews every lease of its process's turns and polls their stop flags in one
pipelined round trip per tick, instead of a thread and its own Redis calls per turn.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field

import redis

from picobot.domain.cancel import CancelToken
from picobot.coord import keys
from picobot.runtime.lease import Lease

log = logging.getLogger("picobot.control")

TICK_SECS = 0.25
STOP_FLAG_SECS = 3600
LOST_AFTER_FAILED_RENEWALS = 3  # another holder for ~3 renewals: not a passing sweeper check
UNWATCH_WAIT_SECS = 2.0


def request_stop(r: redis.Redis, turn_ids: list[str]) -> None:
    """Ask whichever workers run these turns to stop them."""
    if not turn_ids:
        return
    pipe = r.pipeline(transaction=False)
    for turn_id in turn_ids:
        pipe.set(keys.stop(turn_id), "1", ex=STOP_FLAG_SECS)
    pipe.publish(keys.CONTROL_CHANNEL, json.dumps({"action": "stop", "turn_ids": turn_ids}))
    pipe.execute()


@dataclass
class Watched:
    turn_id: str
    lease: Lease
    cancel: CancelToken
    lost: bool = False
    done: bool = False  # unwatched: the turn has ended, its lease is being released
    failures: int = 0
    renewed_at: float = field(default=0.0)


class TurnSupervisor:
    """One per worker process: keeps the leases of its running turns and cancels them on /stop."""

    def __init__(self, r: redis.Redis, lease_secs: float):
        self.r = r
        self.renew_every = min(1.0, lease_secs / 3)
        self._turns: dict[str, Watched] = {}
        self._lock = threading.Lock()
        # Held across a tick's round trip. unwatch() takes it too, so once it returns no tick can
        # still renew that turn's lease: a renewal landing after the release would re-take the
        # lease (renewal re-takes a lease Redis lost) and hold the session for a whole TTL.
        self._tick_lock = threading.Lock()
        self._threads_started = False
        self._closed = threading.Event()

    def close(self) -> None:
        """End the supervisor's threads (within about a second)."""
        self._closed.set()

    def watch(self, turn_id: str, lease: Lease, cancel: CancelToken) -> Watched:
        watched = Watched(turn_id, lease, cancel)
        with self._lock:
            self._turns[turn_id] = watched
            if not self._threads_started:
                self._threads_started = True
                threading.Thread(target=self._poll_loop, name="turn-supervisor", daemon=True).start()
                threading.Thread(target=self._listen_loop, name="stop-listener", daemon=True).start()
        return watched

    def unwatch(self, turn_id: str) -> None:
        """Stop watching the turn; call it before releasing the turn's lease.

        Waits for a tick in flight (a round trip), so no renewal of this turn lands after the
        release. If Redis hangs that tick, it waits at most UNWATCH_WAIT_SECS and marks the turn
        done: the late tick then gives back a lease its renewal re-took."""
        got = self._tick_lock.acquire(timeout=UNWATCH_WAIT_SECS)
        try:
            with self._lock:
                watched = self._turns.pop(turn_id, None)
                if watched is not None:
                    watched.done = True
        finally:
            if got:
                self._tick_lock.release()

    def cancel_local(self, turn_ids: list[str]) -> None:
        with self._lock:
            found = [self._turns[t] for t in turn_ids if t in self._turns]
        for watched in found:
            watched.cancel.cancel("stopped")

    # --- the polling thread -----------------------------------------------------------

    def _poll_loop(self) -> None:
        while not self._closed.wait(TICK_SECS):
            with self._tick_lock:
                with self._lock:
                    watched = list(self._turns.values())
                if not watched:
                    continue
                try:
                    self._tick(watched, time.monotonic())
                except Exception as exc:  # Redis hiccup: turns go on; the next tick tries again
                    log.warning("turn supervisor: %s", exc)

    def _tick(self, watched: list[Watched], now: float) -> None:
        due = [w for w in watched if now - w.renewed_at >= self.renew_every]
        pipe = self.r.pipeline(transaction=False)
        pipe.mget([keys.stop(w.turn_id) for w in watched])
        for w in due:
            w.lease.renew_in(pipe)
        results = pipe.execute()
        for w, flag in zip(watched, results[0]):
            if flag is not None:
                w.cancel.cancel("stopped")
        for w, renewed in zip(due, results[1:]):
            if w.done:  # unwatched while this tick was stuck: do not keep a lease it re-took
                if renewed:
                    w.lease.release()
                continue
            w.renewed_at = now
            w.failures = 0 if renewed else w.failures + 1
            if w.failures >= LOST_AFTER_FAILED_RENEWALS and not w.lost:
                w.lost = True
                w.cancel.cancel("lease lost")

    # --- the pub/sub thread -----------------------------------------------------------

    def _listen_loop(self) -> None:
        while not self._closed.is_set():
            pubsub = self.r.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(keys.CONTROL_CHANNEL)
                while not self._closed.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is None:
                        continue
                    data = json.loads(message["data"])
                    if data.get("action") == "stop" and isinstance(data.get("turn_ids"), list):
                        self.cancel_local([str(t) for t in data["turn_ids"]])
            except Exception as exc:  # Redis restarts: reconnect; the polled flags cover the gap
                log.warning("stop listener reconnecting: %s", exc)
                self._closed.wait(1.0)
            finally:
                try:
                    pubsub.close()
                except Exception:
                    pass
