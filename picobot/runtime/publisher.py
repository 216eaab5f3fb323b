"""Turn events onto Redis pub/sub: snapshots throttled latest-wins, terminal events at once."""

from __future__ import annotations

import heapq
import json
import logging
import threading
import time
from typing import Any, Callable

import redis

from picobot.domain.text import repair_text
from picobot.coord import keys

log = logging.getLogger("picobot.events")

SNAPSHOT_TTL_SECS = 3600
FINISHED_WINDOW_SECS = 300  # a throttled snapshot still queued this long after its turn ended is dropped


class EventPublisher:
    """One per process. Snapshots of a turn go out at most once per interval; the last one always does."""

    def __init__(self, r: redis.Redis, interval_ms: int = 50):
        self.r = r
        self.interval = max(0.0, interval_ms / 1000)
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, str]] = []  # (due time, tiebreak, turn key)
        self._pending: dict[str, Callable[[], dict[str, Any]]] = {}
        self._last: dict[str, float] = {}
        self._counter = 0
        self._thread: threading.Thread | None = None
        # Serialises a turn's last snapshot against its terminal event, so nothing stale follows it.
        self._publish_lock = threading.Lock()
        self._finished: dict[str, float] = {}

    def publish(self, *events: dict[str, Any]) -> None:
        """Publish events to the watchers of their sessions now, in order, in one round trip."""
        try:
            pipe = self.r.pipeline(transaction=False)
            for event in events:
                sid = event["session_id"]
                # a lone surrogate (from a model's reply, say) would make Redis refuse the whole batch
                data = repair_text(json.dumps(event, ensure_ascii=False, default=str))
                if event.get("type") == "turn_updated":
                    pipe.set(keys.snapshot(sid), data, ex=SNAPSHOT_TTL_SECS)
                elif event.get("type") == "turn_completed":
                    pipe.delete(keys.snapshot(sid))
                pipe.publish(keys.events(sid), data)
            pipe.execute()
        except redis.RedisError as exc:  # watchers catch up from SQL; progress never depends on this
            log.warning("could not publish %s: %s", ", ".join(str(e.get("type")) for e in events), exc)

    def snapshot_listener(self, turn_key: str, snapshot: Callable[[], dict[str, Any]]) -> Callable[[], None]:
        """A TurnController listener: schedules a throttled publish of the latest snapshot."""

        def notify() -> None:
            with self._cond:
                if turn_key in self._pending:
                    return  # already due; it will carry the newest revision
                self._pending[turn_key] = snapshot
                # A turn's first snapshot waits one interval too: a turn that ends sooner (a quick
                # answer) goes out as its final snapshot alone, one publish and relay fewer.
                last = self._last.get(turn_key)
                due = time.monotonic() + self.interval if last is None else max(time.monotonic(), last + self.interval)
                self._counter += 1
                heapq.heappush(self._due, (due, self._counter, turn_key))
                self._ensure_thread()
                self._cond.notify()

        return notify

    def finish(self, turn_key: str, final_event: dict[str, Any], last_snapshot: dict[str, Any] | None = None) -> None:
        """Publish the turn's final snapshot and then its terminal event; later snapshots are dropped."""
        with self._cond:
            self._pending.pop(turn_key, None)
            self._last.pop(turn_key, None)
        with self._publish_lock:
            now = time.monotonic()
            while self._finished:  # oldest first (insertion order): drop what is past the window
                oldest = next(iter(self._finished))
                if now - self._finished[oldest] < FINISHED_WINDOW_SECS:
                    break
                del self._finished[oldest]
            self._finished[turn_key] = now
            self.publish(*([last_snapshot] if last_snapshot is not None else []), final_event)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="snapshot-publisher", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                due, _, turn_key = self._due[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._due)
                snapshot = self._pending.pop(turn_key, None)
                if snapshot is None:
                    continue
                self._last[turn_key] = time.monotonic()
            with self._publish_lock:
                if turn_key not in self._finished:
                    self.publish(snapshot())


def follow_events(r: redis.Redis, stop: threading.Event, on_data: Callable[[Any], None], name: str) -> None:
    """Call on_data(payload) for every turn event on pub/sub until stop is set.

    A lost connection (Redis restarted) is logged and the subscription made again: what was
    published meanwhile is missed, so callers treat events as progress, not as the record.
    """
    while not stop.is_set():
        pubsub = r.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.psubscribe(keys.EVENTS_PATTERN)
            while not stop.is_set():
                message = pubsub.get_message(timeout=1.0)
                if message is not None:
                    on_data(message.get("data"))
        except Exception as exc:
            log.warning("%s reconnecting: %s", name, exc)
            stop.wait(0.5)
        finally:
            try:
                pubsub.close()
            except Exception:
                pass
