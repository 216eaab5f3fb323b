"""Run the tool calls of one model response: in parallel where that is safe, capped.

Two calls that touch the same thing (a file) run in request order unless both are
read-only, so two edits of one file never lose an update and a read sees the writes
asked for before it. Everything else runs at once, at most `max_parallel` at a time.
Results are kept in request order.

On cancel no further call starts, and the batch waits a bounded time for the running
ones, which cancellation cuts short; a call still running after that is abandoned and
its late result is dropped (the turn's write gate keeps it from changing files).
"""

from __future__ import annotations

import threading
from typing import Callable, Protocol

from picobot.domain.cancel import CancelToken
from picobot.domain.messages import ToolCall
from picobot.tools.base import ToolResult


class BatchEvents(Protocol):
    def tool_started(self, call: ToolCall) -> None: ...

    def tool_finished(self, call: ToolCall, result: str, is_error: bool) -> None: ...


def ordering(footprints: list[frozenset[str]], read_only: list[bool]) -> list[list[int]]:
    """For each call, the earlier calls it must wait for."""
    return [[j for j in range(i) if footprints[i] & footprints[j] and not (read_only[i] and read_only[j])]
            for i in range(len(footprints))]


class ToolBatch:
    def __init__(self, calls: list[ToolCall], after: list[list[int]], execute: Callable[[ToolCall], ToolResult],
                 events: BatchEvents, max_parallel: int) -> None:
        self._calls = calls
        self._after = after
        self._execute = execute
        self._events = events
        self._max = max(1, max_parallel)
        self._cond = threading.Condition()
        self._waiting = list(range(len(calls)))
        self._running: set[int] = set()
        self._results: dict[int, ToolResult] = {}
        self._open = True  # False once the batch returned: late results are dropped

    def run(self, cancel: CancelToken, settle_secs: float) -> list[ToolResult | None]:
        """Results in request order; None for a call that did not finish because of a cancel."""
        unregister = cancel.on_cancel(self._wake)
        try:
            with self._cond:
                while not cancel.cancelled and (self._waiting or self._running):
                    self._start_ready()
                    self._cond.wait()  # a call finished, or the turn was cancelled
                if cancel.cancelled:
                    self._cond.wait_for(lambda: not self._running, settle_secs)
                self._open = False
                return [self._results.get(i) for i in range(len(self._calls))]
        finally:
            unregister()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _start_ready(self) -> None:
        for i in list(self._waiting):
            if len(self._running) >= self._max:
                return
            if all(j in self._results for j in self._after[i]):
                self._waiting.remove(i)
                self._running.add(i)
                call = self._calls[i]
                self._events.tool_started(call)
                threading.Thread(target=self._run_one, args=(i,), name=f"tool-{call.name}", daemon=True).start()

    def _run_one(self, i: int) -> None:
        call = self._calls[i]
        result = ToolResult(f"Tool {call.name} crashed.", is_error=True)  # kept only if execute raises
        try:
            result = self._execute(call)
        finally:
            self._finish(i, result)

    def _finish(self, i: int, result: ToolResult) -> None:
        with self._cond:
            self._running.discard(i)
            if self._open:
                self._results[i] = result
                self._events.tool_finished(self._calls[i], result.content, result.is_error)
            self._cond.notify_all()
