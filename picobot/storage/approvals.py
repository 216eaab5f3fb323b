"""Approvals (`approvals`): a tool call waiting for a person's decision, and every decision taken.

A decision is one conditional UPDATE from `pending`: of two deciders (two sockets, a button and a
command, a decision and the timeout) exactly one changes the row, and only that one is told it won.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, insert, select, update

from picobot.storage.models import ApprovalRow

_a = ApprovalRow.__table__

PENDING = "pending"
APPROVED = "approved"
DENIED = "denied"
EXPIRED = "expired"
CANCELLED = "cancelled"
DECIDED = (APPROVED, DENIED, EXPIRED, CANCELLED)
SCOPES = ("once", "session")


@dataclass(frozen=True)
class Approval:
    id: str
    session_id: str
    turn_id: str
    tool: str
    summary: str
    rule: str
    status: str
    scope: str
    decided_by: str | None
    decided_via: str | None
    created_at: float
    expires_at: float
    decided_at: float | None

    def as_dict(self) -> dict:
        return {"approval_id": self.id, "session_id": self.session_id, "turn_id": self.turn_id, "tool": self.tool,
                "summary": self.summary, "rule": self.rule, "status": self.status, "scope": self.scope,
                "decided_by": self.decided_by, "decided_via": self.decided_via, "created_at": self.created_at,
                "expires_at": self.expires_at, "decided_at": self.decided_at}


def _row(found: Any) -> Approval | None:
    return None if found is None else Approval(**dict(found._mapping))


def create(conn: Connection, approval_id: str, session_id: str, turn_id: str, tool: str, summary: str, rule: str,
           timeout_secs: float, now: float | None = None) -> Approval:
    now = time.time() if now is None else now
    values: dict[str, Any] = {"id": approval_id, "session_id": session_id[:512], "turn_id": turn_id[:64], "tool": tool[:128],
              "summary": summary, "rule": rule[:128], "status": PENDING, "scope": "once", "decided_by": None,
              "decided_via": None, "created_at": now, "expires_at": now + timeout_secs, "decided_at": None}
    conn.execute(insert(_a), values)
    return Approval(**values)


def get(conn: Connection, approval_id: str) -> Approval | None:
    return _row(conn.execute(select(_a).where(_a.c.id == approval_id)).first())


def decide(conn: Connection, approval_id: str, status: str, by: str, via: str, scope: str = "once",
           now: float | None = None) -> bool:
    """Move a pending approval to `status`; True only for the one caller whose update changed it."""
    if status not in DECIDED or scope not in SCOPES:
        raise ValueError(f"not a decision: {status}/{scope}")
    changed = conn.execute(update(_a).where(and_(_a.c.id == approval_id, _a.c.status == PENDING)).values(
        status=status, scope=scope, decided_by=by[:320], decided_via=via[:64],
        decided_at=time.time() if now is None else now))
    return changed.rowcount == 1


def stale(conn: Connection, before: float, limit: int = 100) -> list[str]:
    """Ids of approvals still pending although they expired before `before` (their waiter is gone)."""
    rows = conn.execute(select(_a.c.id).where(_a.c.status == PENDING, _a.c.expires_at < before).limit(limit)).all()
    return [r[0] for r in rows]


def allowed_for_session(conn: Connection, session_id: str, tool: str, rule: str) -> bool:
    """True when this dialog already allowed calls of `tool` under `rule` for the session."""
    found = conn.execute(select(_a.c.id).where(
        _a.c.session_id == session_id, _a.c.tool == tool, _a.c.rule == rule, _a.c.status == APPROVED,
        _a.c.scope == "session").limit(1)).first()
    return found is not None


def for_session(conn: Connection, session_id: str, limit: int = 10) -> list[Approval]:
    """The dialog's latest approvals, newest first."""
    rows = conn.execute(select(_a).where(_a.c.session_id == session_id)
                        .order_by(_a.c.created_at.desc()).limit(limit)).all()
    return [a for a in (_row(r) for r in rows) if a is not None]
