"""A dialog's automatic title: its one attempt, the exchange it is made from, the conditional write.

A title a person gave (`title_source = 'user'`) is never replaced: the automatic write is one
UPDATE whose WHERE clause still wants the dialog untitled, so a `/rename` that commits first wins,
and one that commits later simply overwrites it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select, update

from picobot.domain.messages import text_of
from picobot.storage.models import MessageRow, SessionRow
from picobot.storage.sessions import TITLE_AUTO

_s = SessionRow.__table__
_m = MessageRow.__table__
ANSWER_SCAN = 20  # assistant messages looked at for the first one with text (the rest are tool calls)


def _untitled(session_id: str) -> list[Any]:
    return [_s.c.id == session_id, _s.c.title == "", _s.c.title_source == "", _s.c.deleted_at.is_(None)]


def claim_attempt(conn: Connection, session_id: str, now: float) -> bool:
    """Mark the dialog's one automatic attempt; False when it has a title or had its attempt already."""
    stmt = (update(_s).where(*_untitled(session_id), _s.c.title_attempted_at.is_(None))
            .values(title_attempted_at=now))
    return conn.execute(stmt).rowcount == 1


def write_auto(conn: Connection, session_id: str, title: str) -> bool:
    """Store an automatic title unless the dialog got one meanwhile (a rename wins); True when stored."""
    stmt = update(_s).where(*_untitled(session_id)).values(title=title, title_source=TITLE_AUTO)
    return conn.execute(stmt).rowcount == 1


def dialog(conn: Connection, session_id: str) -> Any:
    """The dialog's channel, chat_id and agent (None when it does not exist)."""
    return conn.execute(select(_s.c.channel, _s.c.chat_id, _s.c.agent).where(_s.c.id == session_id)).first()


def first_exchange(conn: Connection, session_id: str) -> tuple[str, str] | None:
    """The text of the dialog's first user message and of the first answer after it, or None."""
    first = conn.execute(select(_m.c.position, _m.c.content).where(
        _m.c.session_id == session_id, _m.c.role == "user", _m.c.marker.is_(None))
        .order_by(_m.c.position).limit(1)).first()
    if first is None:
        return None
    answers = conn.execute(select(_m.c.content).where(
        _m.c.session_id == session_id, _m.c.role == "assistant", _m.c.marker.is_(None), _m.c.position > first.position)
        .order_by(_m.c.position).limit(ANSWER_SCAN)).scalars()
    answer = next((t for t in (text_of(c or "") for c in answers) if t.strip()), "")
    question = text_of(first.content or "")
    return (question, answer) if question.strip() and answer else None
