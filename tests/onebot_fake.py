"""A fake OneBot v11 implementation (what NapCat, Lagrange and LLOneBot speak), on loopback only.

It plays the QQ side of the picobot-qq plugin (examples/plugins/picobot-qq) with the protocol's real
frames, in each of the three ways a platform connects:

    fake = OneBotFake(self_id=10001, token="t", secret="s")
    url = fake.serve_ws()                 # forward WebSocket server (checks Authorization: Bearer)
    fake.dial("ws://127.0.0.1:PORT/qq/ws/qq")   # reverse WebSocket client (Authorization, X-Self-ID,
                                          # X-Client-Role: Universal)
    api = fake.serve_http()               # HTTP API (POST /send_private_msg, …) + GET /files/<name>
    fake.report_to("http://127.0.0.1:PORT/qq/qqh")   # HTTP event POSTs, signed X-Signature: sha1=…

Each connection gets a lifecycle `connect` event, then a heartbeat every `heartbeat_secs`. A test
makes a user write (`private_message`, `group_message`: segments or a CQ string, an optional @ of
the bot, a reply, images) and reads the API calls the bot made (`calls`, `wait_call`).

A demo against a running PicoBot (channels.qq: {"type": "qq", "ws_url": "ws://127.0.0.1:3001",
"access_token": "demo", "enabled": true}, then `picobot run qq:connection:qq`):

    python -m tests.onebot_fake --port 3001 --token demo --user 20002
    # each line typed is a private message from QQ user 20002; the bot's sends are printed
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import itertools
import json
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.sync.server import serve



def _png() -> bytes:
    """A valid 1x1 PNG (a red pixel), served at /files/pixel.png."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b""))


PNG = _png()
SEND_ACTIONS = ("send_private_msg", "send_group_msg", "send_msg")


class _Conn:
    """One WebSocket to the bot (either direction), its sends serialised."""

    def __init__(self, ws: Any, via: str) -> None:
        self.ws, self.via = ws, via
        self.lock = threading.Lock()
        self.open = True

    def send(self, data: str | bytes) -> bool:
        with self.lock:
            if not self.open:
                return False
            try:
                self.ws.send(data)
                return True
            except (ConnectionClosed, OSError):
                self.open = False
                return False


class OneBotFake:
    def __init__(self, self_id: int = 10001, token: str = "", secret: str = "", heartbeat_secs: float = 2.0,
                 nickname: str = "fakebot") -> None:
        self.self_id, self.token, self.secret, self.nickname = self_id, token, secret, nickname
        self.heartbeat_secs = heartbeat_secs
        self.calls: list[dict[str, Any]] = []  # {"action", "params", "via", "message_id"}
        self.refused: list[str] = []  # connection attempts refused for a wrong token
        self.event_url: str | None = None
        self.files: dict[str, bytes] = {"pixel.png": PNG}
        self._ids = itertools.count(1000)
        self._conns: list[_Conn] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closers: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self.http_url = ""

    # ---- the three ways to the bot -----------------------------------------------------------

    def serve_ws(self) -> str:
        """A forward WebSocket server on 127.0.0.1 (a free port); its URL."""
        def check(connection: Any, request: Any) -> Any:
            if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
                self.refused.append("forward")
                return connection.respond(401, "wrong access token\n")
            return None

        server = serve(lambda ws: self._hold(ws, "forward"), "127.0.0.1", 0, process_request=check)
        threading.Thread(target=server.serve_forever, name="onebot-fake-ws", daemon=True).start()
        self._closers.append(server.shutdown)
        return f"ws://127.0.0.1:{server.socket.getsockname()[1]}/"

    def dial(self, url: str, token: str | None = None) -> None:
        """Connect to the bot's reverse WebSocket, as the platform does; raises when refused (InvalidStatus)."""
        token = self.token if token is None else token
        headers = {"X-Self-ID": str(self.self_id), "X-Client-Role": "Universal"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        ws = connect(url, additional_headers=headers, open_timeout=10)
        threading.Thread(target=self._hold, args=(ws, "reverse"), name="onebot-fake-reverse", daemon=True).start()
        self._closers.append(ws.close)

    def serve_http(self) -> str:
        """The HTTP API (and GET /files/<name>) on 127.0.0.1; its base URL."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                data = fake.files.get(self.path.removeprefix("/files/"))
                self._answer(200 if data else 404, data or b"no such file\n", "image/png" if data else "text/plain")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if fake.token and self.headers.get("Authorization") != f"Bearer {fake.token}":
                    fake.refused.append("http")
                    self._answer(401, b'{"status":"failed","retcode":1401}')
                    return
                try:
                    params = json.loads(body or b"{}")
                except ValueError:
                    params = None
                answer = fake.api(self.path.strip("/"), params if isinstance(params, dict) else {}, "http")
                self._answer(200, json.dumps(answer).encode())

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="onebot-fake-http", daemon=True).start()
        self._closers.append(server.shutdown)
        self.http_url = f"http://127.0.0.1:{server.server_address[1]}"
        return self.http_url

    def report_to(self, url: str) -> None:
        """Send events by HTTP POST to `url` (the bot's event route), signed when there is a secret."""
        self.event_url = url

    def file_url(self, name: str = "pixel.png") -> str:
        return f"{self.http_url}/files/{name}"

    # ---- a user writes -----------------------------------------------------------------------

    def private_message(self, user_id: int, message: str | list[dict[str, Any]], message_id: int | None = None,
                        cq: bool = False) -> int:
        segments = [{"type": "text", "data": {"text": message}}] if isinstance(message, str) else message
        return self._message({"message_type": "private", "sub_type": "friend"}, user_id, segments, message_id, cq)

    def group_message(self, group_id: int, user_id: int, text: str, at_bot: bool = False, reply_to: int | None = None,
                      images: tuple[str, ...] = (), message_id: int | None = None, cq: bool = False) -> int:
        segments: list[dict[str, Any]] = []
        if reply_to is not None:
            segments.append({"type": "reply", "data": {"id": str(reply_to)}})
        if at_bot:
            segments += [{"type": "at", "data": {"qq": str(self.self_id)}}, {"type": "text", "data": {"text": " "}}]
        segments.append({"type": "text", "data": {"text": text}})
        segments += [{"type": "image", "data": {"file": url.rsplit("/", 1)[-1], "url": url}} for url in images]
        return self._message({"message_type": "group", "sub_type": "normal", "group_id": group_id}, user_id, segments,
                             message_id, cq)

    def _message(self, kind: dict[str, Any], user_id: int, segments: list[dict[str, Any]], message_id: int | None,
                 cq: bool) -> int:
        message_id = next(self._ids) if message_id is None else message_id
        raw = to_cq(segments)
        event = {"time": int(time.time()), "self_id": self.self_id, "post_type": "message", **kind,
                 "message_id": message_id, "user_id": user_id, "message": raw if cq else segments, "raw_message": raw,
                 "font": 0, "sender": {"user_id": user_id, "nickname": f"user{user_id}", "sex": "unknown", "age": 0}}
        if kind["message_type"] == "group":
            event.update(anonymous=None, sender={**event["sender"], "card": "", "role": "member"})
        self.emit(event)
        return message_id

    def emit(self, event: dict[str, Any], signature: str | None = None) -> list[int]:
        """Send an event on every open WebSocket, and POST it to `event_url`; the POSTs' status codes."""
        text = json.dumps(event, ensure_ascii=False)
        self.send_raw(text)
        if not self.event_url:
            return []
        body = text.encode()
        headers = {"Content-Type": "application/json", "X-Self-ID": str(self.self_id)}
        if self.secret or signature is not None:
            headers["X-Signature"] = signature if signature is not None else "sha1=" + hmac.new(
                self.secret.encode(), body, hashlib.sha1).hexdigest()
        return [httpx.post(self.event_url, content=body, headers=headers, timeout=30).status_code]

    def send_raw(self, data: str | bytes) -> None:
        """A frame as it is (a malformed one, for a test) on every open WebSocket."""
        with self._lock:
            conns = [c for c in self._conns if c.open]
        for conn in conns:
            conn.send(data)

    # ---- what the bot did --------------------------------------------------------------------

    def sends(self) -> list[dict[str, Any]]:
        with self._lock:
            return [c for c in self.calls if c["action"] in SEND_ACTIONS]

    def wait_call(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((c for c in self.calls if pred(c)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no matching API call within {timeout} s; calls: {self.calls[-10:]}")
                self._changed.wait(left)

    def connected(self) -> int:
        with self._lock:
            return sum(1 for c in self._conns if c.open)

    def wait_connected(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not self.connected():
            if time.monotonic() > deadline:
                raise TimeoutError("the bot did not connect")
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        for close in reversed(self._closers):
            try:
                close()
            except Exception:
                pass

    # ---- the protocol ------------------------------------------------------------------------

    def api(self, action: str, params: dict[str, Any], via: str) -> dict[str, Any]:
        """One API call's answer frame (without echo), recorded in `calls`."""
        data: Any = None
        retcode = 0
        if action in SEND_ACTIONS:
            data = {"message_id": next(self._ids)}
        elif action == "get_login_info":
            data = {"user_id": self.self_id, "nickname": self.nickname}
        elif action == "get_status":
            data = {"online": True, "good": True}
        elif action == "get_version_info":
            data = {"app_name": "onebot-fake", "app_version": "0.1", "protocol_version": "v11"}
        elif action != "delete_msg":
            retcode = 1404
        with self._changed:
            self.calls.append({"action": action, "params": params, "via": via,
                               "message_id": (data or {}).get("message_id") if action in SEND_ACTIONS else None})
            self._changed.notify_all()
        if retcode:
            return {"status": "failed", "retcode": retcode, "data": None, "wording": f"no API {action}"}
        return {"status": "ok", "retcode": 0, "data": data}

    def _meta(self, kind: str, **fields: Any) -> str:
        return json.dumps({"time": int(time.time()), "self_id": self.self_id, "post_type": "meta_event",
                           "meta_event_type": kind, **fields})

    def _hold(self, ws: Any, via: str) -> None:
        conn = _Conn(ws, via)
        with self._lock:
            self._conns.append(conn)
        conn.send(self._meta("lifecycle", sub_type="connect"))
        threading.Thread(target=self._beat, args=(conn,), name="onebot-fake-heartbeat", daemon=True).start()
        try:
            for raw in ws:
                self._on_call(conn, raw)
        except (ConnectionClosed, OSError):
            pass
        finally:
            conn.open = False

    def _beat(self, conn: _Conn) -> None:
        while not self._stop.wait(self.heartbeat_secs) and conn.open:
            conn.send(self._meta("heartbeat", status={"online": True, "good": True},
                                 interval=int(self.heartbeat_secs * 1000)))

    def _on_call(self, conn: _Conn, raw: str | bytes) -> None:
        try:
            frame = json.loads(raw)
            action, params = frame["action"], frame.get("params") or {}
        except (ValueError, KeyError, TypeError):
            conn.send(json.dumps({"status": "failed", "retcode": 1400, "data": None}))
            return
        answer = self.api(str(action), params if isinstance(params, dict) else {}, conn.via)
        if "echo" in frame:
            answer["echo"] = frame["echo"]
        conn.send(json.dumps(answer))


def escape(text: str, in_code: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("[", "&#91;").replace("]", "&#93;")
    return text.replace(",", "&#44;") if in_code else text


def to_cq(segments: list[dict[str, Any]]) -> str:
    """Segments as a CQ-code string (`raw_message`)."""
    parts = []
    for seg in segments:
        data = seg.get("data") or {}
        if seg["type"] == "text":
            parts.append(escape(str(data.get("text", ""))))
        else:
            args = "".join(f",{k}={escape(str(v), in_code=True)}" for k, v in data.items())
            parts.append(f"[CQ:{seg['type']}{args}]")
    return "".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description="A fake OneBot v11 (QQ) forward WebSocket server for demos.")
    parser.add_argument("--port", type=int, default=3001)
    parser.add_argument("--token", default="")
    parser.add_argument("--self-id", type=int, default=10001)
    parser.add_argument("--user", type=int, default=20002, help="the QQ user whose messages you type")
    args = parser.parse_args()
    fake = OneBotFake(self_id=args.self_id, token=args.token)

    def check(connection: Any, request: Any) -> Any:
        if args.token and request.headers.get("Authorization") != f"Bearer {args.token}":
            return connection.respond(401, "wrong access token\n")
        return None

    server = serve(lambda ws: fake._hold(ws, "forward"), "127.0.0.1", args.port, process_request=check)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"OneBot fake on ws://127.0.0.1:{args.port} (bot {args.self_id}); type messages from user {args.user}")
    seen = 0

    def show() -> None:
        nonlocal seen
        while True:
            time.sleep(0.2)
            for call in fake.calls[seen:]:
                print(f"\n<bot {call['action']}> {to_cq(call['params'].get('message') or [])}")
            seen = len(fake.calls)

    threading.Thread(target=show, daemon=True).start()
    try:
        for line in iter(input, None):
            fake.private_message(args.user, line)
    except (EOFError, KeyboardInterrupt):
        server.shutdown()


if __name__ == "__main__":
    main()
