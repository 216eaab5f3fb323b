"""JSON shapes the web edge sends: history messages and session info (no provider state)."""

from __future__ import annotations

import json
from typing import Any

from picobot.coord import keys
from picobot.app import App as Runtime
from picobot.storage import messages

HISTORY_LIMIT = 200


def message_view(row: Any) -> dict[str, Any]:
    """A stored message as clients see it (a MessageRow or a row of `messages.newest`)."""
    view: dict[str, Any] = {"id": row.id, "position": row.position, "role": row.role, "content": row.content,
                            "turn_id": row.turn_id, "created_at": row.created_at}
    for key in ("tool_calls", "tool_call_id", "name", "reasoning_content", "marker"):
        value = getattr(row, key)
        if value:
            view[key] = value
    if row.is_error:
        view["is_error"] = True
    return view


def history(rt: Runtime, session_id: str, limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
    with rt.db.connect() as conn:
        return [message_view(r) for r in messages.newest(conn, session_id, limit)]


def active_turn(rt: Runtime, session_id: str) -> dict[str, Any] | None:
    try:
        raw = rt.redis.get(keys.snapshot(session_id))
    except Exception:
        return None
    return json.loads(raw) if raw else None
