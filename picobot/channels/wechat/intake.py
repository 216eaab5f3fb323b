"""Check one getupdates message and record it in the event inbox: what the poller does with each.

A message is taken when it is well formed (a user's message, message_type 1, from a `…` user id
string, items a list) and its sender is in `allow_from`: a stranger's message stores nothing, not
even its context token. iLink delivers at least once — replays come 1–10 s apart, sometimes under a
new message_id — so, as Tencent's own client does, a message is a replay when any of its keys was
seen within 24 h: message_id, then client_id, then seq, then sha256(text + create_time_ms). The keys
live in SQL (`channel_state`), so a restart forgets none of them; the event itself goes to the
inbox under its first key. Taking a message also keeps the sender's context_token (replies need it)
and releases deliveries held for that user (outbox `deferred`, see adapter.py).
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any

from picobot.config.access import allowed
from picobot.domain.text import TooDeep, repair_tree

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger("picobot.channels.wechat")

MAX_DEPTH = 16
MAX_ID_CHARS = 256
MAX_TEXT_CHARS = 100_000  # far over what WeChat lets a user type; more is not a real message
RECORDED, DUPLICATE, IGNORED = "recorded", "duplicate", "ignored"
USER_MESSAGE = 1


class Malformed(ValueError):
    """Not a message iLink would send."""


def clean(value: Any) -> Any:
    """A JSON value with lone surrogates and NUL replaced; Malformed when it nests too deep."""
    try:
        return repair_tree(value, MAX_DEPTH)
    except TooDeep:
        raise Malformed(f"the message nests deeper than {MAX_DEPTH} levels") from None


def _id(value: Any) -> str | None:
    """An id as a string (message_id is a uint64: kept as text); None when absent or odd."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS:
        return value
    return None


def text_of(msg: dict[str, Any]) -> str:
    parts = []
    for item in msg.get("item_list") or []:
        if isinstance(item, dict) and isinstance(item.get("text_item"), dict):
            text = item["text_item"].get("text")
            if isinstance(text, str):
                parts.append(text)
    return "\n".join(parts)


def problem(msg: Any) -> str | None:
    """Why a message is not one PicoBot takes, or None."""
    if not isinstance(msg, dict):
        return "not an object"
    if type(msg.get("message_type")) is not int or msg["message_type"] != USER_MESSAGE:  # true == 1 in Python
        return "not a user's message (message_type is not 1)"
    sender = msg.get("from_user_id")
    if not (isinstance(sender, str) and 0 < len(sender) <= MAX_ID_CHARS):
        return "from_user_id is not a string id"
    items = msg.get("item_list")
    if not isinstance(items, list) or not items:
        return "item_list is not a list of items"
    if msg.get("context_token") is not None and not isinstance(msg.get("context_token"), str):
        return "context_token is not a string"
    if len(text_of(msg)) > MAX_TEXT_CHARS:
        return f"the text is over {MAX_TEXT_CHARS} characters"
    if not dedupe_keys(msg):
        return "it has no id of any kind"
    return None


def dedupe_keys(msg: dict[str, Any]) -> list[str]:
    """message_id, client_id, seq, then a hash of the text and its time — the order Tencent dedupes in."""
    found = []
    for prefix, field in (("m", "message_id"), ("c", "client_id"), ("s", "seq")):
        value = _id(msg.get(field))
        if value is not None:
            found.append(f"{prefix}:{value}")
    stamp = _id(msg.get("create_time_ms"))
    text = text_of(msg)
    if stamp is not None or text:
        digest = hashlib.sha256(f"{text}\x00{stamp or ''}".encode("utf-8", "replace")).hexdigest()
        found.append(f"h:{digest}")
    return found


def accept(rt: ChannelPorts, channel: str, raw: Any) -> str:
    """Record one message: recorded | duplicate | ignored. Raises when SQL is down (the batch is polled again)."""
    try:
        msg = clean(raw)
    except (Malformed, RecursionError) as exc:
        log.info("wechat (%s): ignored a message: %s", channel, exc)
        return IGNORED
    why = problem(msg)
    if why:
        log.info("wechat (%s): ignored a message: %s", channel, why)
        return IGNORED
    sender = msg["from_user_id"]
    if not allowed(rt.config, channel, sender):
        log.info("wechat (%s): message from %s ignored: not in allow_from", channel, sender)
        return IGNORED
    return _record(rt, channel, msg, sender)


def _record(rt: ChannelPorts, channel: str, msg: dict[str, Any], sender: str) -> str:
    from picobot.channels.wechat import state
    from picobot.storage import channel_events, outbox

    keys = dedupe_keys(msg)
    with rt.db.begin() as conn:
        if state.seen(conn, channel, keys):
            return DUPLICATE
        event_id, created = channel_events.record(conn, channel, keys[0], {"message": msg})
        state.mark_seen(conn, channel, keys, event_id)
        if not created:
            return DUPLICATE  # seen more than 24 h ago under this very id: a replay still
        if msg.get("context_token"):
            state.note_context(conn, channel, sender, msg["context_token"])
        released = outbox.release_deferred(conn, channel, sender)
    if released:
        log.info("wechat (%s): %s wrote again; %d held deliver%s released", channel, sender, released,
                 "y" if released == 1 else "ies")
        from picobot.channels import outbound

        outbound.wake(rt, channel, sender)
    try:
        rt.queue.enqueue_channel_event(event_id)
    except Exception as exc:  # recorded: the sweeper enqueues it once the broker is back
        log.warning("wechat (%s): event %s recorded, not enqueued (%s)", channel, event_id, type(exc).__name__)
    return RECORDED
