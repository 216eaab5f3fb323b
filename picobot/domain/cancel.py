"""Cooperative cancellation shared by the agent loop, providers and tools."""

from __future__ import annotations

import threading
from typing import Callable

from picobot.errors import TurnCancelled


class CancelToken:
    """A thread-safe flag with callbacks that run once, when it is set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
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

    def on_cancel(self, fn: Callable[[], None]) -> Callable[[], None]:
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
