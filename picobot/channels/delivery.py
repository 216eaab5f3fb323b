"""The delivery loop: one (channel, chat) lane at a time, in order, with backoff and permanent errors.

`deliver_lane` holds the lane's Redis lock (`picobot:lane:<channel>:<chat_id>`, SET NX PX 20 s,
renewed while it works, released compare-and-delete) and hands the lane's pending rows, oldest
first, to the channel's adapter:

- success: the row is `sent`, the adapter's result kept;
- transient DeliveryError (or any other exception): attempts+1, `next_attempt_at` = now + backoff
  (1, 2, 4 … s capped at 60, or the platform's retry_after), the lane stops there (order!) and is
  re-enqueued with that countdown; a row still failing a day after it was written fails (`gave_up`);
- permanent DeliveryError: the row is `failed` with its code and error (logged once); the lane
  moves on;
- DeliveryError(defer=True) (a delivery window: the user must write first): the row is `deferred`
  and the lane moves on; the channel puts it back to pending when that chat writes again.

SQL is the truth: a lost task, a dead worker or a Redis FLUSHALL loses nothing, because the
sweeper (`recover`) re-enqueues lanes that have due pending rows and no lock holder.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import redis

from picobot.channels import keys
from picobot.channels.base import Delivery, DeliveryError
from picobot.channels.registry import ChannelError
from picobot.coord import KeptLease
from picobot.security.redact import redact
from picobot.storage import outbox

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger("picobot.channels")

LOCK_MS = 20_000  # short: a killed worker holds a lane at most this long
RENEW_SECS = 5.0
MAX_BACKOFF_SECS = 60.0
GIVE_UP_SECS = 24 * 3600.0  # transient errors are retried this long after the row was written, then it fails
MIN_ATTEMPTS_BEFORE_GIVING_UP = 10
STALE_SECS = 5.0  # a pending row this old, in a lane nobody holds, lost its wake-up: the sweeper re-enqueues
KICK_SECS = 10  # the sweeper enqueues a lane at most this often
MAX_ERROR_CHARS = 2000
MAX_VOICE_ATTEMPTS = 3  # a spoken answer whose speech keeps failing is given up soon (its text went already)

lane_key = keys.lane


class LaneLock(KeptLease):
    """The lane's lock, renewed by a thread while held; `held` turns False when it was lost.

    Lost (expired or taken, e.g. a FLUSHALL): the deliverer finishes the row at hand, then stops.
    """

    def __init__(self, r: redis.Redis, channel: str, chat_id: str):
        super().__init__(r, keys.lane(channel, chat_id), LOCK_MS / 1000, renew_secs=RENEW_SECS)


def backoff(attempts: int, retry_after: float | None) -> float:
    """Seconds before the next try: the platform's retry_after, else 1, 2, 4 … capped at 60."""
    if retry_after is not None and retry_after > 0:
        return min(float(retry_after), 3600.0)
    return min(MAX_BACKOFF_SECS, float(2 ** min(attempts, 16)))


def deliver_lane(rt: "ChannelPorts", channel: str, chat_id: str) -> dict[str, Any]:
    """Deliver the lane's pending rows in order. {"sent", "failed", "state"}; state busy|done|waiting|lost."""
    totals = {"sent": 0, "failed": 0, "state": "done"}
    while True:
        lock = LaneLock(rt.redis, channel, chat_id)
        if not lock.acquire():
            totals["state"] = "busy"  # its holder re-checks the lane after it lets go
            return totals
        try:
            state = _drain(rt, channel, chat_id, lock, totals)
        finally:
            lock.release()
        totals["state"] = state
        # a row recorded while we held the lock was woken in vain (busy): look again now the lock is free
        if state != "done" or not _ready(rt, channel, chat_id):
            return totals


def _ready(rt: "ChannelPorts", channel: str, chat_id: str) -> bool:
    with rt.db.connect() as conn:
        rows = outbox.lane(conn, channel, chat_id, limit=1)
    return bool(rows) and (rows[0].next_attempt_at is None or rows[0].next_attempt_at <= time.time())


def _drain(rt: "ChannelPorts", channel: str, chat_id: str, lock: LaneLock, totals: dict[str, Any]) -> str:
    try:
        adapter = rt.channels.adapter(channel)
        unusable = None
    except ChannelError as exc:
        adapter, unusable = None, str(exc)
    while True:
        with rt.db.connect() as conn:
            rows = outbox.lane(conn, channel, chat_id)
        if not rows:
            return "done"
        for row in rows:
            if not lock.held:
                return "lost"
            now = time.time()
            if row.next_attempt_at is not None and row.next_attempt_at > now:
                _enqueue(rt, channel, chat_id, row.next_attempt_at - now)
                return "waiting"  # order: nothing behind it goes first
            if adapter is None:
                _fail(rt, row, f"channel {channel!r} can not deliver: {unusable}", "channel_unavailable")
                totals["failed"] += 1
                continue
            outcome = _deliver_one(rt, adapter, row)
            if outcome == "sent":
                totals["sent"] += 1
            elif outcome == "failed":
                totals["failed"] += 1
            elif outcome == "retry":
                return "waiting"


def _deliver_one(rt: "ChannelPorts", adapter: Any, row: Any) -> str:
    """sent | failed | retry | skipped (no longer pending: delivered by another holder, or retried by hand)."""
    with rt.db.connect() as conn:
        if outbox.status_of(conn, row.id) != outbox.PENDING:
            return "skipped"
    delivery = Delivery(id=row.id, channel=row.channel, chat_id=row.chat_id, kind=row.kind,
                        payload=dict(row.payload or {}), idempotency_key=row.idempotency_key, attempts=row.attempts)
    try:
        result = _voice(rt, adapter, delivery) if delivery.kind == "voice" else adapter.deliver(delivery)
    except DeliveryError as exc:
        if exc.defer:
            _defer(rt, row, str(exc), exc.code)
            return "deferred"
        if exc.permanent:
            _fail(rt, row, str(exc), exc.code)
            return "failed"
        return _retry_or_give_up(rt, row, str(exc), exc.code, exc.retry_after)
    except Exception as exc:  # a bug or an outage the adapter did not classify: transient
        log.exception("delivery %d to %s:%s raised", row.id, row.channel, row.chat_id)
        return _retry_or_give_up(rt, row, f"{type(exc).__name__}: {exc}", "internal", None)
    with rt.db.begin() as conn:
        outbox.mark_sent(conn, row.id, result if isinstance(result, dict) else None)
    if rt.plugins.events.has("message.delivered"):
        rt.plugins.publish("message.delivered", channel=row.channel, chat_id=row.chat_id, delivery_id=row.id,
                           kind=row.kind, session_id=delivery.payload.get("session_id"),
                           turn_id=delivery.payload.get("turn_id"))
    return "sent"


def _voice(rt: "ChannelPorts", adapter: Any, delivery: Delivery) -> dict[str, Any] | None:
    """A spoken answer: speech from the plugins (`picobot_speech`), sent by the adapter's `deliver_voice`.

    Nothing to send (no speech configured, a channel without voice) is done with a note; speech that
    failed now is retried like any transient failure, but only MAX_VOICE_ATTEMPTS times: a spoken answer
    an hour late helps nobody, and the text answer went already.
    """
    send = getattr(adapter, "deliver_voice", None)
    if send is None:
        return {"skipped": "this channel sends no voice messages"}
    clip = rt.plugins.first("picobot_speech", text=str((delivery.payload or {}).get("text") or ""), ports=rt)
    if clip is None:
        return {"skipped": "no speech configured (voice.tts)"}
    if isinstance(clip, str) or not isinstance(getattr(clip, "data", None), bytes):
        why = clip if isinstance(clip, str) else "the speech plugin returned no audio"
        raise DeliveryError(f"speech failed: {why}", permanent=delivery.attempts + 1 >= MAX_VOICE_ATTEMPTS,
                            code="speech")
    return send(delivery, clip)


def _clean(rt: "ChannelPorts", error: str) -> str:
    return redact(error, rt.secrets)[:MAX_ERROR_CHARS]


def _fail(rt: "ChannelPorts", row: Any, error: str, code: str | None) -> None:
    error = _clean(rt, error)
    with rt.db.begin() as conn:
        changed = outbox.mark_failed(conn, row.id, error, code)
    if changed:  # once per row
        log.warning("delivery %d (%s) to %s:%s failed permanently [%s]: %s", row.id, row.kind, row.channel,
                    row.chat_id, code or "-", error)


def _defer(rt: "ChannelPorts", row: Any, error: str, code: str | None) -> None:
    with rt.db.begin() as conn:
        outbox.mark_deferred(conn, row.id, _clean(rt, error), code)
    log.info("delivery %d to %s:%s held until the chat writes again [%s]: %s", row.id, row.channel, row.chat_id,
             code or "-", _clean(rt, error))


def _retry_or_give_up(rt: "ChannelPorts", row: Any, error: str, code: str | None, retry_after: float | None) -> str:
    # a day of outage: say so (a retry by hand starts the count of attempts again)
    if row.attempts >= MIN_ATTEMPTS_BEFORE_GIVING_UP and time.time() - float(row.created_at or 0) >= GIVE_UP_SECS:
        _fail(rt, row, f"still failing after {GIVE_UP_SECS / 3600:.0f} h: {error}", "gave_up")
        return "failed"
    _retry(rt, row, error, code, retry_after)
    return "retry"


def _retry(rt: "ChannelPorts", row: Any, error: str, code: str | None, retry_after: float | None) -> None:
    delay = backoff(row.attempts, retry_after)
    error = _clean(rt, error)
    with rt.db.begin() as conn:
        outbox.mark_retry(conn, row.id, error, code, time.time() + delay)
    log.info("delivery %d to %s:%s failed (attempt %d, retry in %.1f s) [%s]: %s", row.id, row.channel,
             row.chat_id, row.attempts + 1, delay, code or "-", error)
    _enqueue(rt, row.channel, row.chat_id, delay)


def _enqueue(rt: "ChannelPorts", channel: str, chat_id: str, countdown: float) -> None:
    try:
        rt.queue.enqueue_delivery(channel, chat_id, countdown=max(0.0, countdown))
    except Exception as exc:  # the sweeper re-enqueues due lanes
        log.warning("delivery lane %s:%s not re-enqueued (%s)", channel, chat_id, type(exc).__name__)


def recover(rt: "ChannelPorts") -> int:
    """Sweeper: enqueue lanes with due pending rows whose lock is free (lost task, dead worker, FLUSHALL)."""
    now = time.time()
    with rt.db.connect() as conn:
        lanes = outbox.due_lanes(conn, now, now - STALE_SECS)
    woken = 0
    for channel, chat_id in lanes:
        if rt.redis.exists(keys.lane(channel, chat_id)):
            continue
        if not rt.redis.set(keys.lane_kick(channel, chat_id), "1", nx=True, ex=KICK_SECS):
            continue  # enqueued a moment ago; its task may be waiting for a free worker
        _enqueue(rt, channel, chat_id, 0)
        woken += 1
    if woken:
        log.info("sweeper re-enqueued %d delivery lane(s)", woken)
    return woken
