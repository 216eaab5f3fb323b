"""Group commit: the intake writes of many threads, committed together by one writer thread.

Every acknowledged input is a committed row, and a commit takes the database's write lock (SQLite has
one; PostgreSQL flushes its log). At a few hundred events a second, one transaction per request means
a queue of request threads each taking the lock in turn while the workers' writes come in between.
Here a request hands its write (a function of a Connection) to the process's writer thread and waits;
the writer takes everything waiting, runs it in one transaction, commits once and answers them all.
When a write raises, the transaction is rolled back and each write of the batch runs again in a
transaction of its own, so only the failing one fails (its caller gets the exception): a write is a
function of the connection that does only database work, as it may run twice. A caller returns only
after the commit: what it acknowledges is durable, as before.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from contextlib import AbstractContextManager
from typing import Any, Callable, Generic, TypeVar, cast

from sqlalchemy import Connection


T = TypeVar("T")

MAX_BATCH = 128  # writes in one transaction at most (a burst is split, the lock is let go in between)


class _Write(Generic[T]):
    __slots__ = ("fn", "done", "result", "error")

    def __init__(self, fn: Callable[[Connection], T]):
        self.fn = fn
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None


class GroupCommit:
    """One per Database; `run(fn)` is `with db.begin() as conn: return fn(conn)`, batched."""

    def __init__(self, begin: Callable[[], AbstractContextManager[Connection]], name: str = "picobot-group-commit"):
        self._begin = begin
        self._name = name
        self._queue: deque[_Write[Any]] = deque()
        self._wake = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.batches = 0  # transactions committed (for tests and benchmarks: writes / batches)
        self.writes = 0

    def run(self, fn: Callable[[Connection], T]) -> T:
        """fn(conn) in a transaction shared with other threads' writes; returns once it is committed."""
        item: _Write[T] = _Write(fn)
        with self._wake:
            self._ensure_thread()
            self._queue.append(item)
            self._wake.notify()
        item.done.wait()
        if item.error is not None:
            raise item.error
        return cast(T, item.result)

    def _ensure_thread(self) -> None:
        if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
            self._pid = os.getpid()  # a forked child has the object, not the thread
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._queue:
                    self._wake.wait()
                batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
            self._commit(batch)

    def _commit(self, batch: list[_Write[Any]]) -> None:
        try:
            with self._begin() as conn:
                for item in batch:
                    item.result = item.fn(conn)
        except BaseException as exc:
            if len(batch) == 1:  # its own error, or the commit's: nothing of it is stored
                batch[0].error = exc
            else:  # one write failed (or the commit): each runs again alone, so only the failing one fails
                for item in batch:
                    self._commit([item])
                return
        else:
            self.batches += 1
            self.writes += len(batch)
        for item in batch:
            item.done.set()
