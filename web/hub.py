"""One Redis subscriber per web process, fanning turn events out to local sockets."""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import redis

from picobot.runtime import keys

log = logging.getLogger("picobot.web.hub")


class Outbox:
    """A socket's pending frames; turn snapshots coalesce latest-wins for slow readers."""

    def __init__(self, send: Callable[[str], None]):
        self._send = send
        self._lock = threading.Lock()
        self._queue: deque[dict[str, Any]] = deque()
        self._busy = False
        self.closed = False

    def put(self, frame: dict[str, Any]) -> bool:
        """Queue a frame; True if the caller should schedule a drain."""
        with self._lock:
            if self.closed:
                return False
            if frame.get("type") == "turn_updated":
                for i, queued in enumerate(self._queue):
                    if queued.get("type") == "turn_updated" and queued.get("turn_id") == frame.get("turn_id"):
                        if queued.get("revision", 0) <= frame.get("revision", 0):
                            self._queue[i] = frame
                        return False
            self._queue.append(frame)
            if self._busy:
                return False
            self._busy = True
            return True

    def drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue or self.closed:
                    self._busy = False
                    return
                frame = self._queue.popleft()
            try:
                self._send(json.dumps(frame, ensure_ascii=False, default=str))
            except Exception:
                with self._lock:
                    self.closed = True
                    self._busy = False
                return


class EventHub:
    def __init__(self, r: redis.Redis, send_threads: int = 8):
        self.r = r
        self._watchers: dict[str, set[Outbox]] = defaultdict(set)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=send_threads, thread_name_prefix="ws-send")
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def watch(self, session_id: str, outbox: Outbox) -> None:
        with self._lock:
            self._watchers[session_id].add(outbox)
            self._ensure_thread()

    def unwatch(self, session_id: str, outbox: Outbox) -> None:
        with self._lock:
            watchers = self._watchers.get(session_id)
            if watchers is not None:
                watchers.discard(outbox)
                if not watchers:
                    del self._watchers[session_id]

    def deliver(self, outbox: Outbox, frame: dict[str, Any]) -> None:
        if outbox.put(frame):
            self._pool.submit(outbox.drain)

    def connections(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._watchers.values())

    def close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="event-hub", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pubsub = self.r.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.psubscribe(keys.EVENTS_PATTERN)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self._dispatch(message)
            except Exception as exc:  # Redis restarted: resubscribe; clients catch up from history
                log.warning("event hub reconnecting: %s", exc)
                self._stop.wait(0.5)
            finally:
                try:
                    pubsub.close()
                except Exception:
                    pass

    def _dispatch(self, message: dict[str, Any]) -> None:
        try:
            frame = json.loads(message["data"])
        except (TypeError, ValueError):
            return
        with self._lock:
            targets = list(self._watchers.get(frame.get("session_id", ""), ()))
        for outbox in targets:
            self.deliver(outbox, frame)
