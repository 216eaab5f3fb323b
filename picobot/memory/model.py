"""Plain data of the memory store: a memory, where it came from, a search hit; and input checks."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from picobot.domain.scope import MAX_SCOPE_KEY, OWNER_CHANNELS, OWNER_SCOPE, scope_key_for  # noqa: F401 (re-exported)
from picobot.errors import MemoryRejected

SCOPE_USER = "user"
CATEGORIES = ("knowledge", "timeline")
TIMELINE_NAMESPACE = "timeline"
TIMELINE_IMPORTANCE = 0.3
MAX_NAMESPACE = 64
MAX_KEY = 200
DEFAULT_MAX_CONTENT = 4000


@dataclass(frozen=True)
class MemorySource:
    """Where a memory came from (all optional): the session, message and chat, and what wrote it."""

    session_id: str | None = None
    message_id: int | None = None
    seq: int | None = None
    turn_id: str | None = None
    channel: str | None = None
    chat_id: str | None = None
    source_type: str = "tool"  # tool | web | compaction | memory_maintenance | ...


@dataclass
class Memory:
    id: int
    scope_key: str
    namespace: str
    memory_key: str
    content: str
    category: str
    importance: float
    created_at: float
    updated_at: float
    source: MemorySource = field(default_factory=MemorySource)
    scope: str = SCOPE_USER

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MemoryHit:
    memory: Memory
    score: float  # the ranking score (see picobot.memory.ranking)
    relevance: float  # 0..1 within this result set
    matched_by: str  # "fts" | "like" | "none" (no query: a plain listing)


def clean_text(value: Any, what: str, max_chars: int, *, required: bool = True) -> str:
    """A string fit to store: no NUL, no lone surrogates, within max_chars; refusals say why."""
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise MemoryRejected(f"{what} must be a string.")
    value = value.strip()
    if required and not value:
        raise MemoryRejected(f"{what} is empty; give it some text.")
    if len(value) > max_chars:
        raise MemoryRejected(f"{what} is {len(value)} characters; the limit is {max_chars}. Shorten it.")
    if "\x00" in value:
        raise MemoryRejected(f"{what} contains a NUL character; remove it.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MemoryRejected(f"{what} contains an unpaired surrogate (not valid Unicode text); remove it.") from None
    return value


def clean_category(value: Any) -> str:
    if value not in CATEGORIES:
        raise MemoryRejected(f"category must be one of {', '.join(CATEGORIES)}, not {str(value)[:40]!r}.")
    return str(value)


def clean_importance(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= 1:
        raise MemoryRejected(f"importance must be a number from 0 to 1, not {str(value)[:40]!r}.")
    return float(value)
