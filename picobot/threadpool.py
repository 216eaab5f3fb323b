"""Reusable daemon threads for short blocking jobs (a model call's socket reads, a tool run), and
one watchdog thread for deadlines (a bounded drain of a model response).

Starting a thread per job costs a handshake with the new thread (the starter waits until it
runs); a turn used to start several. Idle threads wait for the next job and end after a minute
without one. Daemon threads, unlike concurrent.futures', never hold up a worker's exit on a read
that has not timed out yet.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

log = logging.getLogger("picobot.threadpool")

IDLE_SECS = 60.0


class DaemonPool:
    def __init__(self, name: str, idle_secs: float = IDLE_SECS) -> None:
        self.name = name
        self._idle_secs = idle_secs
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # idle threads not yet promised to a queued job
        self._count = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            start = self._idle == 0
            if start:
                self._count += 1
                number = self._count
            else:
                self._idle -= 1  # an idle thread will take it
        self._jobs.put(job)
        if start:
            threading.Thread(target=self._work, name=f"{self.name}-{number}", daemon=True).start()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle_secs)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # nobody is counting on this thread: let it go
                        self._idle -= 1
                        return
                continue  # a job was promised to an idle thread: stay and take it
            try:
                job()
            except BaseException:  # a job's failure must not kill the pool's thread
                log.exception("%s job failed", self.name)
            with self._lock:
                self._idle += 1


class Watchdog:
    """One daemon thread that runs callbacks at deadlines (cheaper than a Timer thread per call)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, Callable[[], None]]] = {}
        self._next_id = 0
        self._thread: threading.Thread | None = None
        # when the thread wakes next on its own (inf: waiting for a deadline; -inf: awake). An arm
        # whose deadline comes later needs no wake-up, which is a costly hand-off between threads.
        self._wakes_at = float("-inf")

    def arm(self, seconds: float, fn: Callable[[], None]) -> Callable[[], None]:
        """Run fn after `seconds` unless the returned function (disarm) is called first."""
        with self._cond:
            self._next_id += 1
            key = self._next_id
            at = time.monotonic() + seconds
            self._due[key] = (at, fn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)
                self._thread.start()
            if at < self._wakes_at:
                self._cond.notify()

        def disarm() -> None:
            with self._cond:
                self._due.pop(key, None)

        return disarm

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                fired = [k for k, (at, _) in self._due.items() if at <= now]
                callbacks = [self._due.pop(k)[1] for k in fired]
                if not callbacks:
                    nearest = min((at for at, _ in self._due.values()), default=float("inf"))
                    wait = max(min(nearest, now + 60) - now, 0.005)
                    self._wakes_at = now + wait if nearest != float("inf") else float("inf")
                    self._cond.wait(wait)
                    self._wakes_at = float("-inf")
                    continue
            for fn in callbacks:
                try:
                    fn()
                except Exception:  # a failing callback must not stop the watchdog
                    pass


_pools: dict[str, DaemonPool] = {}
_pools_lock = threading.Lock()


_watchdog = Watchdog()


def watchdog() -> Watchdog:
    """The process-wide watchdog."""
    return _watchdog


def pool(name: str) -> DaemonPool:
    """The process-wide pool of that name."""
    with _pools_lock:
        p = _pools.get(name)
        if p is None:
            p = _pools[name] = DaemonPool(name)
        return p
