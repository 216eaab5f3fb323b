"""TelegramApi: a small synchronous Bot API client (httpx) for the methods PicoBot calls.

Requests go to `{base_url}/bot<token>/<method>` as JSON, files come from `{base_url}/file/bot<token>/<path>`.
An answer `{"ok": false, "error_code", "description", "parameters"}` raises TelegramError with the code,
the description, `retry_after` (429) and `migrate_to_chat_id` (a group that became a supergroup), and
whether retrying can help (`permanent`: 400, 401, 403, 404; not 409, 429, 5xx, timeouts or network
errors). The token is part of every URL, so no URL, and no httpx message (which may hold one), ever
reaches an error or a log line.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import httpx

from picobot.errors import PicoBotError

log = logging.getLogger("picobot.channels.telegram")

ME_TTL_SECS = 3600


class TelegramError(PicoBotError):
    """A Bot API call failed."""

    def __init__(self, message: str, *, code: int | None = None, description: str = "",
                 retry_after: float | None = None, migrate_to_chat_id: int | None = None, permanent: bool = False):
        self.code = code
        self.description = description
        self.retry_after = retry_after
        self.migrate_to_chat_id = migrate_to_chat_id
        self.permanent = permanent
        super().__init__(message)

    def says(self, *fragments: str) -> bool:
        """Whether the description holds one of the fragments (Telegram's wording; compared lowercased)."""
        text = self.description.lower()
        return any(f.lower() in text for f in fragments)


def bot_id(token: str) -> str:
    """The bot's numeric id: the part of the token before the colon (not a secret)."""
    head = token.split(":", 1)[0]
    return head if head.isdigit() else "unknown"


class TelegramApi:
    """One per (bot, process); thread-safe."""

    def __init__(self, token: str, base_url: str = "https://api.telegram.org", *, redis: Any = None,
                 timeout: float = 15.0, transport: httpx.BaseTransport | None = None):
        self._token = token
        self.base_url = base_url.rstrip("/")
        self.bot_id = bot_id(token)
        self._redis = redis
        self._timeout = timeout
        self._client = httpx.Client(transport=transport, follow_redirects=False,
                                    timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)))
        self._me: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never shows the token
        return f"TelegramApi(bot_id={self.bot_id!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        self._client.close()

    # ---- transport ---------------------------------------------------------------------------

    def call(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None) -> Any:
        """The `result` of one Bot API call; raises TelegramError."""
        url = f"{self.base_url}/bot{self._token}/{method}"
        try:
            response = self._client.post(url, json=params or {}, timeout=timeout or self._timeout)
        except httpx.TimeoutException:
            raise TelegramError(f"telegram {method}: timed out") from None
        except httpx.HTTPError as exc:
            raise TelegramError(f"telegram {method}: {type(exc).__name__}") from None
        return self._result(method, response)

    def upload(self, method: str, fields: dict[str, Any], files: dict[str, tuple[str, bytes, str]], *,
               timeout: float | None = None) -> Any:
        """The `result` of one Bot API call with files (multipart/form-data); raises TelegramError."""
        url = f"{self.base_url}/bot{self._token}/{method}"
        data = {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items() if v is not None}
        try:
            response = self._client.post(url, data=data, files=files, timeout=timeout or max(self._timeout, 60.0))
        except httpx.TimeoutException:
            raise TelegramError(f"telegram {method}: timed out") from None
        except httpx.HTTPError as exc:
            raise TelegramError(f"telegram {method}: {type(exc).__name__}") from None
        return self._result(method, response)

    @staticmethod
    def _result(method: str, response: httpx.Response) -> Any:
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("ok") is True and status < 400:
            return body.get("result")
        if not isinstance(body, dict):
            raise TelegramError(f"telegram {method}: http {status}, not a Bot API answer", code=status,
                                permanent=status in (401, 403, 404))
        code = body.get("error_code")
        code = code if isinstance(code, int) else status
        description = str(body.get("description") or f"http {status}")[:300]
        params = body.get("parameters")
        params = params if isinstance(params, dict) else {}
        retry_after = params.get("retry_after")
        retry_after = float(retry_after) if isinstance(retry_after, (int, float)) and retry_after >= 0 else None
        migrate = params.get("migrate_to_chat_id")
        transient = code in (409, 429) or code >= 500 or (retry_after is not None)
        raise TelegramError(f"telegram {method}: {code} {description}", code=code, description=description,
                            retry_after=retry_after, migrate_to_chat_id=migrate if isinstance(migrate, int) else None,
                            permanent=not transient)

    # ---- methods -----------------------------------------------------------------------------

    def get_me(self) -> dict[str, Any]:
        """{"id", "username", …} of the bot, asked once an hour (cached in Redis for every process)."""
        with self._lock:
            if self._me is not None:
                return dict(self._me)
        me = self._cached_me()
        if me is None:
            me = self.call("getMe")
            if not isinstance(me, dict):
                raise TelegramError("telegram getMe: no user in the answer", permanent=True)
            self._store_me(me)
        with self._lock:
            self._me = me
        return dict(me)

    def _me_key(self) -> str:
        from picobot.channels.telegram import keys

        return keys.me(self.bot_id)

    def _cached_me(self) -> dict[str, Any] | None:
        if self._redis is None:
            return None
        try:
            raw = self._redis.get(self._me_key())
            me = json.loads(raw) if raw else None
        except Exception:  # Redis down or garbage: ask Telegram
            return None
        return me if isinstance(me, dict) else None

    def _store_me(self, me: dict[str, Any]) -> None:
        if self._redis is not None:
            try:
                self._redis.set(self._me_key(), json.dumps(me), ex=ME_TTL_SECS)
            except Exception as exc:
                log.info("telegram: getMe not cached (%s)", type(exc).__name__)

    def get_updates(self, offset: int | None, timeout: int, allowed_updates: list[str]) -> list[Any]:
        params: dict[str, Any] = {"timeout": timeout, "allowed_updates": allowed_updates, "limit": 100}
        if offset is not None:
            params["offset"] = offset
        result = self.call("getUpdates", params, timeout=timeout + 10)
        return result if isinstance(result, list) else []

    def send_message(self, chat_id: str, text: str, *, html: bool, reply_to: int | None = None,
                     buttons: list[list[str]] | None = None) -> int:
        """`buttons`: [label, callback data] pairs, shown as one inline keyboard row each."""
        params: dict[str, Any] = {"chat_id": chat_id, "text": text, "link_preview_options": {"is_disabled": True}}
        if html:
            params["parse_mode"] = "HTML"
        if buttons:
            params["reply_markup"] = {"inline_keyboard": [[{"text": label, "callback_data": data}]
                                                          for label, data in buttons]}
        if reply_to is not None:
            params["reply_parameters"] = {"message_id": reply_to, "allow_sending_without_reply": True}
        result = self.call("sendMessage", params)
        return int(result.get("message_id") or 0) if isinstance(result, dict) else 0

    def edit_message_text(self, chat_id: str, message_id: int, text: str, *, html: bool) -> None:
        """Replace a message's text; "message is not modified" counts as done."""
        params: dict[str, Any] = {"chat_id": chat_id, "message_id": message_id, "text": text,
                                  "link_preview_options": {"is_disabled": True}}
        if html:
            params["parse_mode"] = "HTML"
        try:
            self.call("editMessageText", params)
        except TelegramError as exc:
            if not exc.says("message is not modified"):
                raise

    def answer_callback_query(self, callback_query_id: str, text: str = "") -> None:
        """Stop the pressed button's spinner (a toast with `text` when given)."""
        params: dict[str, Any] = {"callback_query_id": callback_query_id}
        if text:
            params["text"] = text[:200]
        self.call("answerCallbackQuery", params)

    def send_chat_action(self, chat_id: str, action: str = "typing") -> None:
        self.call("sendChatAction", {"chat_id": chat_id, "action": action})

    def set_reaction(self, chat_id: str, message_id: int, emoji: str | None) -> None:
        reaction = [{"type": "emoji", "emoji": emoji}] if emoji else []
        self.call("setMessageReaction", {"chat_id": chat_id, "message_id": message_id, "reaction": reaction})

    def set_my_commands(self, commands: list[dict[str, str]]) -> None:
        self.call("setMyCommands", {"commands": commands})

    def set_webhook(self, url: str, secret_token: str, allowed_updates: list[str]) -> None:
        self.call("setWebhook", {"url": url, "secret_token": secret_token, "allowed_updates": allowed_updates})

    def delete_webhook(self) -> None:
        self.call("deleteWebhook", {"drop_pending_updates": False})

    def send_voice(self, chat_id: str, data: bytes, *, voice_note: bool, mime: str, filename: str,
                   reply_to: int | None = None) -> int:
        """A voice note (Ogg Opus: sendVoice) or, for any other audio, an audio file (sendAudio)."""
        method, field = ("sendVoice", "voice") if voice_note else ("sendAudio", "audio")
        reply = {"message_id": reply_to, "allow_sending_without_reply": True} if reply_to is not None else None
        result = self.upload(method, {"chat_id": chat_id, "reply_parameters": reply},
                             {field: (filename, data, mime)})
        return int(result.get("message_id") or 0) if isinstance(result, dict) else 0

    def send_photo(self, chat_id: str, data: bytes, *, filename: str, mime: str) -> int:
        """A photo uploaded with the request (sendPhoto, multipart); its message id."""
        result = self.upload("sendPhoto", {"chat_id": chat_id}, {"photo": (filename, data, mime)})
        return int(result.get("message_id") or 0) if isinstance(result, dict) else 0

    def get_file(self, file_id: str) -> dict[str, Any]:
        result = self.call("getFile", {"file_id": file_id})
        return result if isinstance(result, dict) else {}

    def download(self, file_path: str, max_bytes: int) -> bytes:
        """The bytes of a file from getFile; refuses more than max_bytes (permanent)."""
        url = f"{self.base_url}/file/bot{self._token}/{file_path.lstrip('/')}"
        try:
            with self._client.stream("GET", url) as response:
                if response.status_code >= 400:
                    response.read()
                    self._result("getFile download", response)
                chunks, size = [], 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise TelegramError(f"telegram file: larger than {max_bytes} bytes", permanent=True)
                    chunks.append(chunk)
                return b"".join(chunks)
        except httpx.TimeoutException:
            raise TelegramError("telegram file: timed out") from None
        except httpx.HTTPError as exc:
            raise TelegramError(f"telegram file: {type(exc).__name__}") from None
