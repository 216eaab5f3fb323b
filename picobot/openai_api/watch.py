"""One pub/sub subscription per web process, handing turn events to the /v1 requests waiting on them.

Events are progress, not the record (as for /ws, web/hub.py): a request that misses some — Redis
restarted, or the subscription was still being made — reads its answer from SQL all the same.
"""

from __future__ import annotations

import json
import queue
import threading
from collections import defaultdict
from typing import Any

import redis

from picobot.coord import keys
from picobot.runtime.publisher import follow_events

PROBE_SESSION = "openai_api:probe"  # published until it comes back: then the subscription is live
READY_WAIT_SECS = 2.0


class TurnWatch:
    def __init__(self, r: redis.Redis):
        self.r = r
        self._queues: dict[str, set[queue.Queue[dict[str, Any]]]] = defaultdict(set)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    def subscribe(self, session_id: str) -> "queue.Queue[dict[str, Any]]":
        """A queue that gets every event of the session from now on (once the subscription is live)."""
        q: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            self._queues[session_id].add(q)
            self._ensure_thread()
        self._wait_ready()
        return q

    def unsubscribe(self, session_id: str, q: "queue.Queue[dict[str, Any]]") -> None:
        with self._lock:
            waiting = self._queues.get(session_id)
            if waiting is not None:
                waiting.discard(q)
                if not waiting:
                    del self._queues[session_id]

    def close(self) -> None:
        self._stop.set()

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=follow_events, name="openai-api-events",
                                            args=(self.r, self._stop, self._dispatch, "openai api events"),
                                            daemon=True)
            self._thread.start()

    def _wait_ready(self) -> None:
        """Probe until our own message comes back; on a Redis outage give up quickly (SQL decides)."""
        deadline = READY_WAIT_SECS
        while not self._ready.is_set() and deadline > 0:
            try:
                self.r.publish(keys.events(PROBE_SESSION), '{"type": "probe"}')
            except redis.RedisError:
                return
            self._ready.wait(0.05)
            deadline -= 0.05

    def _dispatch(self, data: Any) -> None:
        try:
            frame = json.loads(data)
        except (TypeError, ValueError):
            return
        if not isinstance(frame, dict):
            return
        if frame.get("type") == "probe":
            self._ready.set()
            return
        with self._lock:
            targets = list(self._queues.get(frame.get("session_id", ""), ()))
        for q in targets:
            q.put(frame)
