"""Holding a channel's WebSocket: forward (the `connection` process dials `ws_url`) or reverse (the
platform dials the web at `/qq/ws/<channel>`).

Whoever holds it runs a `Link`: frames read from the socket go to intake; a pump thread takes the
API calls deliveries queued in Redis (`qq:<channel>:calls`), sends them, and keeps the short-lived
`qq:<channel>:link` key alive so that deliveries know someone is there; each answer frame is pushed
back to its caller's reply key. A malformed frame is dropped; the connection stays up.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any, Callable

from picobot.plugins import HttpRequest, HttpResponse

from picobot_qq import intake, state
from picobot_qq.config import FORWARD, REVERSE, QQChannel, is_qq
from picobot_qq.message import bearer_ok, id_text

log = logging.getLogger("picobot_qq")

RECEIVE_SECS = 1.0  # how often a reading loop looks at its stop flag


class Link:
    def __init__(self, ports: Any, channel: str, send: Callable[[str], None], mode: str) -> None:
        self.ports, self.channel, self._send, self.mode = ports, channel, send, mode
        self.id = uuid.uuid4().hex
        self.closed = threading.Event()
        self._pump = threading.Thread(target=self._run_pump, name=f"qq-{channel}-pump", daemon=True)

    def start(self, self_id: str = "") -> None:
        r = self.ports.redis
        r.set(state.key(self.channel, "link"), self.id, ex=state.LINK_TTL_SECS)
        state.set_status(r, self.channel, "connected", f"{self.mode} WebSocket", mode=self.mode,
                         **({"self_id": self_id} if self_id else {}))
        self._pump.start()

    def stop(self, detail: str = "") -> None:
        self.closed.set()
        if self._pump.is_alive() and self._pump is not threading.current_thread():
            self._pump.join(timeout=RECEIVE_SECS + 2)
        r = self.ports.redis
        try:
            if state.text(r.get(state.key(self.channel, "link"))) == self.id:  # else a newer link holds it
                r.delete(state.key(self.channel, "link"))
                state.set_status(r, self.channel, "disconnected", detail, mode=self.mode)
        except Exception as exc:  # Redis away: the key expires by itself
            log.warning("qq (%s): link state not cleared (%s)", self.channel, type(exc).__name__)

    def frame(self, raw: Any) -> str:
        return intake.handle(self.ports, self.channel, raw, link=self)

    def answer(self, frame: dict[str, Any]) -> None:
        """An API answer: to the reply key of the call that carried its echo."""
        echo = frame.get("echo")
        if not isinstance(echo, str) or not echo.isalnum() or len(echo) > 64:
            return
        reply = state.key(self.channel, "reply", echo)
        r = self.ports.redis
        r.rpush(reply, json.dumps(frame, ensure_ascii=False))
        r.expire(reply, state.REPLY_TTL_SECS)

    # ---- the pump: Redis -> socket -----------------------------------------------------------

    def _run_pump(self) -> None:
        r, calls, refreshed = self.ports.redis, state.key(self.channel, "calls"), 0.0
        while not self.closed.is_set():
            try:
                if time.monotonic() - refreshed >= state.LINK_REFRESH_SECS:
                    r.set(state.key(self.channel, "link"), self.id, ex=state.LINK_TTL_SECS)
                    refreshed = time.monotonic()
                item = r.blpop([calls], timeout=RECEIVE_SECS)
            except Exception as exc:
                log.warning("qq (%s): Redis unavailable to the relay (%s)", self.channel, type(exc).__name__)
                self.closed.wait(RECEIVE_SECS)
                continue
            if item is not None:
                self._relay(state.text(item[1]) or "")

    def _relay(self, raw: str) -> None:
        try:
            call = json.loads(raw)
            action, echo = call["action"], call["echo"]
        except (ValueError, KeyError, TypeError):
            return
        if float(call.get("expires") or 0) < time.time():
            return  # its caller gave up: sending it now would send it after a retry did
        try:
            self._send(json.dumps({"action": action, "params": call.get("params") or {}, "echo": echo},
                                  ensure_ascii=False))
        except Exception as exc:
            self.answer({"status": "failed", "retcode": -1, "echo": echo,
                         "wording": f"the WebSocket failed ({type(exc).__name__})"})
            self.closed.set()


# ---- forward: the `connection` process ---------------------------------------------------------


def run_forward(ctx: Any) -> None:
    """`picobot run qq:connection:<channel>`: dial `ws_url`, hold the link until stopped or closed."""
    import websocket

    channel, ports = ctx.instance, ctx.ports
    raw = ports.channel(channel)
    if raw is None or not is_qq(raw) or not raw.get("enabled") or QQChannel.of(channel, raw).mode != FORWARD:
        ctx.status("misconfigured", f"channels.{channel} is not an enabled QQ channel with ws_url")
        ctx.stopping.wait(60)
        return
    cfg = QQChannel.of(channel, raw)
    ctx.status("connecting", cfg.ws_url)
    state.set_status(ports.redis, channel, "connecting", cfg.ws_url, mode=FORWARD)
    headers = [f"Authorization: Bearer {cfg.access_token}"] if cfg.access_token else []
    try:
        ws = websocket.create_connection(cfg.ws_url, header=headers, timeout=10, enable_multithread=True,
                                         skip_utf8_validation=True)
    except Exception as exc:
        detail = ports.redact(f"{type(exc).__name__}: {exc}")[:200]
        state.set_status(ports.redis, channel, "disconnected", detail, mode=FORWARD)
        raise ConnectionError(f"could not connect to {cfg.ws_url}: {detail}") from None
    link = Link(ports, channel, ws.send, FORWARD)
    link.start()
    ctx.status("connected", cfg.ws_url)
    detail = "stopped"
    try:
        detail = _read_forward(ws, link, ctx.stopping)
    finally:
        link.stop(detail)
        ws.close()
    if not ctx.stopping.is_set():
        raise ConnectionError(f"the WebSocket closed: {detail}")


def _read_forward(ws: Any, link: Link, stopping: threading.Event) -> str:
    """Read frames until the socket closes; a watcher aborts the blocking read once stopping (or the relay failed)."""
    import websocket

    def watch() -> None:
        while not stopping.wait(RECEIVE_SECS) and not link.closed.is_set():
            pass
        ws.abort()

    threading.Thread(target=watch, name=f"qq-{link.channel}-watch", daemon=True).start()
    ws.settimeout(None)
    while not stopping.is_set() and not link.closed.is_set():
        try:
            raw = ws.recv()
        except UnicodeDecodeError:
            log.warning("qq (%s): a text frame that is not UTF-8 was dropped", link.channel)
            continue
        except (websocket.WebSocketException, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"[:200]
        if raw == "" and not ws.connected:
            return "closed by the platform"
        if raw:
            link.frame(raw)
    return "stopped" if stopping.is_set() else "the relay failed to send"


# ---- reverse: the platform dials the web -------------------------------------------------------


def reverse_socket(socket: Any, request: HttpRequest, ports: Any) -> HttpResponse | None:
    """GET /qq/ws/<channel> (WebSocket): the platform's reverse connection, after its token is checked."""
    channel = request.params.get("channel", "")
    raw = ports.channel(channel)
    if raw is None or not is_qq(raw) or not raw.get("enabled") or QQChannel.of(channel, raw).mode != REVERSE:
        return HttpResponse.json({"error": "no QQ channel takes a reverse WebSocket here"}, 404)
    cfg = QQChannel.of(channel, raw)
    if not bearer_ok(cfg.access_token, request.headers.get("authorization"), request.query.get("access_token")):
        log.warning("qq (%s): a reverse WebSocket with a wrong access token was refused", channel)
        return HttpResponse.json({"error": "bad access token"}, 401)
    link = Link(ports, channel, socket.send, REVERSE)
    link.start(id_text(request.headers.get("x-self-id")))
    detail = "closed by the platform"
    try:
        while not link.closed.is_set():
            try:
                raw_frame = socket.receive(timeout=RECEIVE_SECS)
            except ConnectionError:
                break
            if raw_frame is not None:
                link.frame(raw_frame)
        else:
            detail = "the relay failed to send"
    finally:
        link.stop(detail)
        socket.close()
    return None
