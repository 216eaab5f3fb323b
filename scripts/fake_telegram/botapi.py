"""The Bot API methods of the fake: state per bot, and what each method does with it.

Behaviour follows core.telegram.org/bots/api and /work/shared/notes/telegram.md: answers are
`{"ok": true, "result": …}` or `{"ok": false, "error_code", "description", "parameters"}`; getUpdates
long-polls, confirms every update below `offset`, and answers 409 to the earlier of two concurrent
calls (and while a webhook is set); sendMessage / editMessageText parse `parse_mode: "HTML"` as
Telegram does (entities.py) and refuse text over 4096 UTF-16 units; replies need their parent unless
`allow_sending_without_reply`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from scripts.fake_telegram.entities import EntityError, parse_html, u16

Answer = tuple[int, dict[str, Any]]
MAX_TEXT = 4096


def ok(result: Any) -> Answer:
    return 200, {"ok": True, "result": result}


def err(code: int, description: str, **parameters: Any) -> Answer:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return code, body


MAX_PHOTO_BYTES = 10 * 1024 * 1024  # Telegram's limit for an uploaded photo


class Bot:
    """One bot token's state. All of it is guarded by the server's lock (`cond`)."""

    def __init__(self, token: str, username: str, cond: threading.Condition):
        self.token = token
        self.id = int(token.split(":", 1)[0])
        self.username = username
        self.cond = cond
        self.updates: list[dict[str, Any]] = []       # not yet confirmed, update_id order
        self.history: list[dict[str, Any]] = []       # every update ever queued (for rewind)
        self.next_update_id = 100_000
        self.poll_generation = 0                      # bumped by each getUpdates: an older one ends with 409
        self.polling = 0                              # getUpdates calls in flight
        self.conflicts = 0                            # 409s answered
        self.webhook: dict[str, Any] | None = None    # {"url", "secret_token", "allowed_updates"}
        self.commands: list[dict[str, Any]] = []
        self.chats: dict[str, dict[int, dict[str, Any]]] = {}   # chat id -> message id -> message
        self.next_message_id: dict[str, int] = {}
        self.sent: list[dict[str, Any]] = []          # messages the bot sent, in order
        self.voices: list[dict[str, Any]] = []        # sendVoice / sendAudio, in order
        self.photos: list[dict[str, Any]] = []        # sendPhoto uploads, in order (with their bytes)
        self.edits: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.reactions: list[dict[str, Any]] = []
        self.answered: list[dict[str, Any]] = []      # answerCallbackQuery calls
        self.pressable: dict[str, dict[str, Any]] = {}  # callback query id -> the press it answers

    # ---- messages in the chats -------------------------------------------------------------

    def new_message_id(self, chat_id: str) -> int:
        n = self.next_message_id.get(chat_id, 1)
        self.next_message_id[chat_id] = n + 1
        return n

    def store(self, chat_id: str, message: dict[str, Any]) -> None:
        self.chats.setdefault(chat_id, {})[int(message["message_id"])] = message

    def queue(self, update: dict[str, Any]) -> None:
        self.updates.append(update)
        self.updates.sort(key=lambda u: u.get("update_id", 0))
        self.history.append(update)
        self.cond.notify_all()

    def me(self) -> dict[str, Any]:
        return {"id": self.id, "is_bot": True, "first_name": "PicoBot Fake", "username": self.username,
                "can_join_groups": True, "can_read_all_group_messages": False, "supports_inline_queries": False}


class Methods:
    """Method implementations; `self.lock` is a threading.Condition, `self.files` file_id -> (path, bytes)."""

    lock: threading.Condition
    files: dict[str, tuple[str, bytes]]
    strict: bool

    # ---- receiving -------------------------------------------------------------------------

    def getupdates(self, bot: Bot, p: dict[str, Any]) -> Answer:
        if bot.webhook is not None:
            return err(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook "
                            "to delete the webhook first")
        offset, timeout, limit = _int(p.get("offset")), _int(p.get("timeout")) or 0, _int(p.get("limit")) or 100
        timeout = max(0, min(timeout, 50))
        with self.lock:
            bot.poll_generation += 1
            mine = bot.poll_generation
            self.lock.notify_all()  # an earlier getUpdates of this bot ends with 409
            if offset is not None and offset > 0:
                bot.updates = [u for u in bot.updates if u["update_id"] >= offset]
            bot.polling += 1
            try:
                deadline = time.monotonic() + timeout
                while True:
                    if bot.poll_generation != mine:
                        bot.conflicts += 1
                        return err(409, "Conflict: terminated by other getUpdates request; make sure that only "
                                        "one bot instance is running")
                    if bot.webhook is not None:
                        return err(409, "Conflict: can't use getUpdates method while webhook is active")
                    if bot.updates or time.monotonic() >= deadline:
                        return ok([dict(u) for u in bot.updates[:max(1, min(limit, 100))]])
                    self.lock.wait(min(0.5, max(0.01, deadline - time.monotonic())))
            finally:
                bot.polling -= 1

    def setwebhook(self, bot: Bot, p: dict[str, Any]) -> Answer:
        url = p.get("url")
        if not isinstance(url, str):
            return err(400, "Bad Request: bad webhook: URL must be provided")
        with self.lock:
            if not url:
                bot.webhook = None
                return ok(True)
            bot.webhook = {"url": url, "secret_token": p.get("secret_token") or "",
                           "allowed_updates": p.get("allowed_updates")}
            self.lock.notify_all()
        return ok(True)

    def deletewebhook(self, bot: Bot, p: dict[str, Any]) -> Answer:
        with self.lock:
            bot.webhook = None
            if p.get("drop_pending_updates") is True:
                bot.updates = []
        return ok(True)

    def getwebhookinfo(self, bot: Bot, p: dict[str, Any]) -> Answer:
        with self.lock:
            hook = bot.webhook or {}
            return ok({"url": hook.get("url", ""), "has_custom_certificate": False,
                       "pending_update_count": len(bot.updates) if hook else 0})

    def getme(self, bot: Bot, p: dict[str, Any]) -> Answer:
        return ok(bot.me())

    # ---- sending ---------------------------------------------------------------------------

    def _text(self, p: dict[str, Any]) -> tuple[str, list[dict[str, Any]]] | Answer:
        text = p.get("text")
        if not isinstance(text, str):
            return err(400, "Bad Request: message text is empty")
        mode = str(p.get("parse_mode") or "")
        if mode.lower() == "html":
            try:
                plain, entities = parse_html(text, strict=self.strict)
            except EntityError as exc:
                return err(400, f"Bad Request: {exc}")
        elif mode:
            return err(400, f"Bad Request: unsupported parse_mode {mode!r} in this fake")
        else:
            plain, entities = text, []
        if not plain.strip():
            return err(400, "Bad Request: message text is empty")
        if u16(plain) > MAX_TEXT:
            return err(400, "Bad Request: message is too long")
        return plain, entities

    def sendmessage(self, bot: Bot, p: dict[str, Any]) -> Answer:
        chat_id = _chat(p.get("chat_id"))
        if chat_id is None:
            return err(400, "Bad Request: chat not found")
        parsed = self._text(p)
        if isinstance(parsed[0], int):
            return parsed  # type: ignore[return-value]
        plain, entities = parsed  # type: ignore[misc]
        reply = p.get("reply_parameters") if isinstance(p.get("reply_parameters"), dict) else None
        reply_to = _int(reply.get("message_id")) if reply else _int(p.get("reply_to_message_id"))
        with self.lock:
            chat = self.chat_state(bot, chat_id)
            if chat.get("blocked"):
                return err(403, "Forbidden: bot was blocked by the user")
            if chat.get("migrated_to"):
                return err(400, "Bad Request: group chat was upgraded to a supergroup chat",
                           migrate_to_chat_id=chat["migrated_to"])
            parent = bot.chats.get(chat_id, {}).get(reply_to) if reply_to is not None else None
            if reply_to is not None and parent is None and not (reply or {}).get("allow_sending_without_reply"):
                return err(400, "Bad Request: message to be replied not found")
            message = {"message_id": bot.new_message_id(chat_id), "date": int(time.time()),
                       "chat": {"id": int(chat_id), "type": "private" if not chat_id.startswith("-") else "supergroup"},
                       "from": bot.me(), "text": plain}
            if entities:
                message["entities"] = entities
            markup = p.get("reply_markup")
            if markup is not None:
                rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
                if not (isinstance(rows, list) and all(isinstance(r, list) for r in rows) and all(
                        isinstance(b, dict) and isinstance(b.get("text"), str) and b["text"] and isinstance(
                            b.get("callback_data"), str) and 1 <= len(b["callback_data"].encode()) <= 64
                        for r in rows for b in r)):
                    return err(400, "Bad Request: can't parse inline keyboard button")
                message["reply_markup"] = {"inline_keyboard": rows}
            if parent is not None:
                message["reply_to_message"] = {k: v for k, v in parent.items() if k != "reply_to_message"}
            bot.store(chat_id, message)
            bot.sent.append({"chat_id": chat_id, "message_id": message["message_id"], "text": plain,
                             "html": p.get("text") if str(p.get("parse_mode") or "").lower() == "html" else None,
                             "entities": entities, "reply_to": reply_to if parent is not None else None,
                             "asked_reply_to": reply_to, "time": time.time(),
                             "buttons": [b for r in message.get("reply_markup", {}).get("inline_keyboard", [])
                                         for b in r]})
            self.lock.notify_all()
            return ok(message)

    def editmessagetext(self, bot: Bot, p: dict[str, Any]) -> Answer:
        chat_id, message_id = _chat(p.get("chat_id")), _int(p.get("message_id"))
        if chat_id is None or message_id is None:
            return err(400, "Bad Request: message to edit not found")
        parsed = self._text(p)
        if isinstance(parsed[0], int):
            return parsed  # type: ignore[return-value]
        plain, entities = parsed  # type: ignore[misc]
        with self.lock:
            message = bot.chats.get(chat_id, {}).get(message_id)
            if message is None or message.get("from", {}).get("id") != bot.id:
                return err(400, "Bad Request: message to edit not found")
            if message.get("text") == plain and (message.get("entities") or []) == entities:
                return err(400, "Bad Request: message is not modified: specified new message content and reply "
                                "markup are exactly the same as a current content and reply markup of the message")
            message["text"], message["entities"] = plain, entities
            message["edit_date"] = int(time.time())
            bot.edits.append({"chat_id": chat_id, "message_id": message_id, "text": plain, "time": time.time()})
            for sent in bot.sent:
                if sent["chat_id"] == chat_id and sent["message_id"] == message_id:
                    sent["text"], sent["entities"], sent["edited"] = plain, entities, True
            self.lock.notify_all()
            return ok(message)

    def answercallbackquery(self, bot: Bot, p: dict[str, Any]) -> Answer:
        query_id = p.get("callback_query_id")
        with self.lock:
            if not isinstance(query_id, str) or query_id not in bot.pressable:
                return err(400, "Bad Request: query is too old and response timeout expired or query ID is invalid")
            bot.pressable.pop(query_id)
            bot.answered.append({"callback_query_id": query_id, "text": p.get("text"), "time": time.time()})
            self.lock.notify_all()
        return ok(True)

    def sendchataction(self, bot: Bot, p: dict[str, Any]) -> Answer:
        chat_id = _chat(p.get("chat_id"))
        if chat_id is None or p.get("action") not in ("typing", "upload_photo", "record_voice", "upload_document",
                                                       "upload_voice", "choose_sticker", "find_location"):
            return err(400, "Bad Request: wrong parameter action in request")
        with self.lock:
            bot.actions.append({"chat_id": chat_id, "action": p["action"], "time": time.time()})
        return ok(True)

    def setmessagereaction(self, bot: Bot, p: dict[str, Any]) -> Answer:
        chat_id, message_id = _chat(p.get("chat_id")), _int(p.get("message_id"))
        with self.lock:
            if chat_id is None or message_id not in bot.chats.get(chat_id, {}):
                return err(400, "Bad Request: message to react not found")
            bot.reactions.append({"chat_id": chat_id, "message_id": message_id, "reaction": p.get("reaction") or [],
                                  "time": time.time()})
        return ok(True)

    def setmycommands(self, bot: Bot, p: dict[str, Any]) -> Answer:
        commands = p.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            return err(400, "Bad Request: commands must be a list of at most 100")
        for c in commands:
            name = c.get("command") if isinstance(c, dict) else None
            desc = c.get("description") if isinstance(c, dict) else None
            if not (isinstance(name, str) and 1 <= len(name) <= 32 and name == name.lower()
                    and all(ch.isalnum() or ch == "_" for ch in name)):
                return err(400, "Bad Request: BOT_COMMAND_INVALID")
            if not (isinstance(desc, str) and 1 <= len(desc) <= 256):
                return err(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        with self.lock:
            bot.commands = [dict(c) for c in commands]
        return ok(True)

    def getmycommands(self, bot: Bot, p: dict[str, Any]) -> Answer:
        with self.lock:
            return ok([dict(c) for c in bot.commands])

    def sendvoice(self, bot: Bot, p: dict[str, Any]) -> Answer:
        return self._send_file(bot, p, "voice")

    def sendaudio(self, bot: Bot, p: dict[str, Any]) -> Answer:
        return self._send_file(bot, p, "audio")

    def _send_file(self, bot: Bot, p: dict[str, Any], kind: str) -> Answer:
        """sendVoice / sendAudio with an uploaded file (multipart); a voice note must be Ogg Opus, as Telegram's."""
        chat_id = _chat(p.get("chat_id"))
        if chat_id is None:
            return err(400, "Bad Request: chat not found")
        upload = p.get(kind)
        if not isinstance(upload, dict) or not upload.get("data"):
            return err(400, f"Bad Request: there is no {kind} in the request")
        data = upload["data"]
        if kind == "voice" and not (data.startswith(b"OggS") and b"OpusHead" in data[:200]):
            return err(400, "Bad Request: wrong file type: a voice message must be OGG encoded with OPUS")
        reply = p.get("reply_parameters") if isinstance(p.get("reply_parameters"), dict) else None
        reply_to = _int(reply.get("message_id")) if reply else None
        with self.lock:
            if self.chat_state(bot, chat_id).get("blocked"):
                return err(403, "Forbidden: bot was blocked by the user")
            message = {"message_id": bot.new_message_id(chat_id), "date": int(time.time()),
                       "chat": {"id": int(chat_id), "type": "private" if not chat_id.startswith("-") else "supergroup"},
                       "from": bot.me(), kind: {"file_id": f"V{len(bot.voices) + 1:06d}", "file_size": len(data),
                                                "mime_type": upload.get("content_type")}}
            bot.store(chat_id, message)
            bot.voices.append({"chat_id": chat_id, "message_id": message["message_id"], "kind": kind, "data": data,
                               "filename": upload.get("filename"), "content_type": upload.get("content_type"),
                               "caption": p.get("caption"), "reply_to": reply_to, "time": time.time()})
            self.lock.notify_all()
            return ok(message)

    def sendphoto(self, bot: Bot, p: dict[str, Any]) -> Answer:
        """sendPhoto with an uploaded file (multipart): at most 10 MB, and an image Telegram can read."""
        chat_id = _chat(p.get("chat_id"))
        if chat_id is None:
            return err(400, "Bad Request: chat not found")
        upload = p.get("photo")
        if not isinstance(upload, dict) or not upload.get("data"):
            return err(400, "Bad Request: there is no photo in the request")
        data = upload["data"]
        if len(data) > MAX_PHOTO_BYTES:
            return err(413, "Request Entity Too Large")
        if not (data.startswith((b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF8"))
                or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")):
            return err(400, "Bad Request: IMAGE_PROCESS_FAILED")
        with self.lock:
            if self.chat_state(bot, chat_id).get("blocked"):
                return err(403, "Forbidden: bot was blocked by the user")
            message = {"message_id": bot.new_message_id(chat_id), "date": int(time.time()),
                       "chat": {"id": int(chat_id), "type": "private" if not chat_id.startswith("-") else "supergroup"},
                       "from": bot.me(), "photo": [{"file_id": f"P{len(bot.photos) + 1:06d}", "file_size": len(data),
                                                    "width": 1, "height": 1}]}
            if isinstance(p.get("caption"), str):
                message["caption"] = p["caption"]
            bot.store(chat_id, message)
            bot.photos.append({"chat_id": chat_id, "message_id": message["message_id"], "data": data,
                               "filename": upload.get("filename"), "content_type": upload.get("content_type"),
                               "caption": p.get("caption"), "time": time.time()})
            self.lock.notify_all()
            return ok(message)

    def getfile(self, bot: Bot, p: dict[str, Any]) -> Answer:
        file_id = p.get("file_id")
        with self.lock:
            found = self.files.get(file_id) if isinstance(file_id, str) else None
        if found is None:
            return err(400, "Bad Request: invalid file_id")
        path, data = found
        if len(data) > 20 * 1024 * 1024:
            return err(400, "Bad Request: file is too big")
        return ok({"file_id": file_id, "file_unique_id": "u" + file_id[-12:], "file_size": len(data),
                   "file_path": path})

    def chat_state(self, bot: Bot, chat_id: str) -> dict[str, Any]:
        return self.chat_flags.setdefault((bot.token, chat_id), {})  # type: ignore[attr-defined]


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


def _chat(value: Any) -> str | None:
    number = _int(value)
    if number is not None and number != 0:
        return str(number)
    if isinstance(value, str) and value.startswith("@") and len(value) > 1:
        return value
    return None
