"""Reusable daemon threads for short blocking jobs (a model call's socket reads, a tool run).

Starting a thread per job costs a handshake with the new thread (the starter waits until it
runs); a turn used to start several. Idle threads wait for the next job and end after a minute
without one. Daemon threads, unlike concurrent.futures', never hold up a worker's exit on a read
that has not timed out yet.
"""

from __future__ import annotations

import logging
import queue
import threading
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


_pools: dict[str, DaemonPool] = {}
_pools_lock = threading.Lock()


def pool(name: str) -> DaemonPool:
    """The process-wide pool of that name."""
    with _pools_lock:
        p = _pools.get(name)
        if p is None:
            p = _pools[name] = DaemonPool(name)
        return p
