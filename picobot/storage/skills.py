"""Skill events: one row per activation or change of a skill (Core statements, built once)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select

from picobot.storage.models import SkillEventRow

EVENTS = ("activated", "created", "updated", "deleted", "disabled", "enabled")

_t = SkillEventRow.__table__
_INSERT = insert(_t)
_RECENT = select(_t).order_by(_t.c.id.desc()).limit(bindparam("limit"))
_RECENT_FOR = (select(_t).where(_t.c.skill == bindparam("skill"))
               .order_by(_t.c.id.desc()).limit(bindparam("limit")))


def record(conn: Connection, event: str, skills: list[str], session_id: str | None, via: str, scope: str = "") -> None:
    """One row per skill, in one statement."""
    if event not in EVENTS:
        raise ValueError(f"unknown skill event {event!r}")
    now = time.time()
    conn.execute(_INSERT, [{"skill": name[:64], "event": event, "session_id": session_id, "via": via,
                            "scope": scope[:32], "created_at": now} for name in skills])


def recent(conn: Connection, limit: int = 50, skill: str | None = None) -> list[dict[str, Any]]:
    """The newest events first (of one skill when given)."""
    if skill is None:
        rows = conn.execute(_RECENT, {"limit": limit})
    else:
        rows = conn.execute(_RECENT_FOR, {"skill": skill, "limit": limit})
    return [dict(r._mapping) for r in rows]
