"""The conversation a memory came from: the user messages of its source turn or message."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, or_, select

from picobot.domain.messages import text_of
from picobot.memory.model import Memory
from picobot.storage.db import Database
from picobot.storage.models import MessageRow

MAX_SOURCE_MESSAGES = 5
MAX_SOURCE_CHARS = 2000

_m = MessageRow.__table__
_SOURCE = (select(_m.c.id, _m.c.position, _m.c.role, _m.c.content, _m.c.created_at)
           .where(_m.c.session_id == bindparam("session_id"), _m.c.role == "user",
                  or_(_m.c.turn_id == bindparam("turn_id"), _m.c.id == bindparam("message_id")))
           .order_by(_m.c.position).limit(MAX_SOURCE_MESSAGES))


def source_messages(db: Database, memory: Memory) -> list[dict[str, Any]]:
    """What the user said in the turn (or message) that wrote the memory; [] when unknown or gone."""
    src = memory.source
    if not src.session_id or (src.turn_id is None and src.message_id is None):
        return []
    with db.connect() as conn:
        rows = conn.execute(_SOURCE, {"session_id": src.session_id, "turn_id": src.turn_id,
                                      "message_id": src.message_id}).mappings().all()
    return [{"id": r["id"], "position": r["position"], "role": r["role"], "created_at": r["created_at"],
             "text": text_of(r["content"])[:MAX_SOURCE_CHARS]} for r in rows]
