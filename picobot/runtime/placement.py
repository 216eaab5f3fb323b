"""Workspaces that follow the chat: a chat's turns run on the worker host that holds its files.

A worker host is every worker process sharing one disk (one `PICOBOT_HOST_ID`, by default the
machine's host name). Each worker that takes the `turns` queue also takes the Celery queue
`host.<id>` (it *serves* its host, `serve`), and its heartbeat keeps the host in the Redis sorted set
`picobot:hosts` and reports its load (running turns and turn slots) in `picobot:hosts:load`; the
chats pinned to a host since its last report count in its load too (`picobot:hosts:assigned`), so a
burst of new chats between two beats spreads instead of all going to the host that looked idle.

A chat's first task pins the chat: to this host, unless another live host is clearly less loaded
(LOAD_MARGIN), in which case the chat is pinned there and the task sent on. A worker that does not
serve its host (started with `-Q scheduled` only, say) never pins a chat to its own host: it pins the
chat to the least-loaded live host and sends the task there, or, knowing no load, to `turns`, where
a worker that serves its host decides. Later tasks arrive on any worker: `route` sends them on to the
holding host's queue while that host lives. When it is dead (no beat for HOST_TTL_SECS while this
host beats), a serving worker moves the chat to its own host, the move is recorded on the chat and
told to the agent in the dialog: the files written before stay on the dead host's disk.

`tools.workspace_storage` (a folder every host mounts) turns all of this off: every host then works
in the same files and any worker runs any turn.

A Redis flush (or a Redis that lost its data) empties the host set, and the hosts come back into it
one beat after the other: no host is judged dead until the set is HOST_TTL_SECS old (the time of its
first beat, `picobot:hosts:since`), by when every live host has beaten again; so a flush never moves a
chat.
"""

from __future__ import annotations

import logging
import os
import random
import re
import socket
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from picobot.coord import keys
from picobot.domain.messages import ChatMessage
from picobot.runtime.task_names import QUEUE_TURNS
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
LOAD_MARGIN = 0.25  # a new chat goes to another host when its share of busy turn slots is this much lower
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_UNSET = object()
_serving: Any = _UNSET  # set by a Celery worker at start (serve); unset: this process is its host
# half the time after which other hosts judge this one dead: the margin for a late beat and clocks
_here = PinnedHere(fresh_secs=HOST_TTL_SECS / 2)


@lru_cache(maxsize=1)
def host_id() -> str:
    """This process's worker host: $PICOBOT_HOST_ID, else the machine's host name (a safe queue name)."""
    raw = (os.environ.get(HOST_ENV) or "").strip() or socket.gethostname() or "localhost"
    return _UNSAFE.sub("_", raw)[:64] or "localhost"


def host_queue(host: str) -> str:
    return HOST_QUEUE_PREFIX + host


def serve(host: str | None) -> None:
    """Said once by a worker process at start: `host` when it consumes that host's queue (it takes
    turns), None when it does not (then it never pins a chat to its own host)."""
    global _serving
    _serving = host


def serving() -> str | None:
    """The host whose queue this process consumes, None when none. A process that never said (an
    in-process CLI run, a test) runs its tasks where it is: it serves its own host."""
    return host_id() if _serving is _UNSET else _serving


def enabled(config: "Config") -> bool:
    """Placement is on unless the workspace lives on storage every host mounts."""
    return not config.tools.workspace_storage


def beat(r: "redis.Redis", host: str, worker: str | None = None, running: int = 0, slots: int = 0) -> None:
    """A worker of `host` is alive (called with each heartbeat of a worker that takes turns); with
    `worker` and `slots`, it also reports its load: `running` turns and sub-agent runs of its `slots`."""
    now = time.time()
    with r.pipeline(transaction=False) as pipe:
        pipe.zadd(keys.HOSTS, {host: now})
        pipe.zremrangebyscore(keys.HOSTS, 0, now - 86400)  # hosts gone for a day leave the set
        pipe.set(keys.HOSTS_SINCE, f"{now:.3f}", nx=True)  # the set's first beat (again after a flush)
        if worker and slots > 0:
            pipe.hset(keys.HOST_LOAD, f"{host} {worker}", f"{int(running)} {int(slots)} {now:.3f}")
            pipe.hdel(keys.HOST_ASSIGNED, host)  # the chats pinned since the last report run in `running` now
        pipe.execute()
    _here.beat(host)
    if worker and random.random() < 0.02:  # now and then: forget the load of workers gone for a day
        _forget_gone(r, now - 86400)


def _forget_gone(r: "redis.Redis", before: float) -> None:
    raw: Any = r.hgetall(keys.HOST_LOAD)
    gone = [f for f, v in raw.items() if (_parse_load(v) or (0, 0, 0.0))[2] < before]
    if gone:
        r.hdel(keys.HOST_LOAD, *gone)


def _parse_load(value: Any) -> tuple[int, int, float] | None:
    try:
        running, slots, at = (value.decode() if isinstance(value, bytes) else str(value)).split()
        return int(running), int(slots), float(at)
    except ValueError:
        return None


@dataclass(frozen=True)
class Hosts:
    """The live hosts (host -> time of its last beat) and, for those that reported it, their load:
    the share of their turn-taking workers' slots that are busy (0.0 idle, 1.0 and more: full)."""

    live: dict[str, float]
    load: dict[str, float] = field(default_factory=dict)
    settled: bool = False  # the set is HOST_TTL_SECS old: a host missing from it is dead, not yet to beat


def live_hosts(r: "redis.Redis") -> dict[str, float]:
    """Hosts with a heartbeat within HOST_TTL_SECS, with its time."""
    return hosts(r, with_load=False).live


def hosts(r: "redis.Redis", with_load: bool = True) -> Hosts:
    """The live hosts and (with_load) their load: one round trip to Redis."""
    since = time.time() - HOST_TTL_SECS
    with r.pipeline(transaction=False) as pipe:
        pipe.zrangebyscore(keys.HOSTS, since, "+inf", withscores=True)
        pipe.get(keys.HOSTS_SINCE)
        if with_load:
            pipe.hgetall(keys.HOST_LOAD)
            pipe.hgetall(keys.HOST_ASSIGNED)
        found: list[Any] = pipe.execute()
    live = {(h.decode() if isinstance(h, bytes) else str(h)): float(at) for h, at in found[0]}
    settled = found[1] is not None and _float(found[1]) <= since
    if not with_load:
        return Hosts(live, settled=settled)
    busy: dict[str, list[int]] = {}
    for fld, value in found[2].items():
        host = (fld.decode() if isinstance(fld, bytes) else str(fld)).split(" ", 1)[0]
        parsed = _parse_load(value)
        if host in live and parsed is not None and parsed[2] >= since and parsed[1] > 0:
            acc = busy.setdefault(host, [0, 0])
            acc[0] += parsed[0]
            acc[1] += parsed[1]
    assigned = {(h.decode() if isinstance(h, bytes) else str(h)): int(n) for h, n in found[3].items()}
    return Hosts(live, {h: (running + assigned.get(h, 0)) / slots for h, (running, slots) in busy.items()}, settled)


def _assigned(r: "redis.Redis", host: str) -> None:
    """A new chat was pinned to `host`: it counts in the host's load until the host's next report."""
    try:
        r.hincrby(keys.HOST_ASSIGNED, host, 1)
    except Exception:  # the count only evens out new chats; the pin stands
        log.debug("could not count a new chat for %s", host, exc_info=True)


def _float(value: Any) -> float:
    try:
        return float(value.decode() if isinstance(value, bytes) else value)
    except ValueError:
        return float("inf")


def choose(view: Hosts, me: str | None) -> str | None:
    """The host for a new chat. `me` (the host this worker serves) unless another live host's load is
    lower by LOAD_MARGIN or more; without `me`, the least-loaded live host (ties drawn at random). When
    no live host's load is known: `me` (None for a worker that serves no host)."""
    loads = {h: v for h, v in view.load.items() if h in view.live}
    if not loads:
        return me
    best = min(loads, key=lambda h: (loads[h], random.random()))
    if me is None:
        return best
    mine = loads.get(me)
    if mine is None and me in view.live:
        return me  # this host's own load is not reported yet: it has room (its worker took the task)
    return best if best != me and (mine is None or mine - loads[best] >= LOAD_MARGIN) else me


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
    """True when the session's turn belongs elsewhere (another live host's queue, or `turns` for a worker
    that serves no host: see route) and was sent there.

    A session found to run here is remembered while this host's heartbeats go out (pinned_here.py):
    its next turns skip route()'s SQL read."""
    me = serving()
    if me is not None and _here.knows(me, session_id):
        return False
    asked = _here.clock()
    queue = route(ports, session_id)
    if queue is None:
        if me is not None:
            _here.remember(me, session_id, asked)
        return False
    ports.queue.enqueue_turn(session_id, queue=queue)
    log.debug("session %s: turn sent on to %s", session_id, queue)
    return True


def route(ports: "Ports", session_id: str) -> str | None:
    """The queue the session's task belongs on when that is not this worker, else None (run it here).

    None: placement is off, the session is gone, the chat is pinned to the host this worker serves
    (now, before, or moved here from a dead host). A queue: `host.<id>` of the live host holding the
    chat (or just given it: it is clearly less loaded), or `turns` when this worker serves no host and
    cannot place the chat itself (no load known, or its host is dead). One SQL read on the hot path;
    Redis (one round trip) only when the chat is held elsewhere; a write only on a chat's first task
    and on a move.
    """
    if not enabled(ports.config):
        return None
    me = serving()
    with ports.db.connect() as conn:
        found = chat_hosts.of_session(conn, session_id)
    if found is None or (me is not None and found.host == me):
        return None
    channel, chat_id, holder = str(found.channel), str(found.chat_id), found.host
    view = hosts(ports.redis, with_load=holder is None)
    if holder is None:
        target = choose(view, me)
        if target is None:
            return QUEUE_TURNS  # a worker that serves its host pins it
        with ports.db.begin() as conn:
            holder = chat_hosts.pin(conn, channel, chat_id, target)
        if holder == target:
            _assigned(ports.redis, target)
        if holder == me:
            return None
        if holder == target:
            log.debug("chat %s:%s pinned to the less loaded host %s", channel, chat_id, target)
            return host_queue(target)
    if holder in view.live:
        return host_queue(holder)
    if me is None:
        return QUEUE_TURNS  # the holder is dead: a worker that serves its host takes the chat over
    if me not in view.live or not view.settled:  # just after a flush: the holder may not have beaten yet
        return host_queue(holder)
    with ports.db.begin() as conn:
        if chat_hosts.move(conn, channel, chat_id, holder, me):
            _tell_moved(conn, session_id, holder, me)
            log.warning("chat %s:%s moved from the dead worker host %s to %s", channel, chat_id, holder, me)
            return None
        row = chat_hosts.get(conn, channel, chat_id)  # a rival moved it first: follow the record
    holder = me if row is None else str(row.host)
    return None if holder == me else host_queue(holder)


def _tell_moved(conn: Any, session_id: str, old: str, new: str) -> None:
    """A note in the dialog's history (the agent reads it in every later turn; the UI shows it)."""
    text = (f"This chat moved from worker host {old}, which stopped, to {new}. Files written in the workspace "
            f"before the move stay on {old} and are not reachable now; recreate what is still needed.")
    messages.append(conn, session_id, None, [ChatMessage(role="system", content=text, marker=MARKER_HOST_MOVED)])
