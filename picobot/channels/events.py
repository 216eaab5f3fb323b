"""The channel event inbox: record a raw platform event at once, turn it into input later.

A webhook (or long connection) verifies the event, `record`s it (unique per (channel, event_key):
a redelivery records nothing), enqueues `picobot.channel_event` and answers the platform. The
task runs `process`: adapter.normalize -> access check -> Gateway.submit; a command's answer or
a rejection becomes an outbox delivery keyed by the event, so running it twice sends it once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from picobot.channels import keys, outbound
from picobot.config.access import allowed
from picobot.coord import Lease
from picobot.security.redact import redact
from picobot.storage import channel_events as store
from picobot.storage import outbox
from picobot.storage.db import Database

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger("picobot.channels")

MAX_ATTEMPTS = 5  # for errors a retry cannot fix (a bug, an event we cannot read)
TRANSIENT_GIVE_UP_SECS = 24 * 3600  # the platform's API down or rate limited: keep trying this long
STALE_SECS = 10.0  # a pending event this old lost its task: the sweeper re-enqueues it
KICK_SECS = 30
PROCESS_LOCK_SECS = 300


def record(db: Database, channel: str, event_key: str, payload: dict[str, Any]) -> tuple[int, bool]:
    """(event id, created) — store the raw event before the platform is answered."""
    if not channel or not event_key:
        raise ValueError("a channel event needs a channel and an event key")
    return db.grouped(lambda conn: store.record(conn, channel, event_key[:256], payload))


def process(rt: "ChannelPorts", event_id: int) -> str:
    """Turn a recorded event into input; done | ignored | failed | pending (will be retried) | busy."""
    claim = Lease(rt.redis, keys.channel_event(event_id), PROCESS_LOCK_SECS)
    if not claim.acquire():
        return "busy"  # another task processes it right now
    try:
        return _process(rt, event_id)
    finally:
        claim.release()


def _process(rt: "ChannelPorts", event_id: int) -> str:
    with rt.db.begin() as conn:
        attempts = store.start_attempt(conn, event_id)
        row = store.get(conn, event_id)
    if row is None:
        log.warning("channel event %d does not exist", event_id)
        return "missing"
    if attempts is None:
        return row.status  # processed already: a second run changes nothing
    if attempts > MAX_ATTEMPTS:
        return _finish(rt, event_id, store.FAILED, f"given up after {MAX_ATTEMPTS} attempts: {row.error or 'no error kept'}")
    adapter = rt.channels.get(row.channel)
    if adapter is None:
        return _finish(rt, event_id, store.FAILED, f"channel {row.channel!r} is not a configured, enabled channel")
    try:
        inputs = adapter.normalize(dict(row.payload or {}))
    except Exception as exc:
        error = redact(f"{type(exc).__name__}: {exc}", rt.secrets)[:2000]
        transient = getattr(exc, "permanent", True) is False  # e.g. FeishuError on a 5xx, 429 or timeout
        if transient and time.time() - float(row.received_at or 0) < TRANSIENT_GIVE_UP_SECS:
            # An outage is not the event's fault: it does not use up its attempts.
            log.warning("channel event %d (%s) waits for the platform (%s); retried by the sweeper", event_id,
                        row.channel, error)
            with rt.db.begin() as conn:
                store.note_error(conn, event_id, error, uncount=True)
            return "pending"
        log.warning("channel event %d (%s) could not be read (attempt %d/%d): %s", event_id, row.channel,
                    attempts, MAX_ATTEMPTS, error)
        if attempts >= MAX_ATTEMPTS or transient:
            return _finish(rt, event_id, store.FAILED, error)
        with rt.db.begin() as conn:
            store.note_error(conn, event_id, error)
        return "pending"  # the sweeper tries it again
    return _finish(rt, event_id, _submit_all(rt, event_id, inputs))


def _submit_all(rt: "ChannelPorts", event_id: int, inputs: list[Any]) -> str:
    from picobot.gateway.intake import Gateway
    from picobot.runtime.services import Runtime

    if not isinstance(rt, Runtime):  # the gateway runs commands and turns: it needs the whole runtime
        raise TypeError(f"channel events need the process's runtime, not {type(rt).__name__}")

    status = store.IGNORED
    lanes: set[tuple[str, str]] = set()
    for index, msg in enumerate(inputs):
        if not allowed(rt.config, msg.channel, msg.sender_id):
            log.info("channel event %d: sender %s of %s:%s is not in allow_from; ignored", event_id,
                     msg.sender_id, msg.channel, msg.chat_id)
            continue
        key = f"e:{event_id}:{index}"
        if _answered(rt, msg, key):
            status = store.DONE  # a command that ran and was answered before a crash: not run twice
            continue
        reply = Gateway(rt).submit(msg)
        status = store.DONE
        if reply.kind not in ("command", "rejected") or not reply.text:
            continue
        kind = "command" if reply.kind == "command" else "notice"
        with rt.db.begin() as conn:
            outbound.record_message(conn, msg.channel, msg.chat_id, reply.text, kind=kind,
                                    key=key, session_id=reply.session_id,
                                    reply_to=msg.metadata.get("reply_to") or msg.platform_message_id)
        lanes.add((msg.channel, msg.chat_id))
    for channel, chat_id in lanes:
        outbound.wake(rt, channel, chat_id)
    return status


def _answered(rt: "ChannelPorts", msg: Any, key: str) -> bool:
    """A slash command of this event whose answer is in the outbox already. (A plain message needs no
    check: the inbound queue dedupes it on its platform message id.)"""
    from picobot.gateway.commands import is_command

    if not (isinstance(msg.content, str) and is_command(msg.content)):
        return False
    with rt.db.connect() as conn:
        return outbox.has_key(conn, outbound.delivery_key(key))


def _finish(rt: "ChannelPorts", event_id: int, status: str, error: str | None = None) -> str:
    with rt.db.begin() as conn:
        store.finish(conn, event_id, status, error)
    if status == store.FAILED:
        log.warning("channel event %d failed: %s", event_id, error)
    return status


def recover(rt: "ChannelPorts") -> int:
    """Sweeper: re-enqueue events pending longer than 10 s (a lost task, a dead worker, a failed read)."""
    with rt.db.connect() as conn:
        ids = store.stale(conn, time.time() - STALE_SECS)
    woken = 0
    for event_id in ids:
        if not rt.redis.set(keys.channel_event_kick(event_id), "1", nx=True, ex=KICK_SECS):
            continue
        try:
            rt.queue.enqueue_channel_event(event_id)
            woken += 1
        except Exception as exc:
            log.warning("channel event %d not re-enqueued (%s)", event_id, type(exc).__name__)
            break
    if woken:
        log.info("sweeper re-enqueued %d channel event(s)", woken)
    return woken
