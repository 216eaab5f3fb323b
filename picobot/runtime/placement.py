"""Workspaces that follow the chat: a chat's turns run on the worker host that holds its files.

A worker host is every worker process sharing one disk (one `PICOBOT_HOST_ID`, by default the
machine's host name). Each such worker also takes the Celery queue `host.<id>` and its heartbeat
keeps the host in the Redis sorted set `picobot:hosts`. The first turn of a chat pins the chat to
the host whose worker took it (`chat_hosts` in SQL; the broker hands a task to a worker with a free
slot, so a new chat goes to a host with room). Later turns arrive on any worker: `forwarded` sends
them on to the holding host's queue while that host lives. When it is dead (no beat for
heartbeat.TTL_SECS while this host beats), the chat moves here, the move is recorded on the chat and
told to the agent in the dialog: the files written before stay on the dead host's disk.

`tools.workspace_storage` (a folder every host mounts) turns all of this off: every host then works
in the same files and any worker runs any turn.

A Redis flush empties the host set for one beat: a host that cannot see itself in the set does not
judge others dead, so a flush never moves a chat.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from picobot.coord import keys
from picobot.domain.messages import ChatMessage
from picobot.runtime.pinned_here import PinnedHere
from picobot.storage import chat_hosts, messages

if TYPE_CHECKING:
    import redis

    from picobot.config import Config
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.placement")

HOST_ENV = "PICOBOT_HOST_ID"
HOST_QUEUE_PREFIX = "host."
HOST_TTL_SECS = 7.0  # as runtime/heartbeat.TTL_SECS: a host without a beat for this long is dead
MARKER_HOST_MOVED = "host_moved"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# half the time after which other hosts judge this one dead: the margin for a late beat and clocks
_here = PinnedHere(fresh_secs=HOST_TTL_SECS / 2)


@lru_cache(maxsize=1)
def host_id() -> str:
    """This process's worker host: $PICOBOT_HOST_ID, else the machine's host name (a safe queue name)."""
    raw = (os.environ.get(HOST_ENV) or "").strip() or socket.gethostname() or "localhost"
    return _UNSAFE.sub("_", raw)[:64] or "localhost"


def host_queue(host: str) -> str:
    return HOST_QUEUE_PREFIX + host


def enabled(config: "Config") -> bool:
    """Placement is on unless the workspace lives on storage every host mounts."""
    return not config.tools.workspace_storage


def beat(r: "redis.Redis", host: str) -> None:
    """A worker of `host` is alive (called with each heartbeat of a worker that takes turns)."""
    now = time.time()
    with r.pipeline(transaction=False) as pipe:
        pipe.zadd(keys.HOSTS, {host: now})
        pipe.zremrangebyscore(keys.HOSTS, 0, now - 86400)  # hosts gone for a day leave the set
        pipe.execute()
    _here.beat(host)


def live_hosts(r: "redis.Redis") -> dict[str, float]:
    """Hosts with a heartbeat within HOST_TTL_SECS, with its time."""
    rows: Any = r.zrangebyscore(keys.HOSTS, time.time() - HOST_TTL_SECS, "+inf", withscores=True)
    return {(h.decode() if isinstance(h, bytes) else str(h)): float(at) for h, at in rows}


def where(ports: "Ports", channel: str, chat_id: str) -> dict[str, Any] | None:
    """The chat's host record for /info: {"host", "moved_from", "moved_at", "alive"}; None when unpinned."""
    with ports.db.connect() as conn:
        row = chat_hosts.get(conn, channel, chat_id)
    if row is None:
        return None
    try:
        alive = row.host in live_hosts(ports.redis)
    except Exception:  # Redis down: /info still answers
        alive = None
    return {"host": row.host, "moved_from": row.moved_from, "moved_at": row.moved_at, "alive": alive}


def forwarded(ports: "Ports", session_id: str) -> bool:
    """True when the session's turn belongs on another live host and was sent to its queue.

    A session found to run here is remembered while this host's heartbeats go out (pinned_here.py):
    its next turns skip route()'s SQL read."""
    me = host_id()
    if _here.knows(me, session_id):
        return False
    asked = _here.clock()
    queue = route(ports, session_id)
    if queue is None:
        _here.remember(me, session_id, asked)
        return False
    ports.queue.enqueue_turn(session_id, queue=queue)
    log.debug("session %s: turn sent on to %s", session_id, queue)
    return True


def route(ports: "Ports", session_id: str) -> str | None:
    """The queue of the live host holding the session's chat when that is not this host, else None.

    None: run it here — placement is off, the session is gone, the chat is pinned here (now or
    before), or it was just moved here from a dead host. One read on the hot path; a write only on a
    chat's first task and on a move.
    """
    if not enabled(ports.config):
        return None
    me = host_id()
    with ports.db.connect() as conn:
        found = chat_hosts.of_session(conn, session_id)
    if found is None or found.host == me:
        return None
    channel, chat_id, holder = str(found.channel), str(found.chat_id), found.host
    if holder is None:
        with ports.db.begin() as conn:
            holder = chat_hosts.pin(conn, channel, chat_id, me)
        if holder == me:
            return None
    live = live_hosts(ports.redis)
    if holder not in live and me in live:  # dead; a host that cannot see itself (a flush) does not judge
        with ports.db.begin() as conn:
            if chat_hosts.move(conn, channel, chat_id, holder, me):
                _tell_moved(conn, session_id, holder, me)
                log.warning("chat %s:%s moved from the dead worker host %s to %s", channel, chat_id, holder, me)
                return None
            row = chat_hosts.get(conn, channel, chat_id)  # a rival moved it first: follow the record
        holder = me if row is None else str(row.host)
        if holder == me:
            return None
    return host_queue(holder)


def _tell_moved(conn: Any, session_id: str, old: str, new: str) -> None:
    """A note in the dialog's history (the agent reads it in every later turn; the UI shows it)."""
    text = (f"This chat moved from worker host {old}, which stopped, to {new}. Files written in the workspace "
            f"before the move stay on {old} and are not reachable now; recreate what is still needed.")
    messages.append(conn, session_id, None, [ChatMessage(role="system", content=text, marker=MARKER_HOST_MOVED)])
