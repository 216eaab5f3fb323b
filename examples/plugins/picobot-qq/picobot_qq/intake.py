"""Frames from the platform, whichever way they come (forward or reverse WebSocket, HTTP POST).

A message event for the bot is recorded (`ports.record_event`, keyed `<self_id>:<message_id>`, so a
redelivered event records nothing) and answered in a worker by the adapter's `normalize`. Only what
the bot should answer is stored: a private message, or a group message that @-mentions the bot or
replies to one of its messages, from a sender in `allow_from`. Meta events (lifecycle, heartbeat) go
to the channel's status; an API answer (it has an `echo`) to the call waiting for it; a malformed
frame is logged and dropped.
"""

from __future__ import annotations

import logging
from typing import Any

from picobot.plugins import HttpRequest, HttpResponse

from picobot_qq import state
from picobot_qq.config import HTTP, QQChannel, is_qq
from picobot_qq.message import FrameError, id_text, load_frame, mentions, parse_message, reply_id, signature_ok

log = logging.getLogger("picobot_qq")

RESPONSE, META, RECORDED, DUPLICATE, IGNORED, MALFORMED = "response", "meta", "recorded", "duplicate", "ignored", "malformed"


def handle(ports: Any, channel: str, raw: Any, link: Any = None) -> str:
    """Take one frame; what became of it (for logs and tests)."""
    try:
        frame = load_frame(raw, ports.settings("qq").max_frame_bytes)
    except FrameError as exc:
        log.warning("qq (%s): a malformed frame was dropped: %s", channel, exc)
        return MALFORMED
    if "echo" in frame and "post_type" not in frame:
        if link is not None:
            link.answer(frame)
        return RESPONSE
    post_type = frame.get("post_type")
    if post_type == "meta_event":
        _meta(ports.redis, channel, frame)
        return META
    if post_type != "message":
        return IGNORED  # notices, requests, the bot's own `message_sent`
    cfg = QQChannel.of(channel, ports.channel(channel) or {})
    if not wanted(ports.redis, cfg, frame):
        return IGNORED
    _, created = ports.record_event(channel, f"{id_text(frame.get('self_id'))}:{id_text(frame.get('message_id'))}",
                                    frame)
    return RECORDED if created else DUPLICATE


def wanted(r: Any, cfg: QQChannel, event: dict[str, Any]) -> bool:
    """A message the bot answers: ids present, from an allowed sender other than itself, and addressed."""
    self_id, user_id = id_text(event.get("self_id")), id_text(event.get("user_id"))
    if not self_id or not user_id or not id_text(event.get("message_id")) or user_id == self_id:
        return False
    if not cfg.allows(user_id):
        log.info("qq (%s): message from %s ignored: not in allow_from", cfg.key, user_id)
        return False
    return addressed(r, cfg.key, event)


def addressed(r: Any, channel: str, event: dict[str, Any]) -> bool:
    """Private, or a group message that @-mentions the bot or replies to a message the bot sent."""
    kind = event.get("message_type")
    if kind == "private":
        return True
    if kind != "group" or not id_text(event.get("group_id")):
        return False
    segments = parse_message(event.get("message"))
    if mentions(segments, id_text(event.get("self_id"))):
        return True
    return state.was_sent(r, channel, reply_id(segments))


def _meta(r: Any, channel: str, frame: dict[str, Any]) -> None:
    kind, self_id = frame.get("meta_event_type"), id_text(frame.get("self_id"))
    fields: dict[str, Any] = {"self_id": self_id} if self_id else {}
    if kind == "heartbeat":
        status = frame.get("status")
        online = status.get("online") if isinstance(status, dict) else None
        fields.update(heartbeat_at=frame.get("time") if isinstance(frame.get("time"), int) else None,
                      online=online if isinstance(online, bool) else None)
        state.note_meta(r, channel, **fields)
    elif kind == "lifecycle":
        sub = frame.get("sub_type") if isinstance(frame.get("sub_type"), str) else ""
        state.note_meta(r, channel, lifecycle=sub[:20], **fields)


# ---- HTTP POST event reporting -----------------------------------------------------------------


def http_events(request: HttpRequest, ports: Any) -> HttpResponse:
    """POST /qq/<channel>: an event the platform reports over HTTP, signed with the channel's `secret`."""
    channel = request.params.get("channel", "")
    raw = ports.channel(channel)
    if raw is None or not is_qq(raw) or not raw.get("enabled") or QQChannel.of(channel, raw).mode != HTTP:
        return HttpResponse.json({"error": "no QQ channel takes HTTP events here"}, 404)
    cfg = QQChannel.of(channel, raw)
    if cfg.secret and not signature_ok(cfg.secret, request.body, request.headers.get("x-signature")):
        log.warning("qq (%s): an HTTP event with a wrong X-Signature was refused", channel)
        return HttpResponse.json({"error": "bad signature"}, 401)
    handle(ports, channel, request.body)
    return HttpResponse(204)
