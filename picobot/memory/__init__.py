"""Long-term memory: facts about a user kept across chats, searched by meaning-bearing words.

Public API (what the tools, the web page, automatic recall and context compaction use):

    store = MemoryStore(db, max_content_chars=4000)
    store.put(scope_key, namespace, key, content, *, category="knowledge", importance=0.5,
              source=MemorySource(...)) -> Memory          # create, or replace the same key
    store.update(scope_key, namespace, key, *, content=None, category=None, importance=None) -> Memory
    store.delete(scope_key, namespace, key) -> bool
    store.get(scope_key, namespace, key) -> Memory | None
    store.search(scope_key, query, *, namespace=None, category=None, since=None, until=None,
                 session_id=None, limit=10) -> list[MemoryHit]   # best first
    store.list(scope_key, *, namespace=None, category=None, since=None, until=None,
               session_id=None, limit=20, offset=0) -> list[Memory]   # newest first
    store.add_timeline(scope_key, content, source) -> int   # a history summary: category timeline,
                                                            # namespace "timeline", importance 0.3
    scope_key_for(channel, sender_id) -> str   # "channel:sender_id"; "owner" for web and cli_chat

Every call names its scope; nothing reads or writes across scopes. Writes refuse bad input with
MemoryRejected (NUL, unpaired surrogates, empty or oversize text, importance outside 0..1).
Search: jieba-segmented full text (SQLite FTS5 with bm25, PostgreSQL to_tsvector('simple') with
ts_rank_cd), LIKE when that finds nothing, ranked as picobot.memory.ranking describes.
Knowledge files (`knowledge/<name>/content.md`) are a separate index: picobot.memory.knowledge.
"""

from __future__ import annotations

from picobot.memory.model import (
    CATEGORIES, OWNER_SCOPE, Memory, MemoryHit, MemorySource, scope_key_for,
)
from picobot.memory.store import MemoryStore

__all__ = ["CATEGORIES", "OWNER_SCOPE", "Memory", "MemoryHit", "MemorySource", "MemoryStore", "scope_key_for"]
