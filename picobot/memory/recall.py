"""Automatic recall: the user's knowledge memories that match this turn's words, as runtime context.

The note goes with the turn's user message in what is sent to the model and is never stored, so
the stored history holds only what the user wrote. A user with no knowledge memories costs one
indexed existence check and never loads the segmenter.
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import SQLAlchemyError

from picobot.domain.messages import ChatMessage
from picobot.memory.store import MemoryStore

log = logging.getLogger("picobot.memory")

RECALL_HEADER = "Known about this user from earlier chats (use if relevant; memory_search finds more):"
MAX_RECALL_QUERY_CHARS = 1000  # the start of a long message says what it is about


def recall_note(store: MemoryStore, scope_key: str, text: str, limit: int) -> ChatMessage | None:
    """A system note listing up to `limit` matching knowledge memories; None when nothing matches."""
    text = text.strip()[:MAX_RECALL_QUERY_CHARS]
    if limit <= 0 or not text:
        return None
    try:
        if not store.has_any(scope_key, "knowledge"):
            return None
        hits = store.search(scope_key, text, category="knowledge", limit=limit, like_fallback=False)
    except SQLAlchemyError as exc:  # recall helps a turn; it must never fail one
        log.warning("memory recall failed: %s", type(exc).__name__)
        return None
    if not hits:
        return None
    lines = [f"- {h.memory.memory_key}: {h.memory.content}" for h in hits]
    return ChatMessage(role="system", content="\n".join([RECALL_HEADER, *lines]))
