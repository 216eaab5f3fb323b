"""FakeTelegram: a local HTTP server speaking the Telegram Bot API wire protocol, for tests and demos.

    fake = FakeTelegram().start()                      # port 0 -> a free port; one bot, or tokens=[...]
    fake.base_url                                      # the channel's `base_url`
    fake.token, fake.bot(token)                        # bot state: sent, edits, actions, commands, webhook
    update = fake.message(chat_id=42, text="hi", from_id=7)     # queued for getUpdates (or POSTed to the webhook)
    fake.push(update)                                  # the same update again (a redelivery)
    fake.rewind()                                      # forget every confirmation (Telegram after a crash of ours)
    fake.fail(status=429, retry_after=2, times=3, method="sendMessage")   # the next 3 sendMessage calls
    fake.hold(True) / fake.held / fake.hold(False)     # sendMessage waits: a delivery caught mid-flight
    fake.add_file(b"...", "photos/file_1.jpg") -> file_id      # served by getFile + /file/bot<token>/<path>
    fake.wait_sent(n, chat_id), fake.sent_to(chat_id), fake.calls
    fake.wait_voices(n, chat_id), fake.voices_to(chat_id)      # sendVoice (Ogg Opus only) / sendAudio uploads
    fake.photos_to(chat_id)                            # sendPhoto uploads (≤ 10 MB, image bytes), with their bytes
    fake.stop()

The control API over HTTP (for `python -m scripts.fake_telegram` and other processes):
    POST /_fake/message {"chat_id", "text", "from_id", "chat_type", …}   -> the update
    POST /_fake/update  {"update": {...}}      POST /_fake/fail {"status", "retry_after", "times", "method"}
    GET  /_fake/sent[?chat_id=]                GET /_fake/calls              POST /_fake/rewind
    GET  /_fake/photos[?chat_id=]              (sendPhoto uploads: size and type, not the bytes)

Every request is recorded in `fake.calls` (method, status, description); the token never is.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import httpx

from scripts.fake_telegram.botapi import Answer, Bot, Methods, err

DEFAULT_TOKEN = "123456789:AAFakeTokenForTestsOnly_abcdefghijkl"
API_METHODS = frozenset({"getme", "getupdates", "setwebhook", "deletewebhook", "getwebhookinfo", "sendmessage",
                         "editmessagetext", "sendchataction", "setmessagereaction", "setmycommands", "getmycommands",
                         "getfile", "sendvoice", "sendaudio", "sendphoto", "answercallbackquery"})


class FakeTelegram(Methods):
    def __init__(self, tokens: list[str] | None = None, host: str = "127.0.0.1", port: int = 0, *,
                 username: str = "picobot_fake_bot", strict: bool = True):
        self.lock = threading.Condition()
        self.strict = strict
        tokens = tokens or [DEFAULT_TOKEN]
        self.bots = {t: Bot(t, username if i == 0 else f"{username}{i}", self.lock) for i, t in enumerate(tokens)}
        self.token = tokens[0]
        self.files: dict[str, tuple[str, bytes]] = {}
        self.chat_flags: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[dict[str, Any]] = []
        self._fail: dict[str, Any] | None = None
        self._released = threading.Event()
        self._released.set()
        self.held = 0
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._pusher = httpx.Client(timeout=10)
        self._push_threads: list[threading.Thread] = []

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> "FakeTelegram":
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-telegram", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._pusher.close()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bot(self, token: str | None = None) -> Bot:
        return self.bots[token or self.token]

    # --- switches for tests ------------------------------------------------------------------

    def fail(self, status: int = 500, times: int = 1, method: str | None = None, retry_after: int | None = None,
             description: str | None = None, after: int = 0) -> None:
        """After `after` more successful calls, the next `times` calls (of `method` only, if given) answer
        `status` (429 with parameters.retry_after); times=0 clears it."""
        with self.lock:
            self._fail = {"status": status, "times": times, "method": (method or "").lower() or None,
                          "retry_after": retry_after, "description": description,
                          "after": after} if times > 0 else None

    def hold(self, holding: bool = True) -> None:
        """While holding, sendMessage / editMessageText wait before being handled."""
        if holding:
            self._released.clear()
        else:
            self._released.set()

    def block(self, chat_id: Any, blocked: bool = True) -> None:
        """The user of a private chat blocked the bot: sends answer 403."""
        with self.lock:
            self.chat_flags.setdefault((self.token, str(chat_id)), {})["blocked"] = blocked

    def add_file(self, data: bytes, path: str = "documents/file.bin") -> str:
        with self.lock:
            file_id = f"F{len(self.files) + 1:06d}" + "x" * 20
            self.files[file_id] = (path, data)
            return file_id

    # --- updates in ------------------------------------------------------------------------

    def message(self, chat_id: int = 1001, text: str | None = "hello", from_id: int | None = None,
                chat_type: str = "private", token: str | None = None, username: str = "alice",
                queue: bool = True, **fields: Any) -> dict[str, Any]:
        """A user's message as an update (queued for the bot unless queue=False); fields go into the message."""
        bot = self.bot(token)
        with self.lock:
            message_id = bot.new_message_id(str(chat_id))
            chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
            if chat_type == "private":
                chat.update(first_name=username.title(), username=username)
            else:
                chat["title"] = "Test group"
            message: dict[str, Any] = {"message_id": message_id, "date": int(time.time()), "chat": chat,
                                       "from": {"id": from_id if from_id is not None else abs(chat_id),
                                                "is_bot": False, "first_name": username.title(),
                                                "username": username, "language_code": "en"}}
            if text is not None:
                message["text"] = text
                if text.startswith("/"):
                    word = text.split()[0] if text.split() else text
                    message["entities"] = [{"type": "bot_command", "offset": 0, "length": len(word)}]
            message.update(fields)
            bot.store(str(chat_id), message)
            update = {"update_id": bot.next_update_id, "message": message}
            bot.next_update_id += 1
        if queue:
            self.push(update, token)
        return update

    def press(self, chat_id: int, message_id: int, data: str, from_id: int | None = None,
              token: str | None = None, username: str = "alice") -> dict[str, Any]:
        """A user pressing an inline button under one of the bot's messages: a callback_query update, queued."""
        bot = self.bot(token)
        with self.lock:
            message = bot.chats.get(str(chat_id), {}).get(message_id)
            if message is None:
                raise KeyError(f"no message {message_id} in chat {chat_id}")
            query_id = f"{bot.id}{bot.next_update_id}"
            query = {"id": query_id, "chat_instance": str(chat_id), "data": data, "message": dict(message),
                     "from": {"id": from_id if from_id is not None else abs(chat_id), "is_bot": False,
                              "first_name": username.title(), "username": username}}
            bot.pressable[query_id] = query
            update = {"update_id": bot.next_update_id, "callback_query": query}
            bot.next_update_id += 1
        self.push(update, token)
        return update

    def answered(self, token: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(a) for a in self.bot(token).answered]

    def next_update_id(self, token: str | None = None) -> int:
        with self.lock:
            bot = self.bot(token)
            bot.next_update_id += 1
            return bot.next_update_id - 1

    def push(self, update: dict[str, Any], token: str | None = None, copies: int = 1) -> None:
        """Deliver an update (again): queued for getUpdates, or POSTed to the webhook (retried until 2xx)."""
        bot = self.bot(token)
        for _ in range(copies):
            with self.lock:
                hook = dict(bot.webhook) if bot.webhook else None
                if hook is None:
                    bot.queue(dict(update))
                    continue
            t = threading.Thread(target=self._post_webhook, args=(hook, update), daemon=True)
            t.start()
            self._push_threads.append(t)

    def rewind(self, token: str | None = None) -> None:
        """Every update seen is pending again, as if none had been confirmed (dedupe must hold)."""
        bot = self.bot(token)
        with self.lock:
            known = {u["update_id"] for u in bot.updates}
            bot.updates += [dict(u) for u in bot.history if u["update_id"] not in known]
            bot.updates.sort(key=lambda u: u["update_id"])
            self.lock.notify_all()

    def pending(self, token: str | None = None) -> int:
        with self.lock:
            return len(self.bot(token).updates)

    def _post_webhook(self, hook: dict[str, Any], update: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/json"}
        if hook.get("secret_token"):
            headers["X-Telegram-Bot-Api-Secret-Token"] = hook["secret_token"]
        for attempt in range(30):  # Telegram keeps trying for a while
            try:
                r = self._pusher.post(hook["url"], content=json.dumps(update), headers=headers)
                with self.lock:
                    self.calls.append({"method": "webhook", "status": r.status_code, "time": time.time()})
                if r.status_code < 300:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(min(5.0, 0.2 * 2 ** attempt))

    # --- reading what the bot did ----------------------------------------------------------

    def sent_to(self, chat_id: Any, token: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(m) for m in self.bot(token).sent if m["chat_id"] == str(chat_id)]

    def texts(self, chat_id: Any, token: str | None = None) -> list[str]:
        return [m["text"] for m in self.sent_to(chat_id, token)]

    def wait_sent(self, n: int, chat_id: Any, timeout: float = 30, token: str | None = None) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                found = [m for m in self.bot(token).sent if m["chat_id"] == str(chat_id)]
                if len(found) >= n:
                    return [dict(m) for m in found]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(found)} of {n} messages sent to {chat_id} within {timeout} s")
                self.lock.wait(min(left, 0.5))

    def voices_to(self, chat_id: Any, token: str | None = None) -> list[dict[str, Any]]:
        """Voice notes and audio files the bot sent to a chat (sendVoice / sendAudio), with their bytes."""
        with self.lock:
            return [dict(v) for v in self.bot(token).voices if v["chat_id"] == str(chat_id)]

    def wait_voices(self, n: int, chat_id: Any, timeout: float = 30, token: str | None = None) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                found = [v for v in self.bot(token).voices if v["chat_id"] == str(chat_id)]
                if len(found) >= n:
                    return [dict(v) for v in found]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(found)} of {n} voice messages sent to {chat_id} within {timeout} s")
                self.lock.wait(min(left, 0.5))

    def photos_to(self, chat_id: Any, token: str | None = None) -> list[dict[str, Any]]:
        """Photos the bot sent to a chat (sendPhoto), with their bytes, in order."""
        with self.lock:
            return [dict(v) for v in self.bot(token).photos if v["chat_id"] == str(chat_id)]

    def actions_in(self, chat_id: Any, token: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(a) for a in self.bot(token).actions if a["chat_id"] == str(chat_id)]

    # --- dispatch --------------------------------------------------------------------------

    def handle(self, http_method: str, path: str, query: dict[str, str], body: bytes,
               ctype: str) -> tuple[int, dict[str, str], bytes]:
        if path.startswith("/_fake/"):
            return _json(*self._control(http_method, path, query, body))
        if path.startswith("/file/bot"):
            return self._download(path)
        if not path.startswith("/bot"):
            return _json(*err(404, "Not Found"))
        token, _, method = path[4:].partition("/")
        bot = self.bots.get(unquote(token))
        if bot is None:
            return _json(*self._record(method, err(401, "Unauthorized")))
        params = _params(query, body, ctype)
        if params is None:
            return _json(*self._record(method, err(400, "Bad Request: can't parse request JSON object")))
        name = method.lower()
        injected = self._injected(name)
        if injected is not None:
            return _json(*self._record(method, injected))
        if name not in API_METHODS:
            return _json(*self._record(method, err(404, "Not Found: method not found")))
        fn = getattr(self, name)
        if name in ("sendmessage", "editmessagetext") and not self._released.is_set():
            with self.lock:
                self.held += 1
            self._released.wait()
        return _json(*self._record(method, fn(bot, params)))

    def _injected(self, name: str) -> Answer | None:
        with self.lock:
            f = self._fail
            if f is None or (f["method"] and f["method"] != name):
                return None
            if f["after"] > 0:
                f["after"] -= 1
                return None
            f["times"] -= 1
            if f["times"] <= 0:
                self._fail = None
        status = f["status"]
        if status == 429:
            ra = f["retry_after"] if f["retry_after"] is not None else 1
            return err(429, f["description"] or f"Too Many Requests: retry after {ra}", retry_after=ra)
        if status == 409:
            return err(409, f["description"] or "Conflict: terminated by other getUpdates request; make sure that "
                                                "only one bot instance is running")
        return err(status, f["description"] or ("Internal Server Error" if status >= 500 else "Bad Request: injected"))

    def _record(self, method: str, answer: Answer) -> Answer:
        status, body = answer
        with self.lock:
            self.calls.append({"method": method, "status": status, "description": body.get("description"),
                               "time": time.time()})
        return answer

    def _download(self, path: str) -> tuple[int, dict[str, str], bytes]:
        token, _, file_path = path[len("/file/bot"):].partition("/")
        if unquote(token) not in self.bots:
            return _json(*err(401, "Unauthorized"))
        with self.lock:
            found = [data for p, data in self.files.values() if p == unquote(file_path)]
        if not found:
            return _json(*err(404, "Not Found"))
        return 200, {"Content-Type": "application/octet-stream"}, found[0]

    def _control(self, http_method: str, path: str, query: dict[str, str], body: bytes) -> Answer:
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            return 400, {"ok": False, "description": "bad JSON"}
        name = path[len("/_fake/"):]
        if name == "message" and http_method == "POST":
            return 200, {"ok": True, "result": self.message(**{k: v for k, v in data.items() if k in (
                "chat_id", "text", "from_id", "chat_type", "username")})}
        if name == "update" and http_method == "POST":
            self.push(data.get("update") or {})
            return 200, {"ok": True}
        if name == "fail" and http_method == "POST":
            self.fail(**{k: v for k, v in data.items() if k in ("status", "times", "method", "retry_after", "after")})
            return 200, {"ok": True}
        if name == "rewind" and http_method == "POST":
            self.rewind()
            return 200, {"ok": True}
        if name == "sent":
            with self.lock:
                sent = [m for m in self.bot().sent if "chat_id" not in query or m["chat_id"] == query["chat_id"]]
            return 200, {"ok": True, "result": sent}
        if name == "photos":  # sendPhoto uploads, their size and type instead of their bytes
            with self.lock:
                photos = [{**{k: v for k, v in p.items() if k != "data"}, "bytes": len(p["data"])}
                          for p in self.bot().photos if "chat_id" not in query or p["chat_id"] == query["chat_id"]]
            return 200, {"ok": True, "result": photos}
        if name == "calls":
            with self.lock:
                return 200, {"ok": True, "result": list(self.calls)}
        return 404, {"ok": False, "description": "unknown control call"}


def _params(query: dict[str, str], body: bytes, ctype: str) -> dict[str, Any] | None:
    params: dict[str, Any] = dict(query)
    if not body:
        return params
    if "json" in ctype:
        try:
            data = json.loads(body)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        params.update(data)
    elif "multipart/form-data" in ctype:
        parsed = _multipart(body, ctype)
        if parsed is None:
            return None
        for key, value in parsed.items():
            if isinstance(value, str):
                try:
                    params[key] = json.loads(value) if value[:1] in "[{" else value
                except ValueError:
                    params[key] = value
            else:
                params[key] = value
    elif "x-www-form-urlencoded" in ctype:
        for key, value in parse_qsl(body.decode("utf-8", "replace")):
            try:
                params[key] = json.loads(value) if value[:1] in "[{" else value
            except ValueError:
                params[key] = value
    return params


def _multipart(body: bytes, ctype: str) -> dict[str, Any] | None:
    """A multipart/form-data body: text fields as str, file fields as {"filename", "content_type", "data"}."""
    from email.parser import BytesParser
    from email.policy import HTTP

    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
    if not message.is_multipart():
        return None
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name:
            continue
        data = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        if filename is None:
            fields[name] = data.decode("utf-8", "replace")
        else:
            fields[name] = {"filename": filename, "content_type": part.get_content_type(), "data": data}
    return fields


def _json(status: int, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(body, ensure_ascii=False).encode()


def _handler_for(fake: FakeTelegram) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            query = dict(parse_qsl(url.query))
            try:
                status, headers, payload = fake.handle(self.command, url.path, query, body,
                                                       self.headers.get("Content-Type") or "")
            except Exception as exc:  # the fake's own bug: say so as a 500
                status, headers, payload = _json(500, {"ok": False, "error_code": 500,
                                                       "description": f"fake error {type(exc).__name__}: {exc}"})
            try:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (a poller killed mid long poll)

        do_GET = do_POST = _serve

    return Handler
