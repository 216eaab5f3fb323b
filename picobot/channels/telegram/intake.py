"""Check one Telegram update and record it in the event inbox: what the poller and the webhook share.

Only `message` updates, and `callback_query` updates whose data is a slash command (a pressed inline
button, such as an approval's Approve), are recorded; every other type (edited_message, channel_post,
…) is ignored on purpose — an edit of a message the agent already answered would start a second turn.
A button press is recorded under `cb:<callback query id>` and becomes that command, sent by the presser.
A message is recorded only when it is well formed (ids are integers, text a string of at most 4096
UTF-16 units: what Telegram itself sends) and its sender is in `allow_from`: a stranger's message
stores nothing. The event key is `m:<chat id>:<message id>`, so the same message delivered again — a
crash before the poll offset moved on, a webhook retry — records nothing and starts nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeGuard

from picobot.config.access import allowed
from picobot.domain.text import TooDeep, repair_tree

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger("picobot.channels.telegram")

MAX_DEPTH = 32  # real updates nest about 6 deep (a reply's quoted message included)
MAX_TEXT_UNITS = 4096
RECORDED, DUPLICATE, IGNORED = "recorded", "duplicate", "ignored"


class Malformed(ValueError):
    """Not an update Telegram would send."""


def clean(value: Any) -> Any:
    """A JSON value with lone surrogates and NUL replaced; Malformed when it nests too deep."""
    try:
        return repair_tree(value, MAX_DEPTH)
    except TooDeep:
        raise Malformed(f"the update nests deeper than {MAX_DEPTH} levels") from None


def _int(value: Any) -> TypeGuard[int]:
    return type(value) is int  # not bool, not float


def _units(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def update_id(update: Any) -> int | None:
    value = update.get("update_id") if isinstance(update, dict) else None
    return value if _int(value) and value >= 0 else None


def message_problem(message: Any) -> str | None:
    """Why a `message` object is not one PicoBot can take, or None."""
    if not isinstance(message, dict):
        return "the message is not an object"
    if not (_int(message.get("message_id")) and message["message_id"] > 0):
        return "message_id is not a positive integer"
    chat, sender = message.get("chat"), message.get("from")
    if not (isinstance(chat, dict) and _int(chat.get("id")) and chat["id"] != 0):
        return "chat.id is not an integer"
    if not (isinstance(sender, dict) and _int(sender.get("id")) and sender["id"] > 0):
        return "from.id is not a positive integer (a channel post?)"
    if not isinstance(chat.get("type", "private"), str):
        return "chat.type is not a string"
    for key in ("text", "caption"):
        value = message.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key} is not a string"
        if isinstance(value, str) and _units(value) > MAX_TEXT_UNITS:
            return f"{key} is over {MAX_TEXT_UNITS} characters"
    return None


def event_key(message: dict[str, Any]) -> str:
    return f"m:{message['chat']['id']}:{message['message_id']}"


MAX_CALLBACK_DATA_BYTES = 64


def callback_problem(query: Any) -> str | None:
    """Why a `callback_query` is not a button press PicoBot takes (a slash command in its data), or None."""
    if not isinstance(query, dict):
        return "the callback query is not an object"
    if not (isinstance(query.get("id"), str) and 0 < len(query["id"]) <= 64):
        return "id is not a short string"
    sender, message, data = query.get("from"), query.get("message"), query.get("data")
    if not (isinstance(sender, dict) and _int(sender.get("id")) and sender["id"] > 0):
        return "from.id is not a positive integer"
    if not (isinstance(message, dict) and _int(message.get("message_id")) and isinstance(message.get("chat"), dict)
            and _int(message["chat"].get("id")) and message["chat"]["id"] != 0):
        return "the pressed message has no chat id and message id"
    if not (isinstance(data, str) and data.startswith("/")
            and len(data.encode("utf-8", "replace")) <= MAX_CALLBACK_DATA_BYTES):
        return "data is not a slash command"
    return None


def _accept_callback(rt: "ChannelPorts", channel: str, update: dict[str, Any]) -> str:
    query = update["callback_query"]
    problem = callback_problem(query)
    if problem:
        log.info("telegram (%s): ignored a button press: %s", channel, problem)
        return IGNORED
    sender = query["from"]
    if sender.get("is_bot") is True or not allowed(rt.config, channel, str(sender["id"])):
        log.info("telegram (%s): button press from %s ignored: not in allow_from", channel, sender["id"])
        return IGNORED
    from picobot.channels import events

    event_id, created = events.record(rt.db, channel, f"cb:{query['id']}",
                                      {"update_id": update.get("update_id"), "callback_query": query})
    if not created:
        return DUPLICATE
    try:
        rt.queue.enqueue_channel_event(event_id)
    except Exception as exc:  # recorded: the sweeper enqueues it once the broker is back
        log.warning("telegram (%s): event %s recorded, not enqueued (%s)", channel, event_id, type(exc).__name__)
    return RECORDED


def accept(rt: "ChannelPorts", channel: str, update: Any) -> str:
    """Record one update (already cleaned): recorded | duplicate | ignored. Raises when SQL is down."""
    if isinstance(update, dict) and "callback_query" in update and "message" not in update:
        return _accept_callback(rt, channel, update)
    message = update.get("message") if isinstance(update, dict) else None
    if message is None:
        kinds = [k for k in update if k != "update_id"] if isinstance(update, dict) else []
        log.debug("telegram (%s): ignored an update of type %.60s", channel, ",".join(kinds) or "none")
        return IGNORED
    problem = message_problem(message)
    if problem:
        log.info("telegram (%s): ignored a malformed message: %s", channel, problem)
        return IGNORED
    sender = message["from"]
    if sender.get("is_bot") is True:
        return IGNORED
    if not allowed(rt.config, channel, str(sender["id"])):
        log.info("telegram (%s): message from %s in chat %s ignored: not in allow_from", channel, sender["id"],
                 message["chat"]["id"])
        return IGNORED
    from picobot.channels import events

    payload = {"update_id": update.get("update_id"), "message": message}
    event_id, created = events.record(rt.db, channel, event_key(message), payload)
    if not created:
        return DUPLICATE
    try:
        rt.queue.enqueue_channel_event(event_id)
    except Exception as exc:  # recorded: the sweeper enqueues it once the broker is back
        log.warning("telegram (%s): event %s recorded, not enqueued (%s)", channel, event_id, type(exc).__name__)
    return RECORDED
