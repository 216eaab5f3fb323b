"""The `chat_hosts` table: which worker host holds a chat's workspace (see runtime/placement.py)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from picobot.storage.models import ChatHostRow, SessionRow
from picobot.storage.upsert import InsertIfAbsent

_T = ChatHostRow.__table__
_KEY = (_T.c.channel == bindparam("ch"), _T.c.chat_id == bindparam("cid"))
_GET = select(_T.c.host, _T.c.moved_from, _T.c.moved_at).where(*_KEY)
_S = SessionRow.__table__
_OF_SESSION = (select(_S.c.channel, _S.c.chat_id, _T.c.host)
               .select_from(_S.outerjoin(_T, (_T.c.channel == _S.c.channel) & (_T.c.chat_id == _S.c.chat_id)))
               .where(_S.c.id == bindparam("sid")))
_PIN = InsertIfAbsent(_T, ("channel", "chat_id"), returning="host")
_MOVE = (update(_T).where(*_KEY, _T.c.host == bindparam("old"))
         .values(host=bindparam("new"), moved_from=bindparam("old_"), moved_at=bindparam("now")))


def get(conn: Connection, channel: str, chat_id: str) -> Any:
    """(host, moved_from, moved_at) of the chat, or None when no turn of it ran yet."""
    return conn.execute(_GET, {"ch": channel, "cid": chat_id}).first()


def of_session(conn: Connection, session_id: str) -> Any:
    """(channel, chat_id, host) of the session's chat (host None: not pinned yet), or None without such a session."""
    return conn.execute(_OF_SESSION, {"sid": session_id}).first()


def pin(conn: Connection, channel: str, chat_id: str, host: str) -> str:
    """Pin an unpinned chat to `host`; returns the chat's host (another one when a rival pinned it first)."""
    if _PIN.run(conn, {"channel": channel, "chat_id": chat_id, "host": host, "pinned_at": time.time()}) is not None:
        return host
    row = get(conn, channel, chat_id)
    return host if row is None else str(row.host)


def move(conn: Connection, channel: str, chat_id: str, old: str, new: str) -> bool:
    """Move the chat from the dead host `old` to `new`; False when someone moved it first."""
    res = conn.execute(_MOVE, {"ch": channel, "cid": chat_id, "old": old, "new": new, "old_": old,
                               "now": time.time()})
    return bool(res.rowcount)
