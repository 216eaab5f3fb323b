"""Cooperative cancellation shared by the agent loop, providers and tools."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from picobot.errors import TurnCancelled


class CancelToken:
    """A thread-safe flag with callbacks that run once, when it is set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []
        self.reason = ""

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "stopped") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn()
            except Exception:  # a failing callback must not stop the others
                pass

    def on_cancel(self, fn: Callable[[], object]) -> Callable[[], None]:  # fn's result is not used
        """Run fn when cancelled (now, if already); returns a function that unregisters it."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)

                def remove() -> None:
                    with self._lock:
                        if fn in self._callbacks:
                            self._callbacks.remove(fn)

                return remove
        fn()
        return lambda: None

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise TurnCancelled(self.reason or "stopped")


class TurnGate:
    """Lets a turn's side effects (file writes, messages) start only while the turn is live.

    The loop seals the gate when the turn ends, waiting for side effects already under
    way; after that, and as soon as the turn is cancelled, no new one may start. So a
    tool thread that outlives its turn, or ignores cancellation, still cannot change a
    file after the turn was committed.
    """

    def __init__(self, cancel: CancelToken) -> None:
        self._cancel = cancel
        self._cond = threading.Condition()
        self._active = 0
        self._sealed = False

    @contextmanager
    def side_effect(self) -> Iterator[None]:
        """Hold the gate open for one side effect; TurnCancelled if the turn is over."""
        with self._cond:
            if self._sealed or self._cancel.cancelled:
                raise TurnCancelled(self._cancel.reason or "the turn is over")
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def seal(self, timeout: float) -> bool:
        """Refuse new side effects; wait up to timeout for those under way. False if some still are."""
        with self._cond:
            self._sealed = True
            return self._cond.wait_for(lambda: self._active == 0, timeout)
