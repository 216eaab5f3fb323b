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

from flask import Blueprint, current_app, request
from flask_sock import ConnectionClosed, Sock

from picobot.gateway.inbound import InboundMessage
from picobot.gateway.intake import Gateway
from picobot.runtime.services import Runtime
from picobot.storage import sessions
from web.auth import pairing, request_token
from web.hub import EventHub, Outbox
from web.views import active_turn, history

log = logging.getLogger("picobot.web.ws")

PROTOCOL_VERSION = 1
REVERIFY_SECS = 10  # an open socket re-checks its device token this often
CHANNELS = {"cli_chat", "web"}
CHAT_ID = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")

sock = Sock()
bp = Blueprint("ws", __name__)


class Connection:
    def __init__(self, ws: Any, rt: Runtime, hub: EventHub, channel: str, chat_id: str):
        self.ws = ws
        self.rt = rt
        self.hub = hub
        self.gateway = Gateway(rt)
        self.channel = channel
        self.chat_id = chat_id
        self.outbox = Outbox(ws.send)
        self.session_id: str | None = None

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
            row = sessions.get_or_create_current(s, self.channel, self.chat_id)
            info = {"session_id": row.id, "dialog_id": row.dialog_id, "title": row.title}
        if info["session_id"] != self.session_id:
            if self.session_id:
                self.hub.unwatch(self.session_id, self.outbox)
            self.session_id = info["session_id"]
            self.hub.watch(self.session_id, self.outbox)
        self.send({"type": frame_type, "protocol": PROTOCOL_VERSION, "channel": self.channel,
                   "chat_id": self.chat_id, "session": info, "history": history(self.rt, info["session_id"]),
                   "active_turn": active_turn(self.rt, info["session_id"])})

    def close(self) -> None:
        if self.session_id:
            self.hub.unwatch(self.session_id, self.outbox)
        self.outbox.closed = True

    def handle(self, raw: str | bytes) -> None:
        limit = self.rt.config.gateway.max_frame_bytes
        if len(raw) > limit:
            self.error("frame_too_large", f"The frame has {len(raw)} bytes; the limit is {limit} (gateway.max_frame_bytes).")
            return
        try:
            frame = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            self.error("bad_json", f"The frame is not valid JSON: {exc}")
            return
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            self.error("bad_frame", 'A frame is a JSON object with a "type" (message, command, history, ping).')
            return
        handler = HANDLERS.get(frame["type"])
        if handler is None:
            self.error("unknown_type", f"Unknown frame type {frame['type'][:40]!r}; use message, command, history or ping.",
                       frame.get("id"))
            return
        handler(self, frame)


def on_message(conn: Connection, frame: dict[str, Any]) -> None:
    content = frame.get("content")
    if not isinstance(content, (str, list)):
        conn.error("bad_frame", '"content" must be a string or a list of content blocks.', frame.get("id"))
        return
    mode = frame.get("mode", "steer")
    if mode not in ("steer", "queue"):
        conn.error("bad_frame", '"mode" must be "steer" or "queue".', frame.get("id"))
        return
    submit(conn, InboundMessage(conn.channel, conn.chat_id, conn.chat_id, content, mode=mode), frame.get("id"))


def on_command(conn: Connection, frame: dict[str, Any]) -> None:
    text = frame.get("command") or frame.get("content")
    if not isinstance(text, str) or not text.strip().startswith("/"):
        conn.error("bad_frame", '"command" must be a string starting with "/".', frame.get("id"))
        return
    submit(conn, InboundMessage(conn.channel, conn.chat_id, conn.chat_id, text.strip()), frame.get("id"))


def submit(conn: Connection, msg: InboundMessage, frame_id: Any) -> None:
    try:
        reply = conn.gateway.submit(msg)
    except Exception:
        log.exception("could not accept input for %s:%s", conn.channel, conn.chat_id)
        conn.error("internal", "PicoBot could not accept the message (storage or queue unavailable). "
                   "Nothing was recorded; please retry.", frame_id)
        return
    out = reply.to_frame()
    if frame_id is not None:
        out["id"] = frame_id
    conn.send(out)
    if reply.session_changed:
        conn.attach_current()


def on_history(conn: Connection, frame: dict[str, Any]) -> None:
    limit = frame.get("limit", 200)
    if not isinstance(limit, int) or not 1 <= limit <= 1000:
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
    token = request_token()[0] if rt.config.gateway.pairing_required else None
    checked = time.monotonic()
    try:
        conn.attach_current("ready")
        while True:
            raw = ws.receive(timeout=REVERIFY_SECS)
            if token is not None and time.monotonic() - checked >= REVERIFY_SECS:
                checked = time.monotonic()
                if pairing().verify(token) is None:  # revoked while connected: hang up
                    ws.send(json.dumps({"type": "error", "code": "not_paired",
                                        "error": "This device's pairing was revoked; pair it again."}))
                    ws.close(reason=1008, message="pairing revoked")
                    return
            if raw is not None:
                conn.handle(raw)
    except ConnectionClosed:
        pass
    finally:
        conn.close()
