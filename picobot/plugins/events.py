"""The event bus (seed 001's): plugins `subscribe(event, fn)`; PicoBot publishes what happened.

    @hookimpl
    def picobot_subscriptions(subscribe):
        subscribe("model.round", lambda event: print(event["text"], event["tool_calls"]))

Events (each a plain dict, JSON values only):

    turn.started        session_id, turn_id, channel, chat_id, sender_id, agent
    model.round         the same, plus text, tool_calls ([{name, arguments}]), input_tokens, output_tokens
                        (seed 001's agent_llm_chain: every model response of a turn, in order)
    turn.ended          the same as turn.started, plus status (completed, cancelled, failed, interrupted)
    message.delivered   channel, chat_id, delivery_id, kind, session_id, turn_id (an outbox row a platform took)

Subscribers never slow a turn down: `publish` puts the event on a bounded queue and returns; one
dispatcher thread per process calls the subscribers in publish order. A subscriber that raises is
reported against its plugin (`/health`) and the others still get the event; when the queue is full
(a subscriber far too slow) new events are dropped and counted, never waited for.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger("picobot.plugins")

EVENTS = frozenset({"turn.started", "model.round", "turn.ended", "message.delivered"})
QUEUE_SIZE = 10_000


@dataclass(frozen=True)
class Subscription:
    plugin: str
    event: str
    function: Callable[[dict[str, Any]], Any]


def check_subscription(plugin: str, event: Any, function: Any) -> Subscription:
    from picobot.plugins.contributions import ContributionError

    if not isinstance(event, str) or event not in EVENTS:
        raise ContributionError(f"no event named {str(event)[:80]!r} (events: {', '.join(sorted(EVENTS))})")
    if not callable(function):
        raise ContributionError(f"subscription to {event}: not callable")
    return Subscription(plugin, event, function)


class EventBus:
    def __init__(self, subscriptions: list[Subscription], report: Callable[[str, str, str], None],
                 size: int = QUEUE_SIZE) -> None:
        self._by_event: dict[str, list[Subscription]] = {}
        for sub in subscriptions:
            self._by_event.setdefault(sub.event, []).append(sub)
        self._report = report
        self._queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(size)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.dropped = 0

    def has(self, event: str) -> bool:
        return event in self._by_event

    def publish(self, event: str, payload: dict[str, Any]) -> None:
        if event not in self._by_event:
            return
        self._start()
        try:
            self._queue.put_nowait((event, payload))
        except queue.Full:
            self.dropped += 1
            if self.dropped in (1, 100) or self.dropped % 10_000 == 0:
                log.warning("plugin events: the subscribers are behind; %d event(s) dropped", self.dropped)

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every event published so far was handed to its subscribers (tests, shutdown)."""
        done = threading.Event()
        if self._thread is None:
            return True
        try:
            self._queue.put(("", {"_done": done}), timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self) -> None:
        if self._thread is not None:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._dispatch, name="plugin-events", daemon=True)
                    self._thread.start()

    def _dispatch(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            event, payload = item
            if not event:
                payload["_done"].set()
                continue
            for sub in self._by_event.get(event, ()):
                try:
                    sub.function(dict(payload))
                except Exception as exc:
                    self._report(sub.plugin, "picobot_subscriptions", f"{event}: {type(exc).__name__}: {exc}"[:300])
