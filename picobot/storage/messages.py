"""Message history: appended in true order per turn, loaded with broken tool chains repaired."""

from __future__ import annotations

import time

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from picobot.domain.messages import MARKER_TOOL_REPAIR, ChatMessage, ToolCall
from picobot.storage import sessions
from picobot.storage.models import MessageRow, SessionRow

REPAIR_TEXT = "[interrupted] This tool call has no result: the run stopped before it finished."


def to_message(row: MessageRow) -> ChatMessage:
    return ChatMessage(
        role=row.role, content=row.content if row.content is not None else "",
        tool_calls=[ToolCall.from_dict(c) for c in row.tool_calls or []], tool_call_id=row.tool_call_id,
        name=row.name, reasoning_content=row.reasoning_content, provider_state=row.provider_state,
        marker=row.marker, is_error=bool(row.is_error),
    )


def append(s: Session, session_id: str, turn_id: str | None, messages: list[ChatMessage]) -> int:
    """Append messages in the given order (part of the caller's transaction); returns the first position."""
    if not messages:
        return -1
    first = sessions.reserve_positions(s, session_id, len(messages))
    now = time.time()
    # one Core executemany: the ORM's unit of work costs more than the rows on this hot path
    s.execute(insert(MessageRow), [_row_values(session_id, first + i, turn_id, m, now) for i, m in enumerate(messages)])
    return first


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


_HISTORY_COLUMNS = (MessageRow.role, MessageRow.content, MessageRow.tool_calls, MessageRow.tool_call_id,
                    MessageRow.name, MessageRow.reasoning_content, MessageRow.provider_state, MessageRow.marker,
                    MessageRow.is_error)


def load_history(s: Session, session_id: str) -> list[ChatMessage]:
    """The active history a turn sees, with broken tool chains repaired."""
    since = s.scalar(select(SessionRow.compacted_before).where(SessionRow.id == session_id))
    q = select(*_HISTORY_COLUMNS).where(MessageRow.session_id == session_id)
    if since is not None:
        q = q.where(MessageRow.position >= since)
    history = [
        ChatMessage(role=r.role, content=r.content if r.content is not None else "",
                    tool_calls=[ToolCall.from_dict(c) for c in r.tool_calls or []], tool_call_id=r.tool_call_id,
                    name=r.name, reasoning_content=r.reasoning_content, provider_state=r.provider_state,
                    marker=r.marker, is_error=bool(r.is_error))
        for r in s.execute(q.order_by(MessageRow.position))  # rows, not ORM objects: cheaper to load
    ]
    return repair_tool_chains(history)


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
