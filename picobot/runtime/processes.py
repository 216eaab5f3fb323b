"""Plugin processes (`picobot_processes`): one runner for every long-running part a plugin brings.

`picobot run <plugin>:<process>[:<instance>]` (and `picobot up`, the Procfile, docker compose) runs
`serve` here: the plugin's `run(ctx)` until SIGTERM or Ctrl-C. A `run` that raises or returns while
not stopping is restarted after the one backoff (picobot/coord/backoff.py: 0.5-1 s, doubling to 60 s;
back to the start after a minute of running). Its state — running, restarting with the last error,
stopped — and the plugin's own `ctx.status(...)` are kept in Redis with a short TTL, refreshed while
it runs, and listed by `/health` (seed 001's plugin health monitor with automatic restart).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from picobot.coord import keys
from picobot.coord.backoff import backoff_delay

if TYPE_CHECKING:
    import redis

    from picobot.plugins.contributions import ProcessSpec
    from picobot.runtime.plugin_ports import PluginPorts

log = logging.getLogger("picobot.plugins")

STATUS_TTL_SECS = 30
REFRESH_SECS = 10.0
HEALTHY_RUN_SECS = 60.0  # a run this long counts as a start afresh: the backoff starts over


def parse_target(text: str) -> tuple[str, str, str | None]:
    """"plugin:process[:instance]" -> (plugin, process, instance or None); ValueError with the reason."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(f"{text[:80]!r} is not <plugin>:<process>[:<instance>]")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


@dataclass
class ProcessContext:
    """What a plugin's `run(ctx)` gets: its ports, the instance it runs for, the stop flag, a status line."""

    ports: "PluginPorts"
    instance: str
    stopping: threading.Event
    _report: Callable[[str, str], None] = field(repr=False, default=lambda state, detail: None)

    def status(self, state: str, detail: str = "") -> None:
        """Say how the process is (connected, connecting, login_required, …): shown in /health."""
        self._report(str(state)[:40], str(detail)[:300])


class StatusBoard:
    """The process's status in Redis: written on every change and refreshed while it runs."""

    def __init__(self, r: "redis.Redis", spec: "ProcessSpec", instance: str) -> None:
        self._r = r
        self._key = keys.plugin_process(spec.plugin, spec.name, instance)
        self._lock = threading.Lock()
        self.fields: dict[str, Any] = {"plugin": spec.plugin, "process": spec.name, "instance": instance,
                                       "host": socket.gethostname(), "pid": os.getpid(), "state": "starting",
                                       "detail": "", "restarts": 0, "last_error": None, "since": time.time()}

    def update(self, **changes: Any) -> None:
        with self._lock:
            self.fields.update(changes)
            self.fields["updated"] = time.time()
            text = json.dumps(self.fields, default=str)
        try:
            self._r.set(self._key, text, ex=STATUS_TTL_SECS)
        except Exception as exc:  # Redis away: the process goes on, the status comes back with it
            log.warning("plugin process status not written (%s)", type(exc).__name__)

    def refresh(self) -> None:
        self.update()


def serve(ports: "PluginPorts", spec: "ProcessSpec", instance: str, stopping: threading.Event | None = None,
          handle_signals: bool = True, rand: Callable[[], float] | None = None,
          status_redis: "redis.Redis | None" = None) -> int:
    """Run the process until stopped; 0 when stopped by a signal or `stopping`. Its status goes to
    `status_redis`, the process's own client (PicoBot's key, which an untrusted plugin's Redis may not write)."""
    stopping = stopping or threading.Event()
    if handle_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopping.set())
    board = StatusBoard(status_redis if status_redis is not None else ports.redis, spec, instance)
    ctx = ProcessContext(ports, instance, stopping,
                         lambda state, detail: board.update(state=state, detail=ports.redact(detail)))
    refresher = threading.Thread(target=_refresh, args=(board, stopping), name=f"{spec.plugin}-{spec.name}-status",
                                 daemon=True)
    refresher.start()
    attempt = 0
    who = f"{spec.plugin}:{spec.name}:{instance}"
    while not stopping.is_set():
        board.update(state="running", since=time.time())
        started = time.monotonic()
        error: str | None = None
        try:
            spec.run(ctx)
        except Exception as exc:
            error = ports.redact(f"{type(exc).__name__}: {exc}")[:500]
            log.error("plugin process %s failed: %s", who, error, exc_info=exc)
        if stopping.is_set():
            break
        if time.monotonic() - started >= HEALTHY_RUN_SECS:
            attempt = 0
        delay = backoff_delay(attempt, rand) if rand else backoff_delay(attempt)
        attempt += 1
        reason = error or "run() returned while not stopping"
        board.update(state="restarting", restarts=board.fields["restarts"] + 1, last_error=reason,
                     detail=f"restarting in {delay:.1f} s")
        log.warning("plugin process %s ended (%s); restarting in %.1f s", who, reason, delay)
        stopping.wait(delay)
    board.update(state="stopped", detail="")
    return 0


def _refresh(board: StatusBoard, stopping: threading.Event) -> None:
    while not stopping.wait(REFRESH_SECS):
        board.refresh()


def statuses(r: "redis.Redis") -> list[dict[str, Any]]:
    """Every plugin process seen in the last STATUS_TTL_SECS, sorted by plugin, process and instance."""
    found = []
    for key in r.scan_iter(match=keys.PROCESS_PREFIX + "*", count=200):
        raw = r.get(key)
        try:
            value = json.loads(raw) if raw else None
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return sorted(found, key=lambda v: (str(v.get("plugin")), str(v.get("process")), str(v.get("instance"))))


def health_entry(r: "redis.Redis") -> dict[str, Any] | None:
    """/health's `processes`: not ok while one is restarting; None when no plugin process runs."""
    found = statuses(r)
    if not found:
        return None
    troubled = [f"{p.get('plugin')}:{p.get('process')}:{p.get('instance')} ({p.get('last_error')})"
                for p in found if p.get("state") == "restarting"]
    detail = f"{len(found)} running" if not troubled else "restarting: " + ", ".join(troubled)[:300]
    return {"ok": not troubled, "detail": detail, "processes": found}
