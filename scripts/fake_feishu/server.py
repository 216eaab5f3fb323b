"""FakeFeishu: a local HTTP server speaking Feishu's OpenAPI (token, bot info, im/v1, cardkit/v1) for tests.

    fake = FakeFeishu(app_id="cli_test", app_secret="secret_test").start()   # port 0 -> a free port
    fake.base_url        # use as the channel's `domain`
    fake.sent / fake.messages_for(chat_id) / fake.texts(chat_id) / fake.reactions / fake.cards / fake.calls
    fake.images / fake.images_for(chat_id)      # im/v1/images uploads; the image messages sent, with their bytes
    fake.fail(status=429, times=1, reset=2) / fake.down(True) / fake.expire_tokens() / fake.set_chat(id, "removed")
    fake.hold(True) ... fake.held ... fake.hold(False)    # sends/replies wait: a delivery caught mid-flight
    fake.add_route("POST", "/callback/ws/endpoint", fn)   # fn(query, headers, body) -> (status, headers, body)
    fake.stop()

Every request is recorded in `fake.calls` (method, path, query, json body, status, code); Authorization
values are never recorded. All state is guarded by one lock, so tests may read it while handlers run.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid as uuidlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

from scripts.fake_feishu.openapi import OpenApiState, err
from scripts.fake_feishu.reading import Reading

RouteFn = Callable[[dict[str, str], dict[str, str], bytes], tuple[int, dict[str, str], bytes]]
TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
IM = "/open-apis/im/v1/messages"
CK = "/open-apis/cardkit/v1/cards"
FILES = "/open-apis/im/v1/files"
IMAGES = "/open-apis/im/v1/images"
SEG = "([^/]+)"


class FakeFeishu(OpenApiState, Reading):
    def __init__(self, app_id: str = "cli_test", app_secret: str = "secret_test", host: str = "127.0.0.1",
                 port: int = 0, *, rate_limit_qps: int | None = 5, token_ttl: int = 7200,
                 strict_messages: bool = False, bot_open_id: str | None = None) -> None:
        super().__init__(app_id, rate_limit_qps=rate_limit_qps, strict_messages=strict_messages)
        self.app_secret = app_secret
        self.token_ttl = token_ttl
        self.bot_open_id = bot_open_id or "ou_bot" + uuidlib.uuid4().hex[:20]
        self.bot_name = "PicoBot Fake"
        self.calls: list[dict[str, Any]] = []
        self._tokens: dict[str, float] = {}           # token -> monotonic expiry
        self._fail: dict[str, Any] | None = None
        self._down = False
        self._released = threading.Event()
        self._released.set()
        self.held = 0                                 # message sends/replies that waited in hold()
        self._routes: dict[tuple[str, str], RouteFn] = {}
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.table: list[tuple[str, re.Pattern[str], Callable[..., Any]]] = [
            ("POST", re.compile(IM), self.send),
            ("POST", re.compile(f"{IM}/{SEG}/reply"), self.reply),
            ("PATCH", re.compile(f"{IM}/{SEG}"), lambda g, q, b: self.edit(g, q, b, "PATCH")),
            ("PUT", re.compile(f"{IM}/{SEG}"), lambda g, q, b: self.edit(g, q, b, "PUT")),
            ("GET", re.compile(f"{IM}/{SEG}"), self.get_message),
            ("POST", re.compile(f"{IM}/{SEG}/reactions"), self.add_reaction),
            ("DELETE", re.compile(f"{IM}/{SEG}/reactions/{SEG}"), self.delete_reaction),
            ("POST", re.compile(CK), self.create_card),
            ("PUT", re.compile(f"{CK}/{SEG}/elements/{SEG}/content"), self.stream_text),
            ("PATCH", re.compile(f"{CK}/{SEG}/settings"), self.card_settings),
            ("GET", re.compile("/open-apis/bot/v3/info"), self.bot_info),
        ]

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "FakeFeishu":
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-feishu", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- switches for tests ------------------------------------------------------------------

    def add_route(self, method: str, path: str, fn: RouteFn) -> None:
        """Serve `method path` with fn(query, headers, body) -> (status, headers, body), before the built-ins."""
        with self.lock:
            self._routes[(method.upper(), path)] = fn

    def fail(self, status: int = 500, code: int | None = None, times: int = 1, reset: float | None = None,
             include_token: bool = False, path: str | None = None, after: int = 0) -> None:
        """After `after` more such calls succeed, the next `times` OpenAPI calls (only those whose path starts
        with `path` if given; token fetches only with include_token) answer `status`. times=0 clears a pending
        failure."""
        with self.lock:
            self._fail = {"status": status, "code": code, "times": times, "reset": reset,
                          "include_token": include_token, "path": path, "after": after} if times > 0 else None

    def down(self, is_down: bool = True) -> None:
        """While down every call (token too) answers 503 with an HTML body, like a gateway in trouble."""
        with self.lock:
            self._down = is_down

    def hold(self, holding: bool = True) -> None:
        """While holding, message sends and replies wait before being handled (a delivery caught mid-flight)."""
        if holding:
            self._released.clear()
        else:
            self._released.set()

    def expire_tokens(self) -> None:
        """Tokens issued so far are rejected with 99991663 from the next call on."""
        with self.lock:
            self._tokens = {t: 0.0 for t in self._tokens}

    def set_chat(self, chat_id: str, state: str | None) -> None:
        """state: "removed" (bot not in chat, 230002), "dissolved" (232009) or None (normal)."""
        with self.lock:
            if state is None:
                self.chat_state.pop(chat_id, None)
            else:
                self.chat_state[chat_id] = state

    def add_message(self, message_id: str, chat_id: str, msg_type: str, content: dict[str, Any] | str,
                    sender_open_id: str = "ou_user", parent_id: str = "") -> None:
        """A (user's) message the API knows, e.g. the parent of a reply or the target of a reaction."""
        raw = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        now_ms = str(int(time.time() * 1000))
        with self.lock:
            self.messages[message_id] = {
                "message_id": message_id, "root_id": parent_id, "parent_id": parent_id, "msg_type": msg_type,
                "create_time": now_ms, "update_time": now_ms, "deleted": False, "updated": False,
                "chat_id": chat_id, "upper_message_id": "", "mentions": [], "body": {"content": raw},
                "sender": {"id": sender_open_id, "id_type": "open_id", "sender_type": "user", "tenant_key": "fake"}}

    def recall(self, message_id: str) -> None:
        with self.lock:
            self.recalled.add(message_id)

    def add_resource(self, message_id: str, file_key: str, data: bytes, content_type: str) -> None:
        with self.lock:
            self.resources[(message_id, file_key)] = (data, content_type)

    def reset(self) -> None:
        with self.lock:
            for store in (self.sent, self.calls, self.updates):
                store.clear()
            for mapping in (self.messages, self.reactions, self.cards, self.chat_state, self.resources, self.files,
                            self.images):
                mapping.clear()
            self.recalled.clear()
            self._fail, self._down = None, False
            self._released.set()

    # --- request handling (called by handler threads) ----------------------------------------

    def bot_info(self, groups: tuple[str, ...], query: dict[str, str], body: dict[str, Any]):  # type: ignore[no-untyped-def]
        return 200, {"code": 0, "msg": "ok", "bot": {"activate_status": 2, "app_name": self.bot_name,
                                                      "avatar_url": "", "ip_white_list": [],
                                                      "open_id": self.bot_open_id}}

    def _token(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            return err(10014, "app secret invalid")
        token = "t-" + uuidlib.uuid4().hex
        with self.lock:
            self._tokens[token] = time.monotonic() + self.token_ttl
        return 200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": self.token_ttl}

    def _auth_error(self, headers: dict[str, str]) -> tuple[int, dict[str, Any]] | None:
        value = headers.get("authorization", "")
        if not value.startswith("Bearer ") or not value[7:].strip():
            return err(99991661, "Missing access token for authorization.")
        with self.lock:
            expiry = self._tokens.get(value[7:].strip())
        if expiry is None:
            return err(99991668, "Invalid access token for authorization.")
        if expiry <= time.monotonic():
            return err(99991663, "Invalid access token for authorization. Please make a request with token attached.")
        return None

    def _injected(self, path: str) -> tuple[int, dict[str, str], bytes] | None:
        with self.lock:
            if self._down:
                return 503, {"Content-Type": "text/html"}, b"<html><body>503 Service Unavailable</body></html>"
            f = self._fail
            if not f or (path == TOKEN_PATH and not f["include_token"]) or not path.startswith(f["path"] or ""):
                return None
            if f.get("after", 0) > 0:
                f["after"] -= 1
                return None
            f["times"] -= 1
            if f["times"] <= 0:
                self._fail = None
        if f["status"] == 429:
            env = {"code": f["code"] or 99991400, "msg": "request trigger frequency limit", "data": {}}
            return 429, {"x-ogw-ratelimit-reset": str(f["reset"] if f["reset"] is not None else 1)}, json.dumps(env).encode()
        env = {"code": f["code"] if f["code"] is not None else 99991672, "msg": "fake failure", "data": {}}
        return f["status"], {}, json.dumps(env).encode()

    def handle(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes]:
        split = urlsplit(target)
        path, query = split.path.rstrip("/") or "/", dict(parse_qsl(split.query))
        with self.lock:
            custom = self._routes.get((method, path))
        if custom:
            return custom(query, headers, raw)
        injected = self._injected(path)
        if injected:
            return injected
        if method == "POST" and path == FILES:  # multipart, not JSON
            status, env = self._auth_error(headers) or self.upload_file(headers.get("content-type", ""), raw)
            return status, {}, json.dumps(env, ensure_ascii=False).encode()
        if method == "POST" and path == IMAGES:  # multipart, not JSON
            status, env = self._auth_error(headers) or self.upload_image(headers.get("content-type", ""), raw)
            return status, {}, json.dumps(env, ensure_ascii=False).encode()
        if method == "POST" and not self._released.is_set() and re.fullmatch(f"{IM}(/{SEG}/reply)?", path):
            with self.lock:
                self.held += 1
            self._released.wait(timeout=300)
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            status, env = err(230001, "request body is not a JSON object")
        elif path == TOKEN_PATH and method == "POST":
            status, env = self._token(body)
        elif not path.startswith("/open-apis/"):
            status, env = err(404, f"no route {method} {path}", 404)
        else:
            status, env = self._auth_error(headers) or self._route(method, path, query, body)
        if (status, env) == (-1, {}):      # a binary resource download
            m = re.fullmatch(f"{IM}/{SEG}/resources/{SEG}", path)
            return self.resource(m.groups(), query)  # type: ignore[union-attr]
        return status, {}, json.dumps(env, ensure_ascii=False).encode()

    def _route(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if method == "GET" and re.fullmatch(f"{IM}/{SEG}/resources/{SEG}", path):
            return -1, {}
        for m, pattern, fn in self.table:
            match = pattern.fullmatch(path)
            if m == method and match:
                return fn(match.groups(), query, body)
        return err(404, f"no route {method} {path}", 404)

    def record(self, method: str, target: str, body: bytes, status: int, answer: bytes) -> None:
        split = urlsplit(target)
        try:
            parsed: Any = json.loads(body) if body else None
            if isinstance(parsed, dict):  # the token and long-connection endpoints carry the app secret
                parsed = {k: "<redacted>" if k in ("app_secret", "AppSecret") else v for k, v in parsed.items()}
        except ValueError:
            parsed = body[:200].decode(errors="replace")
        try:
            code = json.loads(answer).get("code")
        except (ValueError, AttributeError):
            code = None
        with self.lock:
            self.calls.append({"method": method, "path": split.path, "query": dict(parse_qsl(split.query)),
                               "body": parsed, "status": status, "code": code, "time": time.time()})


def _handler_for(fake: FakeFeishu) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                status, extra, answer = fake.handle(self.command, self.path, headers, raw)
            except Exception as exc:  # a bug in the fake must show up as a 500, not a hung client
                status, extra, answer = 500, {}, json.dumps({"code": 1, "msg": f"fake error: {exc!r}"}).encode()
            fake.record(self.command, self.path, raw, status, answer)
            self.send_response(status)
            if not any(k.lower() == "content-type" for k in extra):
                self.send_header("Content-Type", "application/json; charset=utf-8")
            for key, value in extra.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler
