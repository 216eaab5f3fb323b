"""Sessions (`channel:chat_id:dialog_id`) and the current dialog of each chat."""

from __future__ import annotations

import secrets
import time

from typing import Any

from sqlalchemy import BigInteger, Connection, bindparam, exists, func, select, update
from sqlalchemy.orm import Session

from picobot.domain.messages import Usage, text_of
from picobot.storage.models import TURN_RUNNING, ChatScopeRow, MessageRow, SessionRow, TurnRow
from picobot.storage.upsert import InsertIfAbsent, Upsert

DEFAULT_DIALOG = "default"
TITLE_USER = "user"  # sessions.title_source of a title a person gave (/new <title>, /rename)
TITLE_AUTO = "auto"  # one the titles capability wrote

_s = SessionRow.__table__
_scope = ChatScopeRow.__table__
_t = TurnRow.__table__
_m = MessageRow.__table__
PREVIEW_CHARS = 80  # of an untitled dialog's first message, in lists

# --- hot path: Core statements built once (every message and every turn runs these) --------

_CURRENT_ID = (select(_s.c.id).select_from(_scope.join(_s, _scope.c.current_session_id == _s.c.id))
               .where(_scope.c.scope == bindparam("scope"), _s.c.deleted_at.is_(None), _s.c.archived_at.is_(None)))
_CLAIM_VIEW = (select(_s.c.channel, _s.c.chat_id, _s.c.agent, _s.c.user_turns, _s.c.deleted_at, _s.c.next_position,
                      _s.c.compacted_before, _s.c.model_provider, _s.c.model_key,
                      exists().where(_t.c.session_id == _s.c.id, _t.c.status == TURN_RUNNING).label("running"))
               .where(_s.c.id == bindparam("sid")).with_for_update(of=_s))
_RESERVE = (update(_s).where(_s.c.id == bindparam("sid"))
            .values(next_position=_s.c.next_position + bindparam("n")).returning(_s.c.next_position))
_RECORD_TURN = (update(_s).where(_s.c.id == bindparam("sid")).values(
    next_position=_s.c.next_position + bindparam("n"),
    input_tokens=_s.c.input_tokens + bindparam("inp"),
    output_tokens=_s.c.output_tokens + bindparam("out"),
    # a turn that made no model call (or got no usage) keeps the last figure
    last_input_tokens=func.coalesce(func.nullif(bindparam("last", type_=BigInteger), 0), _s.c.last_input_tokens),
    user_turns=_s.c.user_turns + bindparam("users"),
    updated_at=bindparam("now"),
).returning(_s.c.next_position))


def current_id(conn: Connection, channel: str, chat_id: str) -> str | None:
    """The id of the chat's current dialog when its pointer names a live one (else None: use `current`)."""
    return conn.execute(_CURRENT_ID, {"scope": f"{channel}:{chat_id}"}).scalar()


def current_or_create_id(conn: Connection, channel: str, chat_id: str, agent: str = "default") -> str:
    """The current dialog's id, creating (with `agent`) or re-pointing it in the caller's transaction."""
    session_id = current_id(conn, channel, chat_id)
    if session_id is None:  # a new chat, or its dialog was archived or deleted: the slow path
        with Session(bind=conn) as s:
            session_id = get_or_create_current(s, channel, chat_id, agent).id
            # commit, not flush: inside the caller's SAVEPOINT the Session keeps one of its own, which
            # closing would roll back; otherwise it only flushes (the caller's transaction commits)
            s.commit()
    return session_id


def claim_view(conn: Connection, session_id: str) -> Any:
    """What a turn needs of its session, locked until the transaction ends (PostgreSQL; SQLite has
    one writer), and whether a turn of it is running. None if there is no such session."""
    return conn.execute(_CLAIM_VIEW, {"sid": session_id}).first()


def reserve_positions(conn: Connection, session_id: str, count: int) -> int:
    """Reserve `count` message positions; returns the first."""
    return conn.execute(_RESERVE, {"sid": session_id, "n": count}).scalar_one() - count


def record_turn(conn: Connection, session_id: str, count: int, usage: Usage, last_input_tokens: int,
                user_turns: int) -> int:
    """Reserve a turn's message positions and add its usage, in one statement; returns the first position."""
    end = conn.execute(_RECORD_TURN, {
        "sid": session_id, "n": count, "inp": usage.input_tokens, "out": usage.output_tokens,
        "last": last_input_tokens, "users": user_turns, "now": time.time(),
    }).scalar_one()
    return end - count


# --- dialogs (ORM: commands, pages, connects) -----------------------------------------------


def session_id_of(channel: str, chat_id: str, dialog_id: str) -> str:
    return f"{channel}:{chat_id}:{dialog_id}"


def get(s: Session, session_id: str) -> SessionRow | None:
    return s.get(SessionRow, session_id)


def _live(row: SessionRow | None) -> bool:
    return row is not None and row.deleted_at is None and row.archived_at is None


# Race-free on PostgreSQL too: sockets opening the same new chat at once all insert its first
# dialog, one wins and the others read its row (see storage/upsert.py).
_INSERT_DIALOG = InsertIfAbsent(_s, ["id"])
_SET_CURRENT = Upsert(_scope, ["scope"], ["current_session_id", "updated_at"])


def set_current(s: Session, row: SessionRow) -> None:
    _SET_CURRENT.run(s.connection(), {"scope": row.scope, "current_session_id": row.id, "updated_at": time.time()})


def _insert_dialog(s: Session, channel: str, chat_id: str, dialog: str, title: str, agent: str) -> SessionRow | None:
    """The new dialog's row, or None when a dialog with that id exists already."""
    now = time.time()
    sid = session_id_of(channel, chat_id, dialog)
    if _INSERT_DIALOG.run(s.connection(), {
        "id": sid, "channel": channel, "chat_id": chat_id, "dialog_id": dialog, "title": title,
        "title_source": TITLE_USER if title else "", "agent": agent,
        "created_at": now, "updated_at": now, "input_tokens": 0, "output_tokens": 0, "last_input_tokens": 0,
        "next_seq": 0, "next_position": 0, "user_turns": 0,
    }) is None:
        return None
    return s.get(SessionRow, sid)


def _reload(s: Session, session_id: str) -> SessionRow | None:
    # populate_existing: the row another transaction just committed, not a stale copy of it
    return s.get(SessionRow, session_id, populate_existing=True)


def create(s: Session, channel: str, chat_id: str, title: str = "", agent: str = "default") -> SessionRow:
    """A new dialog for the chat, made current: `default` while the chat has none by that id."""
    row = _insert_dialog(s, channel, chat_id, DEFAULT_DIALOG, title, agent)
    while row is None:  # a random id is taken only by astronomic chance; then draw again
        row = _insert_dialog(s, channel, chat_id, "d_" + secrets.token_hex(4), title, agent)
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
    if row is not None:
        return row
    # First one wins: of the sockets opening a new chat at once, one inserts its default dialog
    # and the rest use that one (their insert waits for the winner's commit, then does nothing).
    row = (_insert_dialog(s, channel, chat_id, DEFAULT_DIALOG, "", agent)
           or _reload(s, session_id_of(channel, chat_id, DEFAULT_DIALOG)))
    if not _live(row):  # the default dialog was archived or deleted: start another
        return create(s, channel, chat_id, agent=agent)
    assert row is not None
    set_current(s, row)
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


def previews(s: Session, session_ids: list[str], chars: int = PREVIEW_CHARS) -> dict[str, str]:
    """Each dialog's first user message on one line, cut to `chars`: what names an untitled dialog. One query."""
    if not session_ids:
        return {}
    first = (select(_m.c.session_id, func.min(_m.c.position).label("position"))
             .where(_m.c.session_id.in_(session_ids), _m.c.role == "user").group_by(_m.c.session_id).subquery())
    rows = s.execute(select(_m.c.session_id, _m.c.content).join(
        first, (_m.c.session_id == first.c.session_id) & (_m.c.position == first.c.position)))
    return {sid: " ".join(text_of(content or "").split())[:chars] for sid, content in rows}


def switch(s: Session, channel: str, chat_id: str, dialog_id: str) -> SessionRow | None:
    row = s.get(SessionRow, session_id_of(channel, chat_id, dialog_id))
    if row is None or row.deleted_at is not None:
        return None
    row.archived_at = None  # switching to an archived dialog brings it back
    set_current(s, row)
    return row


def rename(s: Session, row: SessionRow, title: str) -> None:
    """A person's title: an automatic one never replaces it (see storage/titles.py)."""
    row.title = title
    row.title_source = TITLE_USER
    row.updated_at = time.time()


def set_model(s: Session, row: SessionRow, provider: str | None, model: str | None) -> None:
    """The dialog's /model choice; None and None go back to the agent's own model."""
    row.model_provider, row.model_key = (provider, model) if provider and model else (None, None)


def archive(s: Session, row: SessionRow) -> None:
    row.archived_at = time.time()


def delete(s: Session, row: SessionRow) -> None:
    row.deleted_at = time.time()
