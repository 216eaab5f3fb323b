"""/stop across processes: a Redis flag (polled) plus a pub/sub poke (instant)."""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict

import redis

from picobot.domain.cancel import CancelToken
from picobot.runtime import keys

log = logging.getLogger("picobot.control")


def redis_now(r: redis.Redis) -> float:
    sec, usec = r.time()
    return sec + usec / 1e6


def request_stop(r: redis.Redis, session_id: str) -> None:
    """Ask whichever worker runs this session's turn to stop it."""
    r.set(keys.stop(session_id), repr(redis_now(r)), ex=3600)
    r.publish(keys.CONTROL_CHANNEL, json.dumps({"action": "stop", "session_id": session_id}))


def stop_requested_since(r: redis.Redis, session_id: str, since: float) -> bool:
    value = r.get(keys.stop(session_id))
    return value is not None and float(value) >= since


class StopWatcher:
    """One per worker process: cancels the local turns of a session when /stop arrives."""

    def __init__(self, r: redis.Redis):
        self.r = r
        self._tokens: dict[str, set[CancelToken]] = defaultdict(set)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def register(self, session_id: str, token: CancelToken) -> None:
        with self._lock:
            self._tokens[session_id].add(token)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="stop-watcher", daemon=True)
                self._thread.start()

    def unregister(self, session_id: str, token: CancelToken) -> None:
        with self._lock:
            tokens = self._tokens.get(session_id)
            if tokens is not None:
                tokens.discard(token)
                if not tokens:
                    del self._tokens[session_id]

    def cancel_local(self, session_id: str) -> None:
        with self._lock:
            tokens = list(self._tokens.get(session_id, ()))
        for token in tokens:
            token.cancel("stopped")

    def _run(self) -> None:
        while True:
            try:
                pubsub = self.r.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(keys.CONTROL_CHANNEL)
                for message in pubsub.listen():
                    data = json.loads(message["data"])
                    if data.get("action") == "stop":
                        self.cancel_local(data.get("session_id", ""))
            except Exception as exc:  # Redis restarts: reconnect; the polled flag covers the gap
                log.warning("stop watcher reconnecting: %s", exc)
                threading.Event().wait(1.0)
