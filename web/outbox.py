"""A socket's outgoing frames: bounded, written without blocking, and dropped when the reader stalls.

Sends run on a small shared thread pool, so no send may block: a pool thread writes what the
socket takes at once and leaves the rest for `WriteWaiter`, which resumes the socket when the
kernel has room again. A socket whose queue overflows, or that takes nothing for
`stall_secs`, is dropped with close code 1013; its client reconnects and catches up from `ready`.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from functools import partial
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Protocol

log = logging.getLogger("picobot.web.ws")

TRY_AGAIN_LATER = 1013
PING = "\x00ping"  # a queued WebSocket ping: it goes out between frames, never inside one


@dataclass(frozen=True)
class OutboxLimits:
    frames: int = 256
    bytes: int = 8 * 1024 * 1024
    stall_secs: float = 10.0


class Transport(Protocol):
    def encode(self, text: str) -> bytes: ...
    def encode_close(self, code: int, reason: str) -> bytes: ...
    def send_nowait(self, data: memoryview) -> int: ...
    def encode_ping(self) -> bytes: ...
    def fileno(self) -> int: ...
    def abort(self, graceful: bool = False) -> None: ...


class WsTransport:
    """A simple_websocket connection written without blocking (MSG_DONTWAIT), frame by frame."""

    def __init__(self, ws: Any):
        self.ws = ws

    def encode(self, text: str) -> bytes:
        from wsproto.events import TextMessage

        return self.ws.ws.send(TextMessage(data=text))

    def encode_close(self, code: int, reason: str) -> bytes:
        from wsproto.events import CloseConnection

        return self.ws.ws.send(CloseConnection(code=code, reason=reason))

    def send_nowait(self, data: memoryview) -> int:
        try:
            return self.ws.sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0

    def fileno(self) -> int:
        try:
            return self.ws.sock.fileno()
        except OSError:
            return -1

    def encode_ping(self) -> bytes:
        from wsproto.events import Ping

        return self.ws.ws.send(Ping())

    def abort(self, graceful: bool = False) -> None:
        # shutdown wakes the socket's reader thread, which then ends the handler; SHUT_WR alone
        # still delivers what was written (the close frame) before the FIN
        self.ws.connected = False
        try:
            self.ws.sock.shutdown(socket.SHUT_WR if graceful else socket.SHUT_RDWR)
        except OSError:
            pass


@dataclass
class _Item:
    text: str
    size: int
    frame_type: str = ""
    turn_id: Any = None
    revision: Any = 0


class Outbox:
    """Pending frames of one socket; turn snapshots coalesce latest-wins."""

    def __init__(self, transport: Transport, limits: OutboxLimits | None = None):
        self.transport = transport
        self.limits = limits or OutboxLimits()
        self._lock = threading.Lock()
        self._queue: deque[_Item] = deque()
        self._bytes = 0
        self._wire: memoryview | None = None  # the frame being written, from its first unsent byte
        self._wire_started = False
        self._busy = False  # a drain owns the socket: in a pool thread or parked in WriteWaiter
        self._stalled_since: float | None = None
        self._drop: tuple[int, str] | None = None
        self._flushed = threading.Event()
        self.closed = False

    # --- producers -----------------------------------------------------------------------

    def put(self, frame: dict[str, Any], text: str, size: int) -> bool:
        """Queue a frame; True if the caller should schedule a drain."""
        item = _Item(text, size, str(frame.get("type", "")), frame.get("turn_id"), frame.get("revision", 0))
        with self._lock:
            if self.closed or self._drop is not None:  # closing: nothing more goes out
                return False
            if item.frame_type == "turn_updated" and self._coalesce(item):
                return False
            if self._overflows(item):
                return self._mark_drop(f"the client is not reading (more than {self.limits.frames} frames "
                                       f"or {self.limits.bytes} bytes waiting)")
            self._queue.append(item)
            self._bytes += item.size
            self._flushed.clear()
            return self._claim()

    def close(self, code: int | None = None, reason: str = "") -> bool:
        """Stop sending; with a code, send a close frame after what is already queued. True: schedule a drain."""
        with self._lock:
            if self.closed or code is not None and self._drop is not None:
                return False
            if code is None:
                self.closed = True
                self._queue.clear()
                self._flushed.set()
                return False
            self._drop = (code, reason)
            self._flushed.clear()  # set again once the close frame is out
            return self._claim()

    def ping(self) -> bool:
        """Queue a WebSocket ping (keepalive); True if the caller should schedule a drain."""
        return self.put({"type": PING}, "", 2)

    def wait_flushed(self, timeout: float) -> bool:
        return self._flushed.wait(timeout)

    def _coalesce(self, item: _Item) -> bool:
        for i, queued in enumerate(self._queue):
            if queued.frame_type == "turn_updated" and queued.turn_id == item.turn_id:
                if _revision(queued.revision) <= _revision(item.revision):
                    self._bytes += item.size - queued.size
                    self._queue[i] = item
                return True
        return False

    def _overflows(self, item: _Item) -> bool:
        waiting = len(self._queue) + (self._wire is not None)
        if waiting == 0:
            return False  # one frame always fits, however large: the history of a long dialog
        in_flight = len(self._wire) if self._wire is not None else 0
        return waiting >= self.limits.frames or self._bytes + in_flight + item.size > self.limits.bytes

    def _mark_drop(self, reason: str) -> bool:
        self._drop = (TRY_AGAIN_LATER, reason)
        self._queue.clear()
        self._bytes = 0
        return self._claim()

    def _claim(self) -> bool:
        if self._busy:
            return False
        self._busy = True
        return True

    # --- the drain (one at a time: whoever holds `_busy`) --------------------------------

    def drain(self) -> bool:
        """Write what the socket takes now; True if it is full and the drain must wait for room."""
        while True:
            with self._lock:
                if self.closed:
                    self._busy = False
                    self._flushed.set()
                    return False
                if self._drop is not None and (self._drop[0] == TRY_AGAIN_LATER or not self._queue and self._wire is None):
                    break
                if self._wire is None and not self._queue:
                    self._busy = False
                    self._stalled_since = None
                    self._flushed.set()
                    return False
                item = None if self._wire is not None else self._queue.popleft()
                if item is not None:
                    self._bytes -= item.size
            if item is not None and not self._start(item):
                return False
            if not self._write():
                return not self.closed
        self.finish()
        return False

    def _start(self, item: _Item) -> bool:
        try:
            data = self.transport.encode_ping() if item.frame_type == PING else self.transport.encode(item.text)
        except Exception as exc:  # the connection closed under us
            self._gone(exc)
            return False
        self._wire, self._wire_started = memoryview(data), False
        return True

    def _write(self) -> bool:
        """Write the current frame; True once it is all out, False when the socket is full or gone."""
        assert self._wire is not None
        try:
            sent = self.transport.send_nowait(self._wire)
        except OSError as exc:
            self._gone(exc)
            return False
        with self._lock:
            self._wire_started = self._wire_started or sent > 0
            self._wire = self._wire[sent:] if sent < len(self._wire) else None
            if self._wire is None:
                self._stalled_since = None
                return True
            if sent or self._stalled_since is None:
                self._stalled_since = time.monotonic()
            return False

    def overdue(self, now: float) -> bool:
        with self._lock:
            stalled = self._stalled_since is not None and now - self._stalled_since >= self.limits.stall_secs
            if stalled and self._drop is None:
                self._drop = (TRY_AGAIN_LATER, f"the client took no data for {self.limits.stall_secs:g} s")
            return stalled or self._drop is not None or self.closed

    def finish(self) -> None:
        """End a dropped or closing socket: a close frame if the wire is between frames, then hang up."""
        with self._lock:
            drop, self._drop = self._drop, None
            between_frames = self._wire is None or not self._wire_started
            already = self.closed
            self.closed = True
            self._queue.clear()
            self._busy = False
        if drop is not None and not already:
            code, reason = drop
            if code == TRY_AGAIN_LATER:
                log.info("dropped a websocket: %s", reason)
            if between_frames:
                self._try_close_frame(code, reason)
            # a slow reader is cut at once; a deliberate close lets the close frame reach the client
            self.transport.abort(graceful=between_frames and code != TRY_AGAIN_LATER)
        self._flushed.set()

    def _try_close_frame(self, code: int, reason: str) -> None:
        try:
            self.transport.send_nowait(memoryview(self.transport.encode_close(code, reason[:120])))
        except Exception:
            pass  # best effort: a client that reads nothing will not read this either

    def _gone(self, exc: BaseException) -> None:
        log.debug("websocket send failed: %s", type(exc).__name__)
        with self._lock:
            self.closed = True
            self._queue.clear()
            self._busy = False
        self._flushed.set()

    def fileno(self) -> int:
        return self.transport.fileno()


def _revision(value: Any) -> float:
    return value if isinstance(value, (int, float)) else 0


class WriteWaiter:
    """One thread that parks full sockets until they can take bytes, and drops those stalled too long."""

    def __init__(self, resume: Callable[[Outbox], None], poll_ms: int = 100):
        self._resume = resume
        self._poll_ms = poll_ms
        self._parked: set[Outbox] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def park(self, outbox: Outbox) -> None:
        with self._lock:
            self._parked.add(outbox)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="ws-write-waiter", daemon=True)
                self._thread.start()
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                parked = list(self._parked)
            if not parked:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            self._round(parked)

    def _round(self, parked: list[Outbox]) -> None:
        poller = select.poll()
        by_fd: dict[int, Outbox] = {}
        for outbox in parked:
            fd = outbox.fileno()
            if fd < 0:
                self._release(outbox, outbox.finish)
                continue
            by_fd[fd] = outbox
            poller.register(fd, select.POLLOUT)
        ready = {fd for fd, _ in poller.poll(self._poll_ms)} if by_fd else set()
        now = time.monotonic()
        for fd, outbox in by_fd.items():
            if fd in ready:
                self._release(outbox, partial(self._resume, outbox))
            elif outbox.overdue(now):
                self._release(outbox, outbox.finish)

    def _release(self, outbox: Outbox, then: Callable[[], None]) -> None:
        with self._lock:
            self._parked.discard(outbox)
        then()
