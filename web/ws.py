"""/ws: receive a frame, validate it, hand it to the gateway, relay turn events back.

The protocol is documented in docs/PROTOCOL.md.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from typing import Any

import redis
from flask import Blueprint, current_app, request
from flask_sock import ConnectionClosed, Sock
from sqlalchemy.exc import SQLAlchemyError

from picobot.domain.scope import SOCKET_CHANNELS
from picobot.config.access import agent_for
from picobot.gateway.inbound import InboundMessage
from picobot.gateway.intake import Gateway
from picobot.app import App as Runtime
from picobot.storage import sessions
from picobot.gateway.limits import Limited, SocketSlot
from web.auth import client_key, pairing, request_token
from web.frames import FrameError, frame_bytes, parse_frame
from web.hub import EventHub
from web.outbox import Outbox, WsTransport
from web.views import active_turn, history

log = logging.getLogger("picobot.web.ws")

PROTOCOL_VERSION = 1
REVERIFY_SECS = 10  # an open socket re-checks its device token this often
PING_SECS = 25  # keepalive; a client that has not answered the previous ping by then is gone
CLOSE_FLUSH_SECS = 2.0  # how long a closing socket may take to send its last frames
INTERNAL_ERROR = 1011
CHANNELS = SOCKET_CHANNELS
CHAT_ID = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")

sock = Sock()
bp = Blueprint("ws", __name__)


class Connection:
    def __init__(self, ws: Any, rt: Runtime, hub: EventHub, channel: str, chat_id: str):
        self.ws = ws
        self.rt = rt
        self.hub = hub
        self.gateway = Gateway(rt, current_app.extensions.get("picobot.rate_limits"))
        self.device = client_key()  # whom the per-device rate limits count
        self.slot: SocketSlot | None = None
        self.channel = channel
        self.chat_id = chat_id
        self.outbox = Outbox(WsTransport(ws), hub.limits)
        self.session_id: str | None = None
        self.hub.watch_chat(f"{channel}:{chat_id}", self.outbox)  # chat-wide frames of its other dialogs

    def send(self, frame: dict[str, Any]) -> None:
        self.hub.deliver(self.outbox, frame)

    def error(self, code: str, text: str, frame_id: Any = None) -> None:
        frame: dict[str, Any] = {"type": "error", "code": code, "error": text}
        if frame_id is not None:
            frame["id"] = frame_id
        self.send(frame)

    def attach_current(self, frame_type: str = "session") -> None:
        """Watch the chat's current dialog and send its state (history, active turn)."""
        with self.rt.db.write() as s:
            row = sessions.get_or_create_current(s, self.channel, self.chat_id, agent_for(self.rt.config, self.channel))
            info = {"session_id": row.id, "dialog_id": row.dialog_id, "title": row.title}
        if info["session_id"] != self.session_id:
            if self.session_id:
                self.hub.unwatch(self.session_id, self.outbox)
            self.session_id = info["session_id"]
            self.hub.watch(self.session_id, self.outbox)
        self.send({"type": frame_type, "protocol": PROTOCOL_VERSION, "channel": self.channel,
                   "chat_id": self.chat_id, "session": info, "history": history(self.rt, info["session_id"]),
                   "active_turn": active_turn(self.rt, info["session_id"])})
        for frames in self.rt.plugins.call("picobot_session_state", session_id=info["session_id"], ports=self.rt):
            for frame in frames if isinstance(frames, list) else ():
                if isinstance(frame, dict) and isinstance(frame.get("type"), str):  # a capability's state (its plan)
                    self.send(frame)

    def close(self) -> None:
        self.hub.unwatch_chat(f"{self.channel}:{self.chat_id}", self.outbox)
        if self.session_id:
            self.hub.unwatch(self.session_id, self.outbox)
        self.outbox.close()

    def hang_up(self, code: int, reason: str) -> None:
        """Send what is queued and a close frame, then stop."""
        self.hub.close_socket(self.outbox, code, reason)
        self.outbox.wait_flushed(CLOSE_FLUSH_SECS)

    def handle(self, raw: str | bytes) -> None:
        limit = self.rt.config.gateway.max_frame_bytes
        size = frame_bytes(raw)
        if size > limit:
            self.error("frame_too_large", f"The frame has {size} bytes; the limit is {limit} (gateway.max_frame_bytes).")
            return
        try:
            frame = parse_frame(raw)
        except FrameError as exc:
            self.error("bad_json", str(exc))
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            self.error("bad_frame", 'A frame is a JSON object with a "type" (message, command, history, ping).')
            return
        handler = HANDLERS.get(frame["type"])
        if handler is None:
            self.error("unknown_type", f"Unknown frame type {frame['type'][:40]!r}; use message, command, history or ping.",
                       frame.get("id"))
            return
        try:
            handler(self, frame)
        except Exception as exc:  # the socket outlives a failing database or Redis
            self.failed(exc, frame["type"], frame.get("id"))

    def failed(self, exc: Exception, what: str, frame_id: Any) -> None:
        """Log a failure once with its detail; tell the client what happened without it."""
        code, text = failure_reply(exc)
        # the driver's first line says what failed; the SQL and its parameters (user text) stay out
        detail = (str(exc).splitlines() or [""])[0][:200]
        log.error("%s frame on %s:%s failed: %s: %s", what[:40], self.channel, self.chat_id, type(exc).__name__,
                  detail, exc_info=code == "internal")
        self.error(code, text, frame_id)


def failure_reply(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, (SQLAlchemyError, redis.RedisError)):
        return "unavailable", ("PicoBot's database or Redis is unavailable right now; nothing was changed. "
                               "Retry in a moment.")
    return "internal", "PicoBot failed to handle this frame; nothing was changed. Retry, or report it if it persists."


def on_message(conn: Connection, frame: dict[str, Any]) -> None:
    content = frame.get("content")
    if not isinstance(content, (str, list)):
        conn.error("bad_frame", '"content" must be a string or a list of content blocks.', frame.get("id"))
        return
    mode = frame.get("mode", "steer")
    if mode not in ("steer", "queue"):
        conn.error("bad_frame", '"mode" must be "steer" or "queue".', frame.get("id"))
        return
    submit(conn, InboundMessage(conn.channel, conn.chat_id, conn.chat_id, content, mode=mode,
                                metadata={"device": conn.device}), frame.get("id"))


def on_command(conn: Connection, frame: dict[str, Any]) -> None:
    text = frame.get("command") or frame.get("content")
    if not isinstance(text, str) or not text.strip().startswith("/"):
        conn.error("bad_frame", '"command" must be a string starting with "/".', frame.get("id"))
        return
    submit(conn, InboundMessage(conn.channel, conn.chat_id, conn.chat_id, text.strip(),
                                metadata={"device": conn.device}), frame.get("id"))


def submit(conn: Connection, msg: InboundMessage, frame_id: Any) -> None:
    try:
        reply = conn.gateway.submit(msg)
    except Exception as exc:
        conn.failed(exc, "input", frame_id)
        return
    out = reply.to_frame()
    if frame_id is not None:
        out["id"] = frame_id
    conn.send(out)
    if reply.session_changed:
        conn.attach_current()


def on_history(conn: Connection, frame: dict[str, Any]) -> None:
    limit = frame.get("limit", 200)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        conn.error("bad_frame", '"limit" must be an integer from 1 to 1000.', frame.get("id"))
        return
    sid = conn.session_id or ""
    conn.send({"type": "history", "id": frame.get("id"), "session_id": sid, "messages": history(conn.rt, sid, limit),
               "active_turn": active_turn(conn.rt, sid)})


def on_ping(conn: Connection, frame: dict[str, Any]) -> None:
    conn.send({"type": "pong", "id": frame.get("id")})


HANDLERS = {"message": on_message, "command": on_command, "history": on_history, "ping": on_ping}


@sock.route("/ws", bp=bp)
def ws_endpoint(ws: Any) -> None:
    rt: Runtime = current_app.extensions["picobot"]
    hub: EventHub = current_app.extensions["picobot.hub"]
    channel = request.args.get("channel", "cli_chat")
    chat_id = request.args.get("chat_id") or "web-" + secrets.token_hex(6)
    if channel not in CHANNELS or not CHAT_ID.match(chat_id):
        ws.send(json.dumps({"type": "error", "code": "bad_request",
                            "error": f"channel must be one of {sorted(CHANNELS)} and chat_id match {CHAT_ID.pattern}"}))
        ws.close(reason=1008, message="bad request")
        return
    conn = Connection(ws, rt, hub, channel, chat_id)
    try:
        if take_socket_slot(conn, ws):
            serve(conn, ws)
    except ConnectionClosed:
        pass
    except Exception as exc:  # never an HTTP 500 written into an upgraded socket
        log.exception("websocket handler for %s:%s failed", channel, chat_id)
        code, text = failure_reply(exc)
        conn.error(code, text)
        conn.hang_up(INTERNAL_ERROR, "internal error; reconnect to continue")
    finally:
        conn.close()
        if conn.slot is not None:
            conn.slot.release()


def take_socket_slot(conn: Connection, ws: Any) -> bool:
    """Count this socket against its device's limit; a socket over it gets `rate_limited` and 1013."""
    slot = conn.gateway.limits.open_socket(conn.device)
    if isinstance(slot, Limited):
        # straight to the socket: nothing else has been sent or queued on it yet
        ws.send(json.dumps({"type": "error", "code": "rate_limited", "error": slot.text,
                            "retry_after": slot.retry_after}))
        ws.close(reason=1013, message="too many connections")
        return False
    conn.slot = slot
    return True


def serve(conn: Connection, ws: Any) -> None:
    """Send `ready`, then handle frames until the client goes; re-check pairing, keep the link alive."""
    rt = conn.rt
    token = request_token()[0] if rt.config.gateway.pairing_required else None
    checked = next_ping = time.monotonic()
    next_ping += PING_SECS
    conn.attach_current("ready")
    while True:
        raw = ws.receive(timeout=max(0.05, min(next_ping, checked + REVERIFY_SECS) - time.monotonic()))
        now = time.monotonic()
        if now >= next_ping:
            if not keep_alive(conn, ws):
                return
            next_ping = now + PING_SECS
        if now - checked >= REVERIFY_SECS:
            checked = now
            if token is not None and revoked(token, conn):  # revoked while connected: hang up
                conn.error("not_paired", "This device's pairing was revoked; pair it again.")
                conn.hang_up(1008, "pairing revoked")
                return
        if conn.slot is not None:
            conn.slot.keep()
        if raw is not None:
            conn.handle(raw)


def revoked(token: str, conn: Connection) -> bool:
    """True when the device's token is known to be revoked. A database or Redis error is not a
    verdict: the socket stays and the next check decides, so an outage does not drop every client."""
    try:
        return pairing().verify(token) is None
    except (SQLAlchemyError, redis.RedisError) as exc:
        log.warning("could not re-check the device token on %s:%s: %s", conn.channel, conn.chat_id,
                    type(exc).__name__)
        return False


def keep_alive(conn: Connection, ws: Any) -> bool:
    """Ping through the socket's own queue, so a ping never lands inside a half-written frame."""
    if not ws.pong_received:
        conn.hang_up(1008, "Ping/Pong timeout")
        return False
    ws.pong_received = False
    conn.hub.ping(conn.outbox)
    return True
