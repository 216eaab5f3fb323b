"""Worker liveness in Redis, for health checks (Flower shows more)."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Callable

import redis

from picobot.coord import keys

log = logging.getLogger("picobot.heartbeat")

INTERVAL_SECS = 2
TTL_SECS = 7  # a killed worker's turns are recovered this long after its death


def start_heartbeat(r: redis.Redis, name: str, active_turns: Callable[[], list[str]],
                    facts: dict[str, Any] | None = None,
                    on_beat: Callable[[], None] | None = None,
                    live_facts: Callable[[], dict[str, Any]] | None = None) -> threading.Event:
    """Beat every few seconds (with the ids of the turns this worker runs, and `facts` such as its
    sandbox status for /health) until the event is set. `live_facts` are read at each beat (the
    plugins' states); `on_beat` publishes more with each beat (the MCP servers' states); a failure of
    either is logged and never stops the beat."""
    stop = threading.Event()
    fixed = dict(facts or {})

    def run() -> None:
        while not stop.is_set():
            live: dict[str, Any] = {}
            if live_facts is not None:
                _guarded(lambda: live.update(live_facts()))
            beat = {**fixed, **live, "pid": os.getpid(), "at": time.time(), "turns": active_turns()}
            try:
                r.set(keys.WORKER_PREFIX + name, json.dumps(beat), ex=TTL_SECS)
            except redis.RedisError as exc:
                log.warning("heartbeat failed: %s", exc)
            if on_beat is not None:
                _guarded(on_beat)
            stop.wait(INTERVAL_SECS)
        try:
            r.delete(keys.WORKER_PREFIX + name)
        except redis.RedisError:
            pass

    threading.Thread(target=run, name="heartbeat", daemon=True).start()
    return stop


def _guarded(fn: Callable[[], None]) -> None:
    try:
        fn()
    except redis.RedisError as exc:
        log.warning("heartbeat publishing failed: %s", exc)
    except Exception:  # a bug in a publisher must not stop the liveness beat
        log.exception("heartbeat publisher failed")


def worker_turns(r: redis.Redis, name: str) -> tuple[float, set[str]] | None:
    """(time of the last beat, turn ids it reported) for a live worker; None when it is gone."""
    raw = r.get(keys.WORKER_PREFIX + name) if name else None
    if not raw:
        return None
    data = json.loads(raw)
    return float(data.get("at", 0)), set(data.get("turns", []))


def worker_facts(r: redis.Redis, key: str) -> dict[str, Any]:
    """`key` of every live worker's heartbeat, by worker name (workers that did not report it are left out)."""
    found: dict[str, Any] = {}
    for redis_key in r.scan_iter(match=keys.WORKER_PREFIX + "*", count=100):
        raw = r.get(redis_key)
        try:
            value = json.loads(raw).get(key) if raw else None
        except (ValueError, AttributeError):
            continue
        if value is not None:
            name = redis_key.decode() if isinstance(redis_key, bytes) else str(redis_key)
            found[name[len(keys.WORKER_PREFIX):]] = value
    return found
