"""Sessions (`channel:chat_id:dialog_id`) and the current dialog of each chat."""

from __future__ import annotations

import secrets
import time

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from picobot.domain.messages import Usage
from picobot.storage.models import ChatScopeRow, SessionRow

DEFAULT_DIALOG = "default"


def session_id_of(channel: str, chat_id: str, dialog_id: str) -> str:
    return f"{channel}:{chat_id}:{dialog_id}"


def get(s: Session, session_id: str) -> SessionRow | None:
    return s.get(SessionRow, session_id)


def get_for_update(s: Session, session_id: str) -> SessionRow | None:
    """The session row, locked until the transaction ends (a no-op lock on SQLite's single writer)."""
    return s.scalars(select(SessionRow).where(SessionRow.id == session_id).with_for_update()).first()


def _live(row: SessionRow | None) -> bool:
    return row is not None and row.deleted_at is None and row.archived_at is None


def set_current(s: Session, row: SessionRow) -> None:
    now = time.time()
    scope = s.get(ChatScopeRow, row.scope)
    if scope is None:
        s.add(ChatScopeRow(scope=row.scope, current_session_id=row.id, updated_at=now))
    else:
        scope.current_session_id = row.id
        scope.updated_at = now


def create(s: Session, channel: str, chat_id: str, title: str = "", agent: str = "default") -> SessionRow:
    """A new dialog for the chat, made current."""
    dialog = DEFAULT_DIALOG
    if s.get(SessionRow, session_id_of(channel, chat_id, dialog)) is not None:
        dialog = "d_" + secrets.token_hex(4)
    now = time.time()
    row = SessionRow(
        id=session_id_of(channel, chat_id, dialog), channel=channel, chat_id=chat_id, dialog_id=dialog,
        title=title, agent=agent, created_at=now, updated_at=now, input_tokens=0, output_tokens=0,
        last_input_tokens=0, next_seq=0, next_position=0, user_turns=0,
    )
    s.add(row)
    s.flush()
    set_current(s, row)
    return row


def current(s: Session, channel: str, chat_id: str) -> SessionRow | None:
    """The chat's current dialog: the pointer, else the most recently active live one."""
    row = s.scalars(  # pointer and row in one round trip: this runs for every message
        select(SessionRow).join(ChatScopeRow, ChatScopeRow.current_session_id == SessionRow.id)
        .where(ChatScopeRow.scope == f"{channel}:{chat_id}")
    ).first()
    if _live(row):
        return row
    return s.scalars(
        select(SessionRow)
        .where(SessionRow.channel == channel, SessionRow.chat_id == chat_id)
        .where(SessionRow.deleted_at.is_(None), SessionRow.archived_at.is_(None))
        .order_by(SessionRow.updated_at.desc())
        .limit(1)
    ).first()


def get_or_create_current(s: Session, channel: str, chat_id: str, agent: str = "default") -> SessionRow:
    row = current(s, channel, chat_id)
    if row is None:
        return create(s, channel, chat_id, agent=agent)
    return row


def list_for_chat(s: Session, channel: str, chat_id: str, include_archived: bool = False, limit: int = 20) -> list[SessionRow]:
    q = (
        select(SessionRow)
        .where(SessionRow.channel == channel, SessionRow.chat_id == chat_id, SessionRow.deleted_at.is_(None))
        .order_by(SessionRow.updated_at.desc())
        .limit(limit)
    )
    if not include_archived:
        q = q.where(SessionRow.archived_at.is_(None))
    return list(s.scalars(q))


def switch(s: Session, channel: str, chat_id: str, dialog_id: str) -> SessionRow | None:
    row = s.get(SessionRow, session_id_of(channel, chat_id, dialog_id))
    if row is None or row.deleted_at is not None:
        return None
    row.archived_at = None  # switching to an archived dialog brings it back
    set_current(s, row)
    return row


def rename(s: Session, row: SessionRow, title: str) -> None:
    row.title = title
    row.updated_at = time.time()


def archive(s: Session, row: SessionRow) -> None:
    row.archived_at = time.time()


def delete(s: Session, row: SessionRow) -> None:
    row.deleted_at = time.time()


def next_seq(s: Session, session_id: str) -> int:
    """Atomically reserve the session's next inbound sequence number."""
    return s.execute(
        update(SessionRow).where(SessionRow.id == session_id)
        .values(next_seq=SessionRow.next_seq + 1, updated_at=time.time()).returning(SessionRow.next_seq)
    ).scalar_one()


def reserve_positions(s: Session, session_id: str, count: int) -> int:
    """Reserve `count` message positions; returns the first."""
    end = s.execute(
        update(SessionRow).where(SessionRow.id == session_id)
        .values(next_position=SessionRow.next_position + count).returning(SessionRow.next_position)
    ).scalar_one()
    return end - count


def add_usage(s: Session, session_id: str, usage: Usage, last_input_tokens: int, user_turns: int) -> None:
    s.execute(
        update(SessionRow).where(SessionRow.id == session_id).values(
            input_tokens=SessionRow.input_tokens + usage.input_tokens,
            output_tokens=SessionRow.output_tokens + usage.output_tokens,
            last_input_tokens=last_input_tokens if last_input_tokens else SessionRow.last_input_tokens,
            user_turns=SessionRow.user_turns + user_turns,
            updated_at=time.time(),
        )
    )
