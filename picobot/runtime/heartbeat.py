"""Worker liveness in Redis, for health checks (Flower shows more)."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Callable

import redis

from picobot.runtime import keys

log = logging.getLogger("picobot.heartbeat")

INTERVAL_SECS = 2
TTL_SECS = 7  # a killed worker's turns are recovered this long after its death


def start_heartbeat(r: redis.Redis, name: str, active_turns: Callable[[], list[str]]) -> threading.Event:
    """Beat every few seconds (with the ids of the turns this worker runs) until the event is set."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                r.set(keys.WORKER_PREFIX + name, json.dumps({"pid": os.getpid(), "at": time.time(), "turns": active_turns()}), ex=TTL_SECS)
            except redis.RedisError as exc:
                log.warning("heartbeat failed: %s", exc)
            stop.wait(INTERVAL_SECS)
        try:
            r.delete(keys.WORKER_PREFIX + name)
        except redis.RedisError:
            pass

    threading.Thread(target=run, name="heartbeat", daemon=True).start()
    return stop


def worker_turns(r: redis.Redis, name: str) -> tuple[float, set[str]] | None:
    """(time of the last beat, turn ids it reported) for a live worker; None when it is gone."""
    raw = r.get(keys.WORKER_PREFIX + name) if name else None
    if not raw:
        return None
    data = json.loads(raw)
    return float(data.get("at", 0)), set(data.get("turns", []))
