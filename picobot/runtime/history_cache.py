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
MAX_CHARS = 8_000_000  # text held over all entries (~8-16 MB); a dialog over a quarter of it is read each turn


@dataclass
class _Entry:
    next_position: int
    compacted_before: int | None
    messages: list[ChatMessage]
    chars: int


def _chars(messages: list[ChatMessage]) -> int:
    """Roughly the memory an entry holds: its text, reasoning and tool-call arguments."""
    total = 0
    for m in messages:
        total += len(m.content) if isinstance(m.content, str) else len(str(m.content))
        total += len(m.reasoning_content or "") + sum(len(c.arguments) + len(c.name) for c in m.tool_calls) + 64
    return total


class HistoryCache:
    def __init__(self, max_sessions: int = MAX_SESSIONS, max_chars: int = MAX_CHARS) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._max_sessions = max_sessions
        self._max_chars = max_chars
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
        chars = _chars(messages)
        with self._lock:
            self._drop(session_id)
            if chars > self._max_chars // 4:
                return
            self._entries[session_id] = _Entry(next_position, compacted_before, list(messages), chars)
            self._size += chars
            self._trim()

    def extend(self, session_id: str, first_position: int, added: list[ChatMessage]) -> None:
        """Messages stored at `first_position` onward; kept only if they directly follow the entry."""
        chars = _chars(added)
        with self._lock:
            entry = self._entries.get(session_id)
            if entry is None:
                return
            if entry.next_position != first_position or entry.chars + chars > self._max_chars // 4:
                self._drop(session_id)
                return
            entry.messages.extend(added)
            entry.next_position = first_position + len(added)
            entry.chars += chars
            self._size += chars
            self._entries.move_to_end(session_id)
            self._trim()

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._drop(session_id)

    def _drop(self, session_id: str) -> None:
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self._size -= entry.chars

    def _trim(self) -> None:
        while self._entries and (len(self._entries) > self._max_sessions or self._size > self._max_chars):
            _, entry = self._entries.popitem(last=False)
            self._size -= entry.chars
