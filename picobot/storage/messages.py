"""Message history: appended in true order per turn, loaded with broken tool chains repaired."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, bindparam, func, insert, select
from sqlalchemy.orm import Session

from picobot.domain.messages import MARKER_TOOL_REPAIR, ChatMessage, ToolCall
from picobot.storage import sessions
from picobot.storage.models import MessageRow, SessionRow

REPAIR_TEXT = "[interrupted] This tool call has no result: the run stopped before it finished."


_m = MessageRow.__table__
_INSERT = insert(_m)
_HISTORY = (select(_m.c.role, _m.c.content, _m.c.tool_calls, _m.c.tool_call_id, _m.c.name, _m.c.reasoning_content,
                   _m.c.provider_state, _m.c.marker, _m.c.is_error)
            .where(_m.c.session_id == bindparam("sid"), _m.c.position >= bindparam("since"))
            .order_by(_m.c.position))
_COMPACTED_BEFORE = select(SessionRow.__table__.c.compacted_before).where(SessionRow.__table__.c.id == bindparam("sid"))


def append(conn: Connection, session_id: str, turn_id: str | None, messages: list[ChatMessage]) -> int:
    """Append messages in the given order (part of the caller's transaction); returns the first position."""
    if not messages:
        return -1
    first = sessions.reserve_positions(conn, session_id, len(messages))
    insert_at(conn, session_id, first, turn_id, messages)
    return first


def insert_at(conn: Connection, session_id: str, first: int, turn_id: str | None, messages: list[ChatMessage]) -> None:
    """Insert messages at positions reserved already (one executemany)."""
    if messages:
        now = time.time()
        conn.execute(_INSERT, [_row_values(session_id, first + i, turn_id, m, now) for i, m in enumerate(messages)])


def _row_values(session_id: str, position: int, turn_id: str | None, m: ChatMessage, now: float) -> dict:
    return {
        "session_id": session_id, "position": position, "turn_id": turn_id, "role": m.role, "content": m.content,
        "tool_calls": [c.to_dict() for c in m.tool_calls] or None, "tool_call_id": m.tool_call_id, "name": m.name,
        "reasoning_content": m.reasoning_content, "provider_state": m.provider_state, "marker": m.marker,
        "is_error": m.is_error, "created_at": now,
    }


def load_rows(s: Session, session_id: str, limit: int | None = None) -> list[MessageRow]:
    row = s.get(SessionRow, session_id)
    q = select(MessageRow).where(MessageRow.session_id == session_id)
    if row is not None and row.compacted_before is not None:
        q = q.where(MessageRow.position >= row.compacted_before)
    if limit:
        rows = list(s.scalars(q.order_by(MessageRow.position.desc()).limit(limit)))
        rows.reverse()
        return rows
    return list(s.scalars(q.order_by(MessageRow.position)))


_NEWEST = (select(_m.c.id, _m.c.position, _m.c.role, _m.c.content, _m.c.turn_id, _m.c.created_at, _m.c.tool_calls,
                  _m.c.tool_call_id, _m.c.name, _m.c.reasoning_content, _m.c.marker, _m.c.is_error)
           .where(_m.c.session_id == bindparam("sid"),
                  _m.c.position >= func.coalesce(_COMPACTED_BEFORE.scalar_subquery(), 0))
           .order_by(_m.c.position.desc()).limit(bindparam("limit")))


def newest(conn: Connection, session_id: str, limit: int) -> list[Any]:
    """The newest `limit` active messages as rows (what clients are shown, no provider state), oldest first.
    Every socket that connects reads this, so it is one prebuilt statement."""
    rows = list(conn.execute(_NEWEST, {"sid": session_id, "limit": limit}))
    rows.reverse()
    return rows


def load(conn: Connection, session_id: str, since: int | None) -> list[ChatMessage]:
    """The stored messages from position `since` on, as stored (no repair)."""
    return [from_row(r) for r in conn.execute(_HISTORY, {"sid": session_id, "since": since or 0})]


def from_row(r: Any) -> ChatMessage:
    """A ChatMessage from a row with the message columns."""
    return ChatMessage(role=r.role, content=r.content if r.content is not None else "",
                       tool_calls=[ToolCall.from_dict(c) for c in r.tool_calls or []], tool_call_id=r.tool_call_id,
                       name=r.name, reasoning_content=r.reasoning_content, provider_state=r.provider_state,
                       marker=r.marker, is_error=bool(r.is_error))


def load_history(conn: Connection, session_id: str) -> list[ChatMessage]:
    """The active history a turn sees, with broken tool chains repaired."""
    since = conn.execute(_COMPACTED_BEFORE, {"sid": session_id}).scalar()
    return repair_tool_chains(load(conn, session_id, since))


def last_answered_by(s: Session, session_id: str) -> str | None:
    """The `<provider>:<model>` a fallback chain recorded on the dialog's newest answers, if any."""
    q = (select(MessageRow.provider_state).where(MessageRow.session_id == session_id, MessageRow.role == "assistant")
         .order_by(MessageRow.position.desc()).limit(5))
    for state in s.scalars(q):
        label = state.get("answered_by") if isinstance(state, dict) else None
        if isinstance(label, str):
            return label
    return None


def count(s: Session, session_id: str) -> int:
    return s.scalar(select(func.count()).select_from(MessageRow).where(MessageRow.session_id == session_id)) or 0


def repair_tool_chains(history: list[ChatMessage]) -> list[ChatMessage]:
    """Every assistant tool call gets a result right after it; stray tool results are dropped."""
    out: list[ChatMessage] = []
    i = 0
    while i < len(history):
        m = history[i]
        i += 1
        if m.role == "tool":
            continue  # a tool result not directly behind its assistant message
        out.append(m)
        if m.role != "assistant" or not m.tool_calls:
            continue
        wanted = {c.id for c in m.tool_calls}
        results: dict[str, ChatMessage] = {}
        while i < len(history) and history[i].role == "tool":
            r = history[i]
            if r.tool_call_id in wanted and r.tool_call_id not in results:
                results[r.tool_call_id] = r
            i += 1
        for call in m.tool_calls:
            out.append(results.get(call.id) or ChatMessage(
                role="tool", content=REPAIR_TEXT, tool_call_id=call.id, name=call.name,
                marker=MARKER_TOOL_REPAIR, is_error=True,
            ))
    return out
