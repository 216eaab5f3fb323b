"""FakeWeChat: a local HTTP server speaking iLink's bot API and its CDN, for tests and demos.

    fake = FakeWeChat().start()          # port 0 -> a free port; fake.base_url is the channel's base_url
    fake.qr_plan = ["scaned", "confirmed"]   # the statuses the next QR goes through, one per status poll
    fake.set_qr("confirmed")             # or move the newest QR by hand (wait/scaned/expired/…)
    fake.offer(fake.message("u1@im.wechat", "hi"))   # a user's message into getupdates (replays: offer it again)
    fake.wait_sent(1, "u1@im.wechat") / fake.texts(user) / fake.sent / fake.duplicates / fake.rejected
    fake.expire_session()                # every token answers errcode -14 from now on
    fake.close_window(user)              # sendmessage to that user answers -2 until the user writes again
    fake.fail_next.append(-2)            # the next sendmessage answers ret -2
    fake.put_media(b"…") -> media        # an encrypted CDN object for image/file items
    fake.stop()

The control API does the same over HTTP for demos (`python -m scripts.fake_wechat`):
POST /_fake/message {"from": user, "text": …, "replays": n} · POST /_fake/qr {"status": …} ·
POST /_fake/expire · POST /_fake/close_window {"user": …} · GET /_fake/sent · GET /_fake/calls.
Every request is recorded in `fake.calls` (method, path, host, status); Authorization is never recorded.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from scripts.fake_wechat.state import QR_STATES, IlinkState

BOT = "/ilink/bot/"


def _ok(body: dict[str, Any] | None = None) -> tuple[int, dict[str, str], bytes]:
    return 200, {}, json.dumps({"ret": 0, **(body or {})}).encode()


class FakeWeChat(IlinkState):
    def __init__(self, host: str = "127.0.0.1", port: int = 0, hold_secs: float = 2.0, qr_hold_secs: float = 0.5):
        super().__init__()
        self.hold_secs = hold_secs  # how long getupdates holds an empty poll (iLink: ~35 s)
        self.qr_hold_secs = qr_hold_secs
        self.calls: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cdn_url(self) -> str:
        return f"{self.base_url}/c2c"

    def start(self) -> FakeWeChat:
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-wechat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ---- dispatch ----------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes]:
        url = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path.startswith("/_fake/"):
            return self._control(method, url.path, query, raw)
        if url.path == "/c2c/download" and method == "GET":
            blob = self.blobs.get(query.get("encrypted_query_param", ""))
            return (200, {"Content-Type": "application/octet-stream"}, blob) if blob is not None else (404, {}, b"{}")
        if url.path == "/c2c/upload" and method == "POST":
            return 200, {"x-encrypted-param": self.upload(raw)}, b"{}"
        if url.path == f"{BOT}get_qrcode_status" and method == "GET":
            return self._qr_status(query.get("qrcode", ""), headers.get("host", ""))
        if not url.path.startswith(BOT) or method != "POST":
            return 404, {}, b'{"ret": -1, "errmsg": "no such API"}'
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return 400, {}, b'{"ret": -1, "errmsg": "not JSON"}'
        name = url.path[len(BOT):]
        if name == "get_bot_qrcode":
            return 200, {}, json.dumps(self.new_qr()).encode()
        if headers.get("authorizationtype") != "ilink_bot_token" or not headers.get("x-wechat-uin"):
            return 200, {}, b'{"ret": -1, "errmsg": "missing iLink headers"}'
        token = headers.get("authorization", "").removeprefix("Bearer ")
        with self.lock:
            valid = token in self.tokens
        if not valid:
            return 200, {}, b'{"errcode": -14, "errmsg": "session timeout"}'
        if not isinstance(body.get("base_info"), dict):
            return 200, {}, b'{"ret": -1, "errmsg": "no base_info"}'
        return self._bot(name, body)

    def _bot(self, name: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        if name == "getupdates":
            return 200, {}, json.dumps(self.updates(str(body.get("get_updates_buf") or ""), self.hold_secs)).encode()
        if name == "sendmessage":
            msg = body.get("msg") if isinstance(body.get("msg"), dict) else {}
            return 200, {}, json.dumps(self.send(msg)).encode()
        if name == "getconfig":
            return _ok({"typing_ticket": f"tt-{body.get('ilink_user_id')}"})
        if name == "sendtyping":
            with self.lock:
                self.typing.append({"user": body.get("ilink_user_id"), "status": body.get("status"),
                                    "ticket": body.get("typing_ticket")})
            return _ok()
        if name == "getuploadurl":
            return _ok({"upload_full_url": f"{self.cdn_url}/upload?filekey={body.get('filekey')}"})
        if name in ("msg/notifystart", "msg/notifystop"):
            return _ok()
        return 404, {}, b'{"ret": -1, "errmsg": "no such API"}'

    def _qr_status(self, key: str, host: str) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            qr = self.qrs.get(key)
            if qr is not None and not qr["queue"] and qr["status"] == "wait":
                self.lock.wait(self.qr_hold_secs)  # held like iLink's (shortened), until a phone acts
        answer = self.qr_status(key, host, redirect_host=f"localhost:{self.port}")
        return 200, {}, json.dumps(answer).encode()

    def _control(self, method: str, path: str, query: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes]:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        if path == "/_fake/message" and method == "POST":
            msg = self.message(str(body.get("from") or "demo@im.wechat"), str(body.get("text") or ""))
            self.offer(*([msg] * (1 + int(body.get("replays") or 0))))
            return _ok({"message": msg})
        if path == "/_fake/qr" and method == "POST" and body.get("status") in QR_STATES:
            self.set_qr(body["status"])
            return _ok()
        if path == "/_fake/expire" and method == "POST":
            self.expire_session()
            return _ok()
        if path == "/_fake/close_window" and method == "POST":
            self.close_window(str(body.get("user") or ""))
            return _ok()
        if path == "/_fake/sent":
            with self.lock:
                return _ok({"sent": list(self.sent), "duplicates": self.duplicates, "rejected": list(self.rejected)})
        if path == "/_fake/calls":
            with self.lock:
                return _ok({"calls": list(self.calls)})
        return 404, {}, b'{"ret": -1}'

    def record(self, method: str, path: str, host: str, status: int) -> None:
        with self.lock:
            self.calls.append({"method": method, "path": urlsplit(path).path, "host": host, "status": status})


def _handler_for(fake: FakeWeChat) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                status, extra, answer = fake.handle(self.command, self.path, headers, raw)
            except Exception as exc:  # a bug in the fake must show up as a 500, not a hung client
                status, extra, answer = 500, {}, json.dumps({"ret": -1, "errmsg": f"fake error: {exc!r}"}).encode()
            fake.record(self.command, self.path, headers.get("host", ""), status)
            self.send_response(status)
            if not any(k.lower() == "content-type" for k in extra):
                self.send_header("Content-Type", "application/json")
            for key, value in extra.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            try:
                self.wfile.write(answer)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up on a held poll
                pass

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler
