"""A dialog's plan (the `todo` tool) in SQL: one `task_plans` row per dialog, its items in `task_items`.

A change first takes the plan's row (an UPDATE of `updated_at`: a row lock on PostgreSQL, the write
lock on SQLite), so concurrent changes to one plan (parallel tool calls, a sub-agent run ending in
another worker) apply one after the other and item numbers never collide. The unique `session_id`
keeps a dialog at one plan even when two creations race.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update

from picobot.storage.models import TaskItemRow, TaskPlanRow

_p = TaskPlanRow.__table__
_i = TaskItemRow.__table__

# Built once: every turn reads its dialog's plan (the runtime note), and building a statement and its
# cache key costs more than running it.
_GET_PLAN = select(_p.c.id, _p.c.title).where(_p.c.session_id == bindparam("session_id"))
_GET_ITEMS = select(_i.c.number, _i.c.text, _i.c.status, _i.c.note).where(
    _i.c.plan_id == bindparam("plan_id")).order_by(_i.c.number)


@dataclass(frozen=True)
class Item:
    id: int  # the item's number in its plan (1, 2, ...)
    text: str
    status: str
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "status": self.status, "note": self.note}


@dataclass(frozen=True)
class Plan:
    title: str
    items: tuple[Item, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "items": [i.as_dict() for i in self.items]}


def get(conn: Connection, session_id: str) -> Plan | None:
    """The dialog's plan with its items in order, or None."""
    row = conn.execute(_GET_PLAN, {"session_id": session_id}).first()
    if row is None:
        return None
    items = conn.execute(_GET_ITEMS, {"plan_id": row.id}).all()
    return Plan(row.title, tuple(Item(n, t, s, note) for n, t, s, note in items))


def lock(conn: Connection, session_id: str, now: float) -> int | None:
    """Take the dialog's plan for a change (see the module's docstring); its id, or None when there is none."""
    conn.execute(update(_p).where(_p.c.session_id == session_id).values(updated_at=now))
    return conn.execute(select(_p.c.id).where(_p.c.session_id == session_id)).scalar()


def create(conn: Connection, session_id: str, title: str, texts: list[str], now: float) -> None:
    """A new plan; IntegrityError when the dialog has one (or it was deleted)."""
    key = conn.execute(insert(_p).values(session_id=session_id, title=title, created_at=now,
                                         updated_at=now)).inserted_primary_key
    if key is None:  # an INSERT of one row always has one; this tells the type checker so
        raise RuntimeError("the new plan has no id")
    plan_id = key[0]
    add(conn, plan_id, texts, now)


def count(conn: Connection, plan_id: int) -> int:
    return conn.execute(select(func.count()).select_from(_i).where(_i.c.plan_id == plan_id)).scalar() or 0


def add(conn: Connection, plan_id: int, texts: list[str], now: float) -> list[int]:
    """Append items (after `lock`); their numbers."""
    last = conn.execute(select(func.max(_i.c.number)).where(_i.c.plan_id == plan_id)).scalar() or 0
    numbers = list(range(last + 1, last + 1 + len(texts)))
    if texts:
        conn.execute(insert(_i), [{"plan_id": plan_id, "number": n, "text": t, "status": "pending", "note": "",
                                   "updated_at": now} for n, t in zip(numbers, texts)])
    return numbers


def set_status(conn: Connection, plan_id: int, number: int, status: str, note: str | None, now: float) -> bool:
    """Change one item (after `lock`); `note` None keeps its note. False when the plan has no such item."""
    values: dict[str, Any] = {"status": status, "updated_at": now}
    if note is not None:
        values["note"] = note
    stmt = update(_i).where(_i.c.plan_id == plan_id, _i.c.number == number).values(**values)
    return conn.execute(stmt).rowcount == 1


def clear(conn: Connection, session_id: str) -> bool:
    """Delete the dialog's plan and its items; False when it had none."""
    plan_id = conn.execute(select(_p.c.id).where(_p.c.session_id == session_id)).scalar()
    if plan_id is None:
        return False
    conn.execute(delete(_i).where(_i.c.plan_id == plan_id))  # SQLite enforces no foreign keys unless asked
    conn.execute(delete(_p).where(_p.c.id == plan_id))
    return True
