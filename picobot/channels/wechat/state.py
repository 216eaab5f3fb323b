"""A WeChat channel's durable state in SQL (`channel_state`): the getupdates cursor, each user's latest
context_token (replies need it; its time is when the user last wrote: the delivery window), and the
keys of messages seen in the last 24 h (replays)."""

from __future__ import annotations

import time
from typing import Any

from picobot.storage import channel_state as store
from picobot.storage.db import Database

CURSOR = "cursor"
SEEN_PREFIX = "seen:"
SEEN_SECS = 24 * 3600


def cursor(db: Database, channel: str) -> str:
    with db.connect() as conn:
        value = store.get(conn, channel, CURSOR)
    return str((value or {}).get("buf") or "")


def save_cursor(db: Database, channel: str, buf: str) -> None:
    """Persist the cursor, only when non-empty (an empty one would replay the whole backlog)."""
    if not buf:
        return
    with db.begin() as conn:
        store.put(conn, channel, CURSOR, {"buf": buf})


def forget_login(db: Database, channel: str) -> None:
    """force_login: the cursor belongs to the old login."""
    with db.begin() as conn:
        store.remove(conn, channel, CURSOR)


def _ctx_key(user_id: str) -> str:
    return f"ctx:{user_id}"[:320]


def note_context(conn: Any, channel: str, user_id: str, token: str) -> None:
    store.put(conn, channel, _ctx_key(user_id), {"token": token})


def context(db: Database, channel: str, user_id: str) -> tuple[str, float] | None:
    """(the user's latest context_token, when the user last wrote) or None."""
    from sqlalchemy import select

    from picobot.storage.models import ChannelStateRow

    t = ChannelStateRow.__table__
    with db.connect() as conn:
        row = conn.execute(select(t.c.value, t.c.updated_at)
                           .where(t.c.channel == channel, t.c.key == _ctx_key(user_id))).first()
    if row is None or not isinstance(row.value, dict) or not row.value.get("token"):
        return None
    return str(row.value["token"]), float(row.updated_at)


def seen(conn: Any, channel: str, keys: list[str]) -> bool:
    """Whether any of the message's dedupe keys was seen within 24 h."""
    return store.get_fresh(conn, channel, [SEEN_PREFIX + k for k in keys], time.time() - SEEN_SECS) is not None


def mark_seen(conn: Any, channel: str, keys: list[str], event_id: int) -> None:
    for key in keys:
        store.put(conn, channel, (SEEN_PREFIX + key)[:320], {"event": event_id})


def prune_seen(db: Database, channel: str) -> int:
    with db.begin() as conn:
        return store.remove_prefix(conn, channel, SEEN_PREFIX, before=time.time() - SEEN_SECS)
