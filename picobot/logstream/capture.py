"""The handler that copies log records to the Redis stream, without ever making logging wait or fail.

    record -> RedactingFilter -> CaptureHandler.emit: a small dict into a bounded in-memory buffer
                                                      (full: dropped and counted, never blocks)
    shipper thread, every FLUSH_SECS: buffer -> one pipelined XADD batch (MAXLEN ~ max_lines)

Redis down: the batch is dropped and counted, the thread backs off; when it gets through again it
writes one WARNING line saying how many lines were lost. Records logged by the shipper thread itself
(the Redis client's own logging) are ignored, so a failing Redis can never feed back into itself.
The thread is restarted after a fork, and flushed once more at exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from picobot.logstream import STREAM_KEY
from picobot.logstream.process import ProcessLabel, process_label

FLUSH_SECS = 0.25
BATCH = 500
MAX_BACKOFF_SECS = 30.0
CAPTURE_LOGGER = "picobot.logstream"
# Celery's per-task chatter ("Task … received", "… succeeded in", beat's "Sending due task"): two lines
# per sweep and per turn would fill the stream within hours; below WARNING they stay on stderr only.
CHATTY_LOGGERS = frozenset({"celery.worker.strategy", "celery.app.trace", "celery.beat"})


@dataclass(frozen=True)
class CaptureSettings:
    """How much is kept (config `logging.capture`, docs/CONFIGURATION.md)."""

    level: str = "INFO"
    max_lines: int = 10_000  # the stream's length (XADD MAXLEN ~)
    max_message_chars: int = 4_000
    buffer_lines: int = 5_000  # waiting in this process for the shipper; more are dropped


def _connect(url: str) -> Any:
    import redis

    # short timeouts of its own: a Redis that hangs costs the shipper a second, never a caller
    return redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2, decode_responses=True)


class CaptureHandler(logging.Handler):
    def __init__(self, redis_url: str, settings: CaptureSettings, label: ProcessLabel):
        super().__init__(level=settings.level)
        self.settings = settings
        self.label = label
        self.dropped = 0  # lines lost since the last report (buffer full or Redis unreachable)
        self.dropped_total = 0
        self.shipped = 0
        self._redis_url = redis_url
        self._buffer: deque[dict[str, str]] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = -1
        self._client: Any = None

    # --- the logging side: never blocks, never raises ---------------------------------------

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if threading.current_thread() is self._thread:
                return  # the shipper's own (or its Redis client's) records: never captured
            if record.levelno < logging.WARNING and record.name in CHATTY_LOGGERS:
                return
            if self._pid != os.getpid():
                self._start()
            if len(self._buffer) >= self.settings.buffer_lines:
                self._count_drop(1)
                return
            self._buffer.append(self._entry(record))
        except Exception:  # logging must never fail because of the copy
            self._count_drop(1)

    def _entry(self, record: logging.LogRecord) -> dict[str, str]:
        message = record.getMessage()  # the redacting filter has already run on this handler
        if record.exc_text:  # the traceback, redacted by the filter (which sets it whenever there is one)
            message = f"{message}\n{record.exc_text}"
        cap = self.settings.max_message_chars
        entry = {"ts": f"{record.created:.6f}", "level": record.levelname, "logger": record.name[:200],
                 "process": self.label.role, "name": self.label.name, "host": self.label.host,
                 "pid": str(os.getpid()), "msg": message[:cap]}
        if len(message) > cap:
            entry["truncated"] = "1"
        return entry

    def _count_drop(self, n: int) -> None:
        self.dropped += n
        self.dropped_total += n

    # --- the shipper thread --------------------------------------------------------------------

    def _start(self) -> None:
        lock = self.lock
        if lock is None:  # Handler.__init__ made it
            raise RuntimeError("capture handler without its lock")
        with lock:  # an RLock: emit() already holds it
            if self._pid == os.getpid():
                return
            # after a fork the parent's thread and connection do not exist here: start afresh
            self._pid = os.getpid()
            self._buffer = deque()
            self._client = None
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, name="picobot-log-shipper", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        backoff = 0.0
        while not self._stop.wait(backoff or FLUSH_SECS):
            backoff = 0.0 if self._ship_buffered() else min(MAX_BACKOFF_SECS, max(1.0, backoff * 2))

    def flush(self) -> None:
        """Ship what is buffered (logging.Handler's flush: no result; the lines wait for the next try)."""
        self._ship_buffered()

    def _ship_buffered(self) -> bool:
        """Ship what is buffered; False when Redis could not take it (the lines wait for the next try)."""
        if threading.current_thread() is not self._thread and self._thread is not None and self._thread.is_alive():
            return True  # only the shipper ships while it runs (close() ships the rest after it stops)
        while self._buffer:
            batch = [self._buffer.popleft() for _ in range(min(BATCH, len(self._buffer)))]
            if not self._ship(batch):
                self._buffer.extendleft(reversed(batch))  # kept; when the buffer fills, new lines are dropped
                # lines logged while the batch was out may have filled its place: never hold more than the
                # buffer's size, or lines logged once Redis is back would be dropped until the surplus drains
                while len(self._buffer) > self.settings.buffer_lines:
                    self._buffer.pop()
                    self._count_drop(1)
                return False
        return True

    def _ship(self, batch: list[dict[str, str]]) -> bool:
        reported = self.dropped
        entries = [self._drop_report(reported), *batch] if reported else batch
        try:
            if self._client is None:
                self._client = _connect(self._redis_url)
            pipe = self._client.pipeline(transaction=False)
            for entry in entries:
                pipe.xadd(STREAM_KEY, entry, maxlen=self.settings.max_lines, approximate=True)
            pipe.execute()
        except Exception:
            self._client = None  # reconnect next time (the old connection may be half-broken)
            return False
        self.dropped -= reported
        self.shipped += len(batch)
        return True

    def _drop_report(self, count: int) -> dict[str, str]:
        text = (f"{count} log line(s) of this process were not captured (Redis unreachable or the "
                f"buffer of {self.settings.buffer_lines} lines full); stderr has them all")
        record = logging.LogRecord(CAPTURE_LOGGER, logging.WARNING, __file__, 0, text, None, None)
        return self._entry(record)

    def retarget(self, redis_url: str) -> None:
        """Ship to another Redis from now on (a process that set up logging again with a new config)."""
        if redis_url != self._redis_url:
            self._redis_url, self._client = redis_url, None

    def close(self) -> None:
        """Stop the thread and ship what is left (at exit; a Redis that is down costs at most its timeouts)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and thread.is_alive():
            thread.join(timeout=3)
        self._thread = None
        if self._pid == os.getpid():
            self.flush()
        super().close()


def install_capture(config: Any, redacting_filter: logging.Filter) -> CaptureHandler | None:
    """Add the capture handler to the root logger (once per process; a second call refreshes its filter).

    `logging.capture.enabled` false: nothing is added. The filter is the process's RedactingFilter, so
    the stream only ever holds masked text.
    """
    from picobot.runtime.redis_url import resolve_redis_url

    root = logging.getLogger()
    for handler in root.handlers:
        if isinstance(handler, CaptureHandler):
            handler.filters = [redacting_filter]
            handler.retarget(resolve_redis_url(config))
            return handler
    capture = getattr(getattr(config, "logging", None), "capture", None)
    if capture is not None and not capture.enabled:
        return None
    settings = CaptureSettings() if capture is None else CaptureSettings(
        capture.level, capture.max_lines, capture.max_message_chars)
    from picobot.runtime.redis_url import resolve_redis_url

    handler = CaptureHandler(resolve_redis_url(config), settings, process_label(sys.argv, os.environ))
    handler.addFilter(redacting_filter)
    root.addHandler(handler)
    atexit.register(handler.close)
    return handler
