"""MemoryStore: the memories table, its writes, and its full-text search (see picobot.memory)."""

from __future__ import annotations

import builtins
import time
import uuid
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from picobot.errors import MemoryRejected
from picobot.memory import ranking
from picobot.memory.model import (
    DEFAULT_MAX_CONTENT, MAX_KEY, MAX_NAMESPACE, MAX_SCOPE_KEY, TIMELINE_IMPORTANCE, TIMELINE_NAMESPACE, Memory,
    MemoryHit, MemorySource, clean_category, clean_importance, clean_text,
)
from picobot.storage.segment import index_text, query_terms
from picobot.storage.db import Database
from picobot.storage.models import MemoryRow

_t = MemoryRow.__table__
_SOURCE_FIELDS = ("session_id", "message_id", "seq", "turn_id", "channel", "chat_id", "source_type")

_BY_KEY = select(_t).where(_t.c.scope_key == bindparam("scope_key"), _t.c.namespace == bindparam("namespace"),
                           _t.c.memory_key == bindparam("memory_key"))
_BY_ID = select(_t).where(_t.c.id == bindparam("id"))
_INSERT = insert(_t)
_UPDATE = update(_t).where(_t.c.id == bindparam("row_id"))
_DELETE = delete(_t).where(_t.c.id == bindparam("row_id"))
_HAS_CATEGORY = (select(_t.c.id).where(_t.c.scope_key == bindparam("scope_key"),
                                       _t.c.category == bindparam("category")).limit(1))
_SCOPES = (select(_t.c.scope_key, func.count().label("count")).group_by(_t.c.scope_key)
           .order_by(_t.c.scope_key).limit(bindparam("limit")))
_NAMESPACES = (select(_t.c.namespace, func.count().label("count"))
               .where(_t.c.scope_key == bindparam("scope_key")).group_by(_t.c.namespace).order_by(_t.c.namespace))

# Optional filters: a NULL parameter turns its condition off (one statement for every combination).
_FILTERS = """
  AND (CAST(:namespace AS VARCHAR) IS NULL OR m.namespace = :namespace)
  AND (CAST(:category AS VARCHAR) IS NULL OR m.category = :category)
  AND (CAST(:since AS DOUBLE PRECISION) IS NULL OR m.created_at >= :since)
  AND (CAST(:until AS DOUBLE PRECISION) IS NULL OR m.created_at <= :until)
  AND (CAST(:session_id AS VARCHAR) IS NULL OR m.session_id = :session_id)
"""
_SCOPE = "m.scope_key = :scope_key"
_SQLITE_FTS = text(f"""
SELECT m.*, bm25(memories_fts) AS rank FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid
WHERE memories_fts MATCH :match AND {_SCOPE} {_FILTERS} ORDER BY rank LIMIT :n""")
_PG_FTS = text(f"""
SELECT m.*, ts_rank_cd(m.search_tsv, q) AS rank
FROM memories m, to_tsquery('simple', :match) q
WHERE m.search_tsv @@ q AND {_SCOPE} {_FILTERS} ORDER BY rank DESC LIMIT :n""")
_LIKE = {op: text(f"""
SELECT m.*, 0 AS rank FROM memories m
WHERE {_SCOPE} AND (m.content {op} :pattern ESCAPE '!' OR m.memory_key {op} :pattern ESCAPE '!') {_FILTERS}
ORDER BY m.importance DESC, m.updated_at DESC LIMIT :n""") for op in ("LIKE", "ILIKE")}
_LIST = text(f"""
SELECT m.* FROM memories m WHERE {_SCOPE} {_FILTERS}
ORDER BY m.updated_at DESC, m.id DESC LIMIT :n OFFSET :offset""")

MAX_LIMIT = 100
MAX_QUERY_CHARS = 2000


class MemoryStore:
    """Long-term memories of user scopes. Every call names its scope_key; nothing crosses scopes."""

    def __init__(self, db: Database, max_content_chars: int = DEFAULT_MAX_CONTENT):
        self.db = db
        self.max_content_chars = max_content_chars

    # --- writes ------------------------------------------------------------------------------

    def put(self, scope_key: str, namespace: str, key: str, content: str, *, category: str = "knowledge",
            importance: float = 0.5, source: MemorySource = MemorySource()) -> Memory:
        """Create the memory, or replace the content of the one with this key (same scope and namespace)."""
        values = self._checked(scope_key, namespace, key, content, category, importance)
        for _attempt in range(2):  # a concurrent put of the same new key: the loser updates instead
            try:
                with self.db.begin() as conn:
                    return self._upsert(conn, values, source)
            except IntegrityError:
                continue
        raise MemoryRejected(f"The memory {namespace}/{key} is being written by someone else; try again.")

    def update(self, scope_key: str, namespace: str, key: str, *, content: str | None = None,
               category: str | None = None, importance: float | None = None,
               source: MemorySource | None = None) -> Memory:
        """Change an existing memory; refused when there is none with this key."""
        with self.db.begin() as conn:
            row = self._row(conn, scope_key, namespace, key)
            if row is None:
                raise MemoryRejected(f"No memory {namespace}/{key}; use put to create it.")
            return self._change(conn, row, content, category, importance, source)

    def update_by_id(self, memory_id: int, *, content: str | None = None, category: str | None = None,
                     importance: float | None = None, source: MemorySource | None = None) -> Memory | None:
        """Change a memory found by id (the web page); None when it does not exist."""
        with self.db.begin() as conn:
            row = conn.execute(_BY_ID, {"id": memory_id}).mappings().first()
            return None if row is None else self._change(conn, row, content, category, importance, source)

    def delete(self, scope_key: str, namespace: str, key: str) -> bool:
        with self.db.begin() as conn:
            row = self._row(conn, scope_key, namespace, key)
            if row is None:
                return False
            conn.execute(_DELETE, {"row_id": row["id"]})
            return True

    def delete_by_id(self, memory_id: int) -> bool:
        with self.db.begin() as conn:
            return conn.execute(_DELETE, {"row_id": memory_id}).rowcount > 0

    def add_timeline(self, scope_key: str, content: str, source: MemorySource = MemorySource()) -> int:
        """Store a summary of past conversation (category timeline, importance 0.3); returns its id."""
        key = f"{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
        return self.put(scope_key, TIMELINE_NAMESPACE, key, content, category="timeline",
                        importance=TIMELINE_IMPORTANCE, source=source).id

    # --- reads -------------------------------------------------------------------------------

    def get(self, scope_key: str, namespace: str, key: str) -> Memory | None:
        with self.db.connect() as conn:
            row = self._row(conn, scope_key, namespace, key)
        return None if row is None else _memory(row)

    def get_by_id(self, memory_id: int) -> Memory | None:
        with self.db.connect() as conn:
            row = conn.execute(_BY_ID, {"id": memory_id}).mappings().first()
        return None if row is None else _memory(row)

    def list(self, scope_key: str, *, namespace: str | None = None, category: str | None = None,
             since: float | None = None, until: float | None = None, session_id: str | None = None,
             limit: int = 20, offset: int = 0) -> list[Memory]:
        """Newest first."""
        params = _params(scope_key, namespace, category, since, until, session_id, _limit(limit))
        params["offset"] = max(0, int(offset))
        with self.db.connect() as conn:
            return [_memory(r) for r in conn.execute(_LIST, params).mappings()]

    def has_any(self, scope_key: str, category: str = "knowledge") -> bool:
        """A cheap indexed check, so a turn of a user with no memories costs no search."""
        with self.db.connect() as conn:
            return conn.execute(_HAS_CATEGORY, {"scope_key": scope_key, "category": category}).first() is not None

    def scopes(self, limit: int = 500) -> builtins.list[dict[str, Any]]:
        with self.db.connect() as conn:
            return [dict(r) for r in conn.execute(_SCOPES, {"limit": limit}).mappings()]

    def namespaces(self, scope_key: str) -> builtins.list[dict[str, Any]]:
        with self.db.connect() as conn:
            return [dict(r) for r in conn.execute(_NAMESPACES, {"scope_key": scope_key}).mappings()]

    def search(self, scope_key: str, query: str, *, namespace: str | None = None, category: str | None = None,
               since: float | None = None, until: float | None = None, session_id: str | None = None,
               limit: int = 10, like_fallback: bool = True) -> builtins.list[MemoryHit]:
        """Best matches first (see picobot.memory.ranking); full-text, then LIKE when that finds nothing."""
        query = query if isinstance(query, str) else ""
        query = query[:MAX_QUERY_CHARS].encode("utf-8", "replace").decode("utf-8").replace("\x00", " ").strip()
        limit = _limit(limit)
        if not query:
            return [MemoryHit(m, ranking.score(0.0, m.importance, m.updated_at), 0.0, "none")
                    for m in self.list(scope_key, namespace=namespace, category=category, since=since,
                                       until=until, session_id=session_id, limit=limit)]
        params = _params(scope_key, namespace, category, since, until, session_id, min(max(limit * 4, 20), 200))
        with self.db.connect() as conn:
            hits = self._full_text(conn, query, params)
            if not hits and like_fallback:
                hits = self._like(conn, query, params)
        hits.sort(key=lambda h: h.score, reverse=True)
        return hits[:limit]

    # --- internals ---------------------------------------------------------------------------

    def _full_text(self, conn: Connection, query: str, params: dict[str, Any]) -> builtins.list[MemoryHit]:
        terms = query_terms(query)
        if not terms:
            return []
        if self.db.is_sqlite:
            # each term a quoted string: FTS5 operators in the query (AND, NEAR(, *, ") stay plain words
            match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
            statement, higher_is_better = _SQLITE_FTS, False
        else:
            match = " | ".join("'" + t.replace("'", "''").replace("\\", "") + "'" for t in terms)
            statement, higher_is_better = _PG_FTS, True
        rows = list(conn.execute(statement, {**params, "match": match}).mappings())
        rels = ranking.relevances([float(r["rank"]) for r in rows], higher_is_better)
        return [_hit(r, rel, "fts") for r, rel in zip(rows, rels)]

    def _like(self, conn: Connection, query: str, params: dict[str, Any]) -> builtins.list[MemoryHit]:
        pattern = "%" + query.replace("!", "!!").replace("%", "!%").replace("_", "!_") + "%"
        statement = _LIKE["LIKE" if self.db.is_sqlite else "ILIKE"]
        return [_hit(r, 1.0, "like") for r in conn.execute(statement, {**params, "pattern": pattern}).mappings()]

    def _checked(self, scope_key: str, namespace: str, key: str, content: str, category: str,
                 importance: float) -> dict[str, Any]:
        return {
            "scope_key": clean_text(scope_key, "scope_key", MAX_SCOPE_KEY),
            "namespace": clean_text(namespace, "namespace", MAX_NAMESPACE),
            "memory_key": clean_text(key, "key", MAX_KEY),
            "content": clean_text(content, "content", self.max_content_chars),
            "category": clean_category(category),
            "importance": clean_importance(importance),
        }

    def _upsert(self, conn: Connection, values: dict[str, Any], source: MemorySource) -> Memory:
        now = time.time()
        row = conn.execute(_BY_KEY, values).mappings().first()
        search = index_text(values["memory_key"], values["content"])
        src = _source_values(source)
        if row is None:
            fields = {**values, **src, "scope": "user", "search_text": search, "created_at": now, "updated_at": now}
            key = conn.execute(_INSERT, fields).inserted_primary_key
            if key is None:  # a single-row INSERT always reports its key
                raise RuntimeError("memory insert returned no primary key")
            new_id = key[0]
            return _memory({**fields, "id": new_id})
        changes = {**values, **src, "search_text": search, "updated_at": now}
        conn.execute(_UPDATE, {**changes, "row_id": row["id"]})
        return _memory({**row, **changes})

    def _change(self, conn: Connection, row: Any, content: str | None, category: str | None,
                importance: float | None, source: MemorySource | None) -> Memory:
        changes: dict[str, Any] = {"updated_at": time.time()}
        if content is not None:
            changes["content"] = clean_text(content, "content", self.max_content_chars)
            changes["search_text"] = index_text(row["memory_key"], changes["content"])
        if category is not None:
            changes["category"] = clean_category(category)
        if importance is not None:
            changes["importance"] = clean_importance(importance)
        if source is not None:  # what the new source does not say keeps the old value
            changes.update({k: v for k, v in _source_values(source).items() if v is not None})
        conn.execute(_UPDATE, {**changes, "row_id": row["id"]})
        return _memory({**row, **changes})

    def _row(self, conn: Connection, scope_key: str, namespace: str, key: str) -> Any:
        if not all(isinstance(v, str) for v in (scope_key, namespace, key)):
            return None
        return conn.execute(_BY_KEY, {"scope_key": scope_key, "namespace": namespace.strip(),
                                      "memory_key": key.strip()}).mappings().first()


def _params(scope_key: str, namespace: str | None, category: str | None, since: float | None,
            until: float | None, session_id: str | None, n: int) -> dict[str, Any]:
    def text_or_none(value: Any) -> str | None:
        return value if isinstance(value, str) and value else None

    def time_or_none(value: Any) -> float | None:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return {"scope_key": scope_key, "namespace": text_or_none(namespace), "category": text_or_none(category),
            "since": time_or_none(since), "until": time_or_none(until), "session_id": text_or_none(session_id),
            "n": n}


def _limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        return 10
    return max(1, min(MAX_LIMIT, limit))


def _source_values(source: MemorySource) -> dict[str, Any]:
    return {name: getattr(source, name) for name in _SOURCE_FIELDS}


def _memory(row: Any) -> Memory:
    src = MemorySource(**{name: row.get(name) for name in _SOURCE_FIELDS if row.get(name) is not None})
    return Memory(id=int(row["id"]), scope_key=row["scope_key"], namespace=row["namespace"],
                  memory_key=row["memory_key"], content=row["content"], category=row["category"],
                  importance=float(row["importance"]), created_at=float(row["created_at"]),
                  updated_at=float(row["updated_at"]), source=src, scope=row.get("scope") or "user")


def _hit(row: Any, relevance: float, matched_by: str) -> MemoryHit:
    m = _memory(row)
    return MemoryHit(m, ranking.score(relevance, m.importance, m.updated_at), relevance, matched_by)
