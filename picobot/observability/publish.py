"""A worker's metric samples through Redis: published with its heartbeat, read by the gateway.

Each worker process writes one key, `picobot:metrics:<process>` (JSON, TTL a few publish intervals),
and its name with the time into the sorted set `picobot:metrics:index`. The gateway reads the index
(names published recently), fetches those keys in one MGET and drops index entries that went stale.
A Redis flush loses nothing for long: the next publish writes both again. Publishing runs on the
heartbeat thread, never in a turn.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from picobot.observability import keys

STALE_AFTER = 3  # publish intervals without news: that process is gone


@dataclass(frozen=True)
class Samples:
    """One process's published samples."""

    process: str
    host: str
    at: float
    families: list[dict[str, Any]]


def snapshot(registry: CollectorRegistry) -> list[dict[str, Any]]:
    """The registry's families as JSON-able dicts (the `_created` samples left out: noise for a scrape)."""
    out = []
    for family in registry.collect():
        samples = [[s.name, s.labels, s.value] for s in family.samples if not s.name.endswith("_created")]
        if samples:
            out.append({"name": family.name, "type": family.type, "help": family.documentation,
                        "samples": samples})
    return out


def publish(r: Any, process: str, registry: CollectorRegistry, interval: float) -> None:
    """Write this process's samples; raises redis errors (the heartbeat logs them and goes on)."""
    now = time.time()
    body = json.dumps({"process": process, "host": socket.gethostname(), "at": now, "families": snapshot(registry)})
    pipe = r.pipeline(transaction=False)
    pipe.set(keys.METRICS_PREFIX + process, body, ex=max(5, int(interval * STALE_AFTER) + 1))
    pipe.zadd(keys.METRICS_INDEX, {process: now})
    pipe.execute()


def read_all(r: Any, interval: float) -> list[Samples]:
    """Every live process's latest samples (two round trips; stale index entries are dropped)."""
    cutoff = time.time() - interval * STALE_AFTER
    pipe = r.pipeline(transaction=False)
    pipe.zremrangebyscore(keys.METRICS_INDEX, "-inf", cutoff)
    pipe.zrange(keys.METRICS_INDEX, 0, -1)
    names = pipe.execute()[1]
    if not names:
        return []
    found = []
    for raw in r.mget([keys.METRICS_PREFIX + _text(n) for n in names]):
        parsed = _parse(raw)
        if parsed is not None:
            found.append(parsed)
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _parse(raw: Any) -> Samples | None:
    """A published body, or None when it is missing or not what publish() writes (never trusted blindly)."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
        families = [f for f in data["families"] if _family_ok(f)]
        return Samples(str(data["process"])[:200], str(data.get("host", ""))[:200], float(data["at"]), families)
    except (ValueError, KeyError, TypeError):
        return None


def _family_ok(f: Any) -> bool:
    return (isinstance(f, dict) and isinstance(f.get("name"), str) and f.get("type") in _TYPES
            and isinstance(f.get("samples"), list))


_TYPES = {"counter", "gauge", "histogram", "summary", "info", "stateset", "unknown", "gaugehistogram"}
