"""SQL of memory maintenance: which scopes changed, the per-scope state, and applying a plan.

A plan is applied in one transaction that first checks every entry it touches is exactly as the
model saw it (same id, same `updated_at`): a memory the user changed while the model was thinking
is never merged away or deleted on the strength of its old text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update

from picobot.storage.segment import index_text
from picobot.storage.models import MemoryMaintenanceStateRow, MemoryRow
from picobot.storage.upsert import Upsert

SOURCE_TYPE = "memory_maintenance"

_m = MemoryRow.__table__
_s = MemoryMaintenanceStateRow.__table__

_FINGERPRINTS = (select(_m.c.scope_key, func.count().label("n"), func.max(_m.c.updated_at).label("newest"),
                        func.max(_m.c.id).label("top"))
                 .where(_m.c.category == "knowledge").group_by(_m.c.scope_key))
_STATES = select(_s)
_SEEN = (select(_m.c.id, _m.c.updated_at)
         .where(_m.c.scope_key == bindparam("scope_key"), _m.c.id.in_(bindparam("ids", expanding=True))))
_BY_KEY = select(_m.c.id).where(_m.c.scope_key == bindparam("scope_key"), _m.c.namespace == bindparam("ns"),
                                _m.c.memory_key == bindparam("key"))
_DELETE = delete(_m).where(_m.c.id.in_(bindparam("ids", expanding=True)))
_INSERT = insert(_m)
_UPDATE = update(_m).where(_m.c.id == bindparam("row_id"))
_STATE_FIELDS = ("last_pass_at", "last_memory_change_seen", "last_error", "summary", "report")
_SAVE = Upsert(_s, ["scope_key"], _STATE_FIELDS)
_SAVE_ERROR = Upsert(_s, ["scope_key"], ["last_pass_at", "last_error"])


@dataclass(frozen=True)
class State:
    scope_key: str
    last_pass_at: float | None
    last_memory_change_seen: str | None
    last_error: str | None
    summary: str
    report: dict[str, Any] | None


@dataclass(frozen=True)
class MergeWrite:
    ids: list[int]
    namespace: str
    key: str
    content: str
    importance: float


def fingerprints(conn: Connection) -> dict[str, str]:
    """Per scope with knowledge entries: a string that changes whenever an entry is added, changed or deleted."""
    return {r.scope_key: f"{r.n}:{r.newest!r}:{r.top}" for r in conn.execute(_FINGERPRINTS)}


def fingerprint(conn: Connection, scope_key: str) -> str | None:
    row = conn.execute(_FINGERPRINTS.where(_m.c.scope_key == scope_key)).first()
    return None if row is None else f"{row.n}:{row.newest!r}:{row.top}"


def states(conn: Connection) -> dict[str, State]:
    return {r["scope_key"]: State(**r) for r in conn.execute(_STATES).mappings()}


def due_scopes(conn: Connection, limit: int) -> list[str]:
    """Scopes whose entries changed since their last good pass: the longest-waiting first, at most `limit`."""
    known = states(conn)
    changed = [(scope, known.get(scope)) for scope, fp in fingerprints(conn).items()
               if known.get(scope) is None or known[scope].last_memory_change_seen != fp]
    # never tried first, then oldest attempt: a scope that keeps failing cannot starve the others
    changed.sort(key=lambda item: (item[1] is not None and item[1].last_pass_at is not None,
                                   (item[1].last_pass_at or 0.0) if item[1] else 0.0, item[0]))
    return [scope for scope, _ in changed[:limit]]


class StalePlan(Exception):
    """The plan no longer fits the entries (raised inside the transaction, so nothing of it is kept)."""


def apply_plan(conn: Connection, scope_key: str, seen: dict[int, float], merges: Iterable[MergeWrite],
               low_value: Iterable[int]) -> None:
    """Merge and delete as planned. StalePlan when an entry changed meanwhile, or a merge would
    overwrite an entry it does not include: the caller's transaction then rolls back."""
    merges = list(merges)
    touched = {i for m in merges for i in m.ids} | set(low_value)
    now_seen = {r.id: r.updated_at for r in conn.execute(_SEEN, {"scope_key": scope_key, "ids": sorted(touched)})}
    if any(now_seen.get(i) != seen.get(i) for i in touched):
        raise StalePlan("memories changed while the model was working; the next run looks again")
    drop = set(low_value)
    for merge in merges:
        holder = conn.execute(_BY_KEY, {"scope_key": scope_key, "ns": merge.namespace, "key": merge.key}).scalar()
        if holder is not None and holder not in merge.ids:
            raise StalePlan(f"the merge into {merge.namespace}/{merge.key} would overwrite entry {holder}, "
                            "which it does not include")
        kept = _write_merge(conn, scope_key, merge, holder)
        drop |= set(merge.ids) - {kept}
    if drop:
        conn.execute(_DELETE, {"ids": sorted(drop)})


def _write_merge(conn: Connection, scope_key: str, merge: MergeWrite, holder: int | None) -> int:
    """Store the merged entry under its key (replacing `holder`, the entry that has it); returns its id."""
    now = time.time()
    values = {"content": merge.content, "importance": merge.importance, "category": "knowledge",
              "search_text": index_text(merge.key, merge.content), "source_type": SOURCE_TYPE,
              "session_id": None, "message_id": None, "seq": None, "turn_id": None, "channel": None,
              "chat_id": None, "updated_at": now}
    if holder is not None:
        conn.execute(_UPDATE, {**values, "row_id": holder})
        return int(holder)
    row = {**values, "scope": "user", "scope_key": scope_key, "namespace": merge.namespace,
           "memory_key": merge.key, "created_at": now}
    key = conn.execute(_INSERT, row).inserted_primary_key
    if key is None:  # only an INSERT … RETURNING-less executemany lacks one; this is a single row
        raise RuntimeError("memory insert returned no primary key")
    return int(key[0])


def save_pass(conn: Connection, scope_key: str, seen: str | None, summary: str, report: dict[str, Any]) -> None:
    _SAVE.run(conn, {"scope_key": scope_key, "last_pass_at": time.time(), "last_memory_change_seen": seen,
                     "last_error": None, "summary": summary, "report": report})


def save_error(conn: Connection, scope_key: str, error: str) -> None:
    """A failed pass: its time and why; what the scope last saw and its summary stay as they were."""
    _SAVE_ERROR.run(conn, {"scope_key": scope_key, "last_pass_at": time.time(), "last_error": error[:2000],
                           "summary": "", "last_memory_change_seen": None, "report": None})
