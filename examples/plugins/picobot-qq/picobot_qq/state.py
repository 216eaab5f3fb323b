"""What a QQ channel keeps in Redis; every key starts with `qq:<channel>:`.

    calls             list: API calls waiting for the WebSocket's holder ({"action", "params", "echo", "expires"})
    reply:<echo>      list: that call's answer frame (expires after a minute)
    link              set while some process holds the channel's WebSocket (short TTL, refreshed)
    status            JSON: the connection's state, detail, mode, self_id and last heartbeat
    sent:<message id> a message the bot sent: a group reply to it addresses the bot
    progress:<row id> hash: part index -> message id, the parts of a delivery already sent
"""

from __future__ import annotations

import json
import time
from typing import Any

LINK_TTL_SECS = 8
LINK_REFRESH_SECS = 2.0
REPLY_TTL_SECS = 60
PROGRESS_TTL_SECS = 2 * 24 * 3600


def key(channel: str, *parts: str) -> str:
    return ":".join(("qq", channel, *parts))


def text(raw: Any) -> str | None:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def set_status(r: Any, channel: str, state: str, detail: str = "", **fields: Any) -> None:
    current = read_status(r, channel)
    current.update(fields, state=state, detail=detail[:300], at=time.time())
    r.set(key(channel, "status"), json.dumps(current, default=str))


def note_meta(r: Any, channel: str, **fields: Any) -> None:
    """Merge fields (self_id, heartbeat_at, online) into the status without changing its state."""
    current = read_status(r, channel)
    current.update(fields)
    r.set(key(channel, "status"), json.dumps(current, default=str))


def read_status(r: Any, channel: str) -> dict[str, Any]:
    try:
        value = json.loads(text(r.get(key(channel, "status"))) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def connected(r: Any, channel: str) -> bool:
    return bool(r.exists(key(channel, "link")))


def note_sent(r: Any, channel: str, message_id: str, ttl: int) -> None:
    if message_id:
        r.set(key(channel, "sent", message_id), "1", ex=ttl)


def was_sent(r: Any, channel: str, message_id: str) -> bool:
    return bool(message_id) and bool(r.exists(key(channel, "sent", message_id)))
