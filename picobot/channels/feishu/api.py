"""FeishuApi: a small synchronous client for the Feishu (Lark) OpenAPI calls PicoBot makes.

Every call goes to the configured ``domain`` (so a fake server works the same as Feishu). The tenant
token is cached (in Redis when one is given, else in this process) until ~10 minutes before it
expires and refreshed once when Feishu answers with an expiry code. Failures raise ``FeishuError``
with Feishu's ``code``, the HTTP status, ``retry_after`` (from ``x-ogw-ratelimit-reset`` on a rate
limit) and ``permanent`` (retrying cannot help). The token and the app secret never reach a log line
or an error message.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import httpx

from picobot.channels.feishu import keys
from picobot.errors import PicoBotError

log = logging.getLogger("picobot.channels.feishu")

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
TOKEN_EXPIRED_CODES = frozenset({99991661, 99991663, 99991664, 99991668})
RATE_LIMIT_CODES = frozenset({99991400, 230020})
# Retrying these can never succeed (bot removed, chat dissolved, bad or oversize message, ...).
PERMANENT_CODES = frozenset({230001, 230002, 230006, 230011, 230025, 230099, 231003, 232009})
NOT_FOUND_CODES = frozenset({230011, 231003, 234003})
TOKEN_MARGIN_SECS = 600


class FeishuError(PicoBotError):
    """A Feishu OpenAPI call failed."""

    def __init__(self, message: str, *, code: int | None = None, http_status: int | None = None,
                 retry_after: float | None = None, permanent: bool = False):
        self.code = code
        self.http_status = http_status
        self.retry_after = retry_after
        self.permanent = permanent
        super().__init__(message)


def _is_permanent(code: int | None, status: int | None) -> bool:
    if code in RATE_LIMIT_CODES or status == 429 or (status is not None and status >= 500):
        return False
    if code in PERMANENT_CODES:
        return True
    return status is not None and 400 <= status < 500 and code not in TOKEN_EXPIRED_CODES


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("x-ogw-ratelimit-reset")
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None


class FeishuApi:
    """One per (app, process); thread-safe (httpx.Client is, the token cache takes a lock)."""

    def __init__(self, app_id: str, app_secret: str, domain: str, *, redis=None, timeout: float = 10.0,
                 transport: httpx.BaseTransport | None = None):
        self.app_id = app_id
        self._secret = app_secret
        self.domain = domain.rstrip("/")
        self._redis = redis
        self._client = httpx.Client(base_url=self.domain, transport=transport, follow_redirects=False,
                                    timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)))
        self._lock = threading.Lock()
        self._token: tuple[str, float] | None = None  # (token, monotonic expiry)
        self._bot: dict | None = None

    def __repr__(self) -> str:  # never shows the secret or the token
        return f"FeishuApi(app_id={self.app_id!r}, domain={self.domain!r})"

    def close(self) -> None:
        self._client.close()

    # ---- token -----------------------------------------------------------------------------

    @property
    def _token_key(self) -> str:
        return keys.token(self.app_id)

    def _cached_token(self) -> str | None:
        if self._token and self._token[1] > time.monotonic():
            return self._token[0]
        if self._redis is not None:
            try:
                raw = self._redis.get(self._token_key)
            except Exception as exc:  # Redis down: fall back to asking Feishu
                log.warning("feishu token cache unavailable: %s", type(exc).__name__)
                return None
            if raw:
                return raw.decode() if isinstance(raw, bytes) else str(raw)
        return None

    def _fetch_token(self) -> str:
        body = self._send_raw("POST", TOKEN_PATH, json={"app_id": self.app_id, "app_secret": self._secret})
        token, expire = body.get("tenant_access_token"), int(body.get("expire") or 7200)
        if not token:
            raise FeishuError("feishu token: no tenant_access_token in the answer", permanent=True)
        ttl = max(60, expire - TOKEN_MARGIN_SECS)
        self._token = (token, time.monotonic() + ttl)
        if self._redis is not None:
            try:
                self._redis.set(self._token_key, token, ex=ttl)
            except Exception as exc:
                log.warning("feishu token cache unavailable: %s", type(exc).__name__)
        return token

    def _get_token(self, *, force: bool = False) -> str:
        with self._lock:
            if not force:
                cached = self._cached_token()
                if cached:
                    return cached
            self._token = None
            return self._fetch_token()

    # ---- transport ---------------------------------------------------------------------------

    def _send_raw(self, method: str, path: str, *, token: str | None = None, json: Any = None,
                  params: dict | None = None) -> dict:
        """One HTTP call; returns the JSON envelope when code == 0, else raises FeishuError."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            response = self._client.request(method, path, json=json, params=params, headers=headers)
        except httpx.TimeoutException:
            raise FeishuError(f"feishu {method} {path}: timed out") from None
        except httpx.HTTPError as exc:
            raise FeishuError(f"feishu {method} {path}: {type(exc).__name__}") from None
        return self._envelope(method, path, response)

    def _envelope(self, method: str, path: str, response: httpx.Response) -> dict:
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            if status < 400:
                raise FeishuError(f"feishu {method} {path}: answer is not JSON (http {status})", http_status=status)
            raise FeishuError(f"feishu {method} {path}: http {status}", http_status=status,
                              retry_after=_retry_after(response) if status == 429 else None,
                              permanent=_is_permanent(None, status))
        code = body.get("code", 0)
        code = code if isinstance(code, int) else None
        if code == 0 and status < 400:
            return body
        msg = str(body.get("msg") or "")[:200]
        limited = status == 429 or code in RATE_LIMIT_CODES
        raise FeishuError(f"feishu {method} {path}: code {code} {msg} (http {status})".replace("  ", " "),
                          code=code, http_status=status,
                          retry_after=_retry_after(response) if limited else None,
                          permanent=_is_permanent(code, status))

    def _call(self, method: str, path: str, *, json: Any = None, params: dict | None = None) -> dict:
        """An authenticated call; refreshes the token and retries once on an expiry code."""
        try:
            return self._send_raw(method, path, token=self._get_token(), json=json, params=params)
        except FeishuError as exc:
            if exc.code not in TOKEN_EXPIRED_CODES:
                raise
            log.info("feishu token expired (code %s); refreshing", exc.code)
        return self._send_raw(method, path, token=self._get_token(force=True), json=json, params=params)

    @staticmethod
    def _data(body: dict) -> dict:
        data = body.get("data")
        return data if isinstance(data, dict) else {}

    # ---- bot and messages ------------------------------------------------------------------

    def bot_info(self) -> dict:
        """{"open_id", "app_name"} of this app's bot; asked once per process."""
        if self._bot is None:
            bot = self._call("GET", "/open-apis/bot/v3/info").get("bot") or {}
            self._bot = {"open_id": bot.get("open_id"), "app_name": bot.get("app_name")}
        return dict(self._bot)

    def send(self, receive_id: str, msg_type: str, content: dict, uuid: str, receive_id_type: str = "chat_id") -> str:
        body = {"receive_id": receive_id, "msg_type": msg_type, "uuid": uuid,
                "content": json.dumps(content, ensure_ascii=False)}
        data = self._data(self._call("POST", "/open-apis/im/v1/messages", json=body,
                                     params={"receive_id_type": receive_id_type}))
        return str(data.get("message_id") or "")

    def upload_file(self, data: bytes, file_type: str, file_name: str, duration_ms: int | None = None) -> str:
        """Upload a file for a message (im/v1/files, multipart); its file_key. `opus` for an audio message."""
        fields = {"file_type": file_type, "file_name": file_name}
        if duration_ms is not None:
            fields["duration"] = str(duration_ms)
        return self._upload("/open-apis/im/v1/files", fields, "file", file_name, data, "file_key")

    def upload_image(self, data: bytes, file_name: str) -> str:
        """Upload an image to send in a message (im/v1/images, multipart, image_type=message); its image_key."""
        return self._upload("/open-apis/im/v1/images", {"image_type": "message"}, "image", file_name, data,
                            "image_key")

    def _upload(self, path: str, fields: dict[str, str], field: str, file_name: str, data: bytes, key_name: str) -> str:
        def send(token: str) -> dict:
            try:
                response = self._client.post(path, data=fields, files={field: (file_name, data)},
                                             headers={"Authorization": f"Bearer {token}"})
            except httpx.TimeoutException:
                raise FeishuError(f"feishu POST {path}: timed out") from None
            except httpx.HTTPError as exc:
                raise FeishuError(f"feishu POST {path}: {type(exc).__name__}") from None
            return self._envelope("POST", path, response)

        try:
            body = send(self._get_token())
        except FeishuError as exc:
            if exc.code not in TOKEN_EXPIRED_CODES:
                raise
            body = send(self._get_token(force=True))
        key = self._data(body).get(key_name)
        if not isinstance(key, str) or not key:
            raise FeishuError(f"feishu POST {path}: no {key_name} in the answer")
        return key

    def reply(self, message_id: str, msg_type: str, content: dict, uuid: str) -> str:
        """Reply to a message; raises FeishuError (codes 230011/231003 when the parent is gone)."""
        body = {"msg_type": msg_type, "uuid": uuid, "reply_in_thread": False,
                "content": json.dumps(content, ensure_ascii=False)}
        data = self._data(self._call("POST", f"/open-apis/im/v1/messages/{message_id}/reply", json=body))
        return str(data.get("message_id") or "")

    def get_message(self, message_id: str) -> dict | None:
        """The message (data.items[0]), or None when it is gone or unknown."""
        try:
            items = self._data(self._call("GET", f"/open-apis/im/v1/messages/{message_id}")).get("items") or []
        except FeishuError as exc:
            if exc.code in NOT_FOUND_CODES or exc.http_status == 404:
                return None
            raise
        return items[0] if items else None

    def patch_message(self, message_id: str, content: dict) -> None:
        self._call("PATCH", f"/open-apis/im/v1/messages/{message_id}",
                   json={"content": json.dumps(content, ensure_ascii=False)})

    def download_resource(self, message_id: str, file_key: str, kind: str, max_bytes: int) -> tuple[bytes, str | None]:
        """Bytes and content type of an image/file of a message; refuses more than max_bytes."""
        path = f"/open-apis/im/v1/messages/{message_id}/resources/{file_key}"
        for attempt in (0, 1):
            headers = {"Authorization": f"Bearer {self._get_token(force=attempt == 1)}"}
            try:
                with self._client.stream("GET", path, params={"type": kind}, headers=headers) as response:
                    ctype = response.headers.get("content-type", "")
                    if response.status_code >= 400 or ctype.startswith("application/json"):
                        response.read()
                        try:
                            self._envelope("GET", path, response)
                        except FeishuError as exc:
                            if attempt == 0 and exc.code in TOKEN_EXPIRED_CODES:
                                continue
                            raise
                    return self._read_capped(response, path, max_bytes), (ctype.split(";")[0] or None)
            except httpx.TimeoutException:
                raise FeishuError(f"feishu GET {path}: timed out") from None
            except httpx.HTTPError as exc:
                raise FeishuError(f"feishu GET {path}: {type(exc).__name__}") from None
        raise FeishuError(f"feishu GET {path}: token refused")  # pragma: no cover - loop always returns/raises

    @staticmethod
    def _read_capped(response: httpx.Response, path: str, max_bytes: int) -> bytes:
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > max_bytes:
                raise FeishuError(f"feishu GET {path}: larger than {max_bytes} bytes", permanent=True)
            chunks.append(chunk)
        return b"".join(chunks)

    # ---- reactions ---------------------------------------------------------------------------

    def add_reaction(self, message_id: str, emoji: str) -> str:
        body = {"reaction_type": {"emoji_type": emoji}}
        data = self._data(self._call("POST", f"/open-apis/im/v1/messages/{message_id}/reactions", json=body))
        return str(data.get("reaction_id") or "")

    def remove_reaction(self, message_id: str, reaction_id: str) -> None:
        self._call("DELETE", f"/open-apis/im/v1/messages/{message_id}/reactions/{reaction_id}")

    # ---- CardKit streaming cards -------------------------------------------------------------

    def create_card(self, card: dict) -> str:
        body = {"type": "card_json", "data": json.dumps(card, ensure_ascii=False)}
        return str(self._data(self._call("POST", "/open-apis/cardkit/v1/cards", json=body)).get("card_id") or "")

    def stream_text(self, card_id: str, element_id: str, text: str, sequence: int, uuid: str) -> None:
        """Set the full text of a streaming element (Feishu animates the new tail)."""
        self._call("PUT", f"/open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content",
                   json={"content": text, "sequence": sequence, "uuid": uuid})

    def close_streaming(self, card_id: str, sequence: int) -> None:
        settings = json.dumps({"config": {"streaming_mode": False}})
        self._call("PATCH", f"/open-apis/cardkit/v1/cards/{card_id}/settings",
                   json={"settings": settings, "sequence": sequence, "uuid": f"close-{card_id}-{sequence}"[:50]})
