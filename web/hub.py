"""One Redis subscriber per web process, fanning turn events out to local sockets."""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from picobot.runtime.publisher import follow_events
from web.frames import encode_frame
from web.outbox import Outbox, OutboxLimits, WriteWaiter

__all__ = ["EventHub", "Outbox", "OutboxLimits"]

# Frames every socket of the dialog's chat gets, not only those watching the dialog: the web UI marks
# another dialog whose plan changed.
CHAT_WIDE_FRAMES = frozenset({"plan_updated"})


def chat_of(session_id: str) -> str:
    """`channel:chat_id` of a `channel:chat_id:dialog_id` session id."""
    return session_id.rsplit(":", 1)[0]


class EventHub:
    def __init__(self, r: redis.Redis, send_threads: int = 8, limits: OutboxLimits | None = None):
        self.r = r
        self.limits = limits or OutboxLimits()
        self._watchers: dict[str, set[Outbox]] = defaultdict(set)
        self._chats: dict[str, set[Outbox]] = defaultdict(set)  # `channel:chat_id` -> its sockets
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=send_threads, thread_name_prefix="ws-send")
        self._waiter = WriteWaiter(self._schedule)
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

    def watch_chat(self, chat: str, outbox: Outbox) -> None:
        with self._lock:
            self._chats[chat].add(outbox)

    def unwatch_chat(self, chat: str, outbox: Outbox) -> None:
        with self._lock:
            watchers = self._chats.get(chat)
            if watchers is not None:
                watchers.discard(outbox)
                if not watchers:
                    del self._chats[chat]

    def deliver(self, outbox: Outbox, frame: dict[str, Any], encoded: tuple[str, int] | None = None) -> None:
        text, size = encoded or encode_frame(frame)
        if outbox.put(frame, text, size):
            self._schedule(outbox)

    def ping(self, outbox: Outbox) -> None:
        if outbox.ping():
            self._schedule(outbox)

    def close_socket(self, outbox: Outbox, code: int, reason: str) -> None:
        """Send what is queued, then a close frame with `code` (e.g. 1011 after a handler failure)."""
        if outbox.close(code, reason):
            self._schedule(outbox)

    def _schedule(self, outbox: Outbox) -> None:
        try:
            self._pool.submit(self._drain, outbox)
        except RuntimeError:  # shutting down
            outbox.close()

    def _drain(self, outbox: Outbox) -> None:
        if outbox.drain():  # the socket is full: wait for room without holding a pool thread
            self._waiter.park(outbox)

    def connections(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._watchers.values())

    def close(self) -> None:
        self._stop.set()
        self._waiter.close()
        self._pool.shutdown(wait=False)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="event-hub", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        # clients catch up from history on what was missed while Redis restarted
        follow_events(self.r, self._stop, self._dispatch, "event hub")

    def _dispatch(self, data: Any) -> None:
        try:
            frame = json.loads(data)
        except (TypeError, ValueError):
            return
        if not isinstance(frame, dict):
            return
        session_id = frame.get("session_id")
        if not isinstance(session_id, str):
            return
        with self._lock:
            targets = set(self._watchers.get(session_id, ()))
            if frame.get("type") in CHAT_WIDE_FRAMES:
                targets |= self._chats.get(chat_of(session_id), set())
        encoded = encode_frame(frame) if targets else None  # once for every socket watching the dialog
        for outbox in targets:
            self.deliver(outbox, frame, encoded)
