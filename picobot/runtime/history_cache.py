"""A worker's copy of the histories it has recently run, so a turn does not re-read them.

SQL stays the truth. An entry is used only when the session's `next_position` (every stored
message moves it) and `compacted_before` still equal what the entry was built from, as read in
the claim's own transaction; anything else (a turn on another worker, a message from a tool,
compaction) makes it miss and the history is read from SQL again. Entries hold messages as stored,
before repair and filtering, so the claim treats cached and loaded histories the same way.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from picobot.domain.messages import ChatMessage

MAX_SESSIONS = 200
MAX_MESSAGES = 20_000  # over all entries; a very long dialog is simply read each turn


@dataclass
class _Entry:
    next_position: int
    compacted_before: int | None
    messages: list[ChatMessage]


class HistoryCache:
    def __init__(self, max_sessions: int = MAX_SESSIONS, max_messages: int = MAX_MESSAGES) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._max_sessions = max_sessions
        self._max_messages = max_messages
        self._size = 0
        self.hits = self.misses = 0

    def get(self, session_id: str, next_position: int, compacted_before: int | None) -> list[ChatMessage] | None:
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None or entry.next_position != next_position or entry.compacted_before != compacted_before:
                self.misses += 1
                return None
            self._entries.move_to_end(session_id)
            self.hits += 1
            return list(entry.messages)

    def put(self, session_id: str, next_position: int, compacted_before: int | None,
            messages: list[ChatMessage]) -> None:
        with self._lock:
            self._drop(session_id)
            if len(messages) > self._max_messages // 4:
                return
            self._entries[session_id] = _Entry(next_position, compacted_before, list(messages))
            self._size += len(messages)
            self._trim()

    def extend(self, session_id: str, first_position: int, added: list[ChatMessage]) -> None:
        """Messages stored at `first_position` onward; kept only if they directly follow the entry."""
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None:
                return
            if entry.next_position != first_position:
                self._drop(session_id)
                return
            entry.messages.extend(added)
            entry.next_position = first_position + len(added)
            self._size += len(added)
            self._entries.move_to_end(session_id)
            self._trim()

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._drop(session_id)

    def _drop(self, session_id: str) -> None:
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self._size -= len(entry.messages)

    def _trim(self) -> None:
        while self._entries and (len(self._entries) > self._max_sessions or self._size > self._max_messages):
            _, entry = self._entries.popitem(last=False)
            self._size -= len(entry.messages)
