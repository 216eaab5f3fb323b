"""The fake Feishu OpenAPI's state and its im/v1 + cardkit/v1 endpoints (no HTTP here; server.py routes).

Each handler takes (match groups, query, body dict) and returns (http status, envelope dict). Errors use
Feishu's codes: 230001 bad param, 230002 bot not in chat, 230011 recalled, 230025 content too long,
231003 message not found, 232009 chat dissolved, 300317 CardKit sequence not increasing, 300309 streaming closed.
"""

from __future__ import annotations

import json
import threading
import time
import uuid as uuidlib
from typing import Any

MAX_CARD_BYTES = 30 * 1024       # post / interactive content
MAX_TEXT_BYTES = 150 * 1024
UUID_TTL_SECS = 3600
RECEIVE_ID_TYPES = {"chat_id", "open_id", "user_id", "union_id", "email"}
MAX_IMAGE_BYTES = 10 * 1024 * 1024  # im/v1/images
MSG_TYPES = {"text", "post", "image", "file", "audio", "media", "sticker", "interactive", "share_chat", "share_user"}

Result = tuple[int, dict[str, Any]]


def ok(data: dict[str, Any] | None = None) -> Result:
    return 200, {"code": 0, "msg": "success", "data": data or {}}


def err(code: int, msg: str, status: int = 400) -> Result:
    return status, {"code": code, "msg": msg, "data": {}}


def new_id(prefix: str) -> str:
    return prefix + uuidlib.uuid4().hex[:24]



def _json_object(raw: Any, field: str, limit: int, too_long: str) -> tuple[dict[str, Any] | None, Result | None]:
    """A request field that holds a JSON object as a string (message content, card data), as Feishu checks it."""
    if not isinstance(raw, str):
        return None, err(230001, f"{field} must be a JSON string")
    if len(raw.encode()) > limit:
        return None, err(230025, too_long)
    try:
        value = json.loads(raw)
    except ValueError:
        return None, err(230001, f"{field} is not valid JSON")
    if not isinstance(value, dict):
        return None, err(230001, f"{field} must be a JSON object")
    return value, None

class OpenApiState:
    """Messages, chats, cards and reactions of the fake tenant, shared by all handler threads."""

    def __init__(self, app_id: str, rate_limit_qps: int | None = 5, strict_messages: bool = False) -> None:
        self.lock = threading.RLock()
        self.app_id = app_id
        self.rate_limit_qps = rate_limit_qps
        self.strict_messages = strict_messages  # unknown message ids -> 231003 (else a reply to one is accepted)
        self.sent: list[dict[str, Any]] = []
        self.messages: dict[str, dict[str, Any]] = {}
        self.chat_state: dict[str, str] = {}           # chat_id -> "removed" | "dissolved"
        self.recalled: set[str] = set()
        self.resources: dict[tuple[str, str], tuple[bytes, str]] = {}
        self.files: dict[str, dict[str, Any]] = {}       # file_key -> an uploaded file (im/v1/files)
        self.images: dict[str, dict[str, Any]] = {}      # image_key -> an uploaded image (im/v1/images)
        self.reactions: dict[str, list[dict[str, Any]]] = {}
        self.cards: dict[str, dict[str, Any]] = {}
        self.updates: list[dict[str, Any]] = []        # PATCH / PUT of messages
        self._uuids: dict[str, tuple[float, str]] = {}
        self._chat_hits: dict[str, list[float]] = {}

    # --- checks ----------------------------------------------------------------------------

    def _chat_error(self, chat_id: str | None) -> Result | None:
        state = self.chat_state.get(chat_id or "")
        if state == "removed":
            return err(230002, "Bot/User can NOT be out of the chat.")
        if state == "dissolved":
            return err(232009, "Your operator does not have permission: the chat has been dissolved.")
        return None

    def _rate_limited(self, chat_id: str | None) -> bool:
        if not self.rate_limit_qps or not chat_id:
            return False
        now = time.monotonic()
        hits = [t for t in self._chat_hits.get(chat_id, []) if now - t < 1.0]
        limited = len(hits) >= self.rate_limit_qps
        if not limited:
            hits.append(now)
        self._chat_hits[chat_id] = hits
        return limited

    @staticmethod
    def _content(body: dict[str, Any]) -> tuple[dict[str, Any] | None, Result | None]:
        msg_type = body.get("msg_type")
        if msg_type not in MSG_TYPES:
            return None, err(230001, f"invalid msg_type: {msg_type!r}")
        return _json_object(body.get("content"), "content", MAX_TEXT_BYTES if msg_type == "text" else MAX_CARD_BYTES,
                            "The message content exceeds the length limit.")

    def _bad_image(self, body: dict[str, Any], content: dict[str, Any]) -> Result | None:
        """An image message must name an image uploaded here (im/v1/images)."""
        if body.get("msg_type") == "image" and content.get("image_key") not in self.images:
            return err(230001, "invalid image_key")
        return None

    def _seen_uuid(self, key: str | None) -> dict[str, Any] | None:
        if not key:
            return None
        hit = self._uuids.get(key)
        if hit and time.monotonic() - hit[0] < UUID_TTL_SECS:
            return self.messages.get(hit[1])
        return None

    def _store(self, chat_id: str | None, body: dict[str, Any], content: dict[str, Any], kind: str,
               reply_to: str | None = None) -> dict[str, Any]:
        message_id = new_id("om_")
        now_ms = str(int(time.time() * 1000))
        msg = {"message_id": message_id, "root_id": reply_to or "", "parent_id": reply_to or "",
               "msg_type": body["msg_type"], "create_time": now_ms, "update_time": now_ms, "deleted": False,
               "updated": False, "chat_id": chat_id, "upper_message_id": "", "mentions": [],
               "sender": {"id": self.app_id, "id_type": "app_id", "sender_type": "app", "tenant_key": "fake"},
               "body": {"content": body["content"]}}
        self.messages[message_id] = msg
        if body.get("uuid"):
            self._uuids[body["uuid"]] = (time.monotonic(), message_id)
        self.sent.append({"message_id": message_id, "chat_id": chat_id, "msg_type": body["msg_type"],
                          "content": content, "uuid": body.get("uuid"), "reply_to": reply_to, "kind": kind,
                          "time": time.time()})
        card_id = (content.get("data") or {}).get("card_id") if content.get("type") == "card" else None
        if card_id in self.cards:
            self.cards[card_id]["message_id"] = message_id
        return msg

    # --- im/v1 -------------------------------------------------------------------------------

    def send(self, groups: tuple[str, ...], query: dict[str, str], body: dict[str, Any]) -> Result:
        id_type = query.get("receive_id_type")
        if id_type not in RECEIVE_ID_TYPES:
            return err(230001, f"invalid receive_id_type: {id_type!r}")
        receive_id = body.get("receive_id")
        if not isinstance(receive_id, str) or not receive_id:
            return err(230001, "receive_id is required")
        content, bad = self._content(body)
        if bad:
            return bad
        with self.lock:
            if (seen := self._seen_uuid(body.get("uuid"))) is not None:
                return ok(seen)
            if (bad := self._bad_image(body, content) or self._chat_error(receive_id)):
                return bad
            if self._rate_limited(receive_id):
                return 429, {"code": 99991400, "msg": "request trigger frequency limit", "data": {}}
            return ok(self._store(receive_id if id_type == "chat_id" else receive_id, body, content, "send"))

    def reply(self, groups: tuple[str, ...], query: dict[str, str], body: dict[str, Any]) -> Result:
        parent_id = groups[0]
        content, bad = self._content(body)
        if bad:
            return bad
        with self.lock:
            if (seen := self._seen_uuid(body.get("uuid"))) is not None:
                return ok(seen)
            if (bad := self._bad_image(body, content)):
                return bad
            if parent_id in self.recalled:
                return err(230011, "The message was withdrawn.")
            parent = self.messages.get(parent_id)
            if parent is None and self.strict_messages:
                return err(231003, "The message is not found, maybe not exist or deleted.")
            chat_id = parent["chat_id"] if parent else None
            if (bad := self._chat_error(chat_id)):
                return bad
            if self._rate_limited(chat_id):
                return 429, {"code": 99991400, "msg": "request trigger frequency limit", "data": {}}
            return ok(self._store(chat_id, body, content, "reply", reply_to=parent_id))

    def _own_message(self, message_id: str) -> tuple[dict[str, Any] | None, Result | None]:
        msg = self.messages.get(message_id)
        if msg is None or message_id in self.recalled:
            return None, err(231003, "The message is not found, maybe not exist or deleted.")
        return msg, None

    def edit(self, groups: tuple[str, ...], query: dict[str, str], body: dict[str, Any], method: str) -> Result:
        raw = body.get("content")
        content, bad = _json_object(raw, "content", MAX_CARD_BYTES, "The message content exceeds the length limit.")
        if bad:
            return bad
        with self.lock:
            msg, bad = self._own_message(groups[0])
            if bad:
                return bad
            if (bad := self._chat_error(msg["chat_id"])):
                return bad
            if method == "PATCH" and msg["msg_type"] != "interactive":
                return err(230001, "only cards (interactive) can be patched")
            if method == "PUT" and msg["msg_type"] not in ("text", "post"):
                return err(230001, "only text and post messages can be edited")
            msg["body"]["content"], msg["updated"] = raw, True
            msg["update_time"] = str(int(time.time() * 1000))
            self.updates.append({"message_id": groups[0], "method": method, "content": content})
            for rec in self.sent:
                if rec["message_id"] == groups[0]:
                    rec["content"] = content
            return ok(msg if method == "PUT" else {})

    def get_message(self, groups: tuple[str, ...], query: dict[str, str], body: dict[str, Any]) -> Result:
        with self.lock:
            msg, bad = self._own_message(groups[0])
            return bad if bad else ok({"items": [msg]})

    def upload_file(self, ctype: str, raw: bytes) -> Result:
        """POST im/v1/files (multipart: file_type, file_name, duration, file): the file's key. An `opus`
        file must be Ogg Opus, as Feishu's audio messages are."""
        from picobot.demo.llm.audio import multipart

        fields = multipart(raw, ctype)
        upload = fields.get("file")
        file_type = fields.get("file_type")
        if file_type not in ("opus", "mp4", "pdf", "doc", "xls", "ppt", "stream"):
            return err(234001, "Invalid request param: file_type")
        if not isinstance(upload, dict) or not upload["data"] or not fields.get("file_name"):
            return err(234001, "Invalid request param: file or file_name")
        if file_type == "opus" and not (upload["data"].startswith(b"OggS") and b"OpusHead" in upload["data"][:200]):
            return err(234001, "Invalid request param: the file is not opus")
        key = new_id("file_v3_")
        with self.lock:
            self.files[key] = {"file_type": file_type, "file_name": fields["file_name"], "data": upload["data"],
                               "duration": fields.get("duration")}
        return ok({"file_key": key})

    def upload_image(self, ctype: str, raw: bytes) -> Result:
        """POST im/v1/images (multipart: image_type, image): the image's key. At most 10 MB, of an image
        format Feishu reads (checked by the bytes)."""
        from picobot.demo.llm.audio import multipart

        fields = multipart(raw, ctype)
        upload = fields.get("image")
        if fields.get("image_type") not in ("message", "avatar"):
            return err(234001, "Invalid request param: image_type")
        if not isinstance(upload, dict) or not upload["data"]:
            return err(234001, "Invalid request param: image")
        data = upload["data"]
        if len(data) > MAX_IMAGE_BYTES:
            return err(234006, "The file size exceed the max value.")
        if not (data.startswith((b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF8", b"BM"))
                or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")):
            return err(234011, "Can't recognise image format.")
        key = new_id("img_v3_")
        with self.lock:
            self.images[key] = {"image_type": fields["image_type"], "data": data,
                                "file_name": upload.get("filename")}
        return ok({"image_key": key})

    def resource(self, groups: tuple[str, ...], query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if query.get("type") not in ("image", "file"):
            status, env = err(230001, "type must be image or file")
            return status, {"Content-Type": "application/json"}, json.dumps(env).encode()
        with self.lock:
            hit = self.resources.get((groups[0], groups[1]))
        if hit is None:
            status, env = err(234003, "File not in msg.")
            return status, {"Content-Type": "application/json"}, json.dumps(env).encode()
        return 200, {"Content-Type": hit[1]}, hit[0]

    def add_reaction(self, groups: tuple[str, ...], query: dict[str, str], body: dict[str, Any]) -> Result:
        emoji = ((body.get("reaction_type") or {}).get("emoji_type"))
        if not isinstance(emoji, str) or not emoji:
            return err(230001, "reaction_type.emoji_type is required")
        with self.lock:
            if groups[0] in self.recalled or (self.strict_messages and groups[0] not in self.messages):
                return err(231003, "The message is not found, maybe not exist or deleted.")
            rid = new_id("ZCaCI")
            self.reactions.setdefault(groups[0], []).append({"reaction_id": rid, "emoji": emoji, "deleted": False})
            return ok({"reaction_id": rid, "reaction_type": {"emoji_type": emoji},
                       "operator": {"operator_id": self.app_id, "operator_type": "app"},
                       "action_time": str(int(time.time() * 1000))})

    def delete_reaction(self, groups: tuple[str, ...], query: dict[str, str], body: dict[str, Any]) -> Result:
        with self.lock:
            for r in self.reactions.get(groups[0], []):
                if r["reaction_id"] == groups[1] and not r["deleted"]:
                    r["deleted"] = True
                    return ok({"reaction_id": r["reaction_id"], "reaction_type": {"emoji_type": r["emoji"]}})
        return err(231010, "The reaction is not found.")

    # --- cardkit/v1 --------------------------------------------------------------------------

    def create_card(self, groups: tuple[str, ...], query: dict[str, str], body: dict[str, Any]) -> Result:
        if body.get("type") != "card_json":
            return err(230001, "type must be card_json and data a JSON string")
        card, bad = _json_object(body.get("data"), "data", MAX_CARD_BYTES, "The card content exceeds the length limit.")
        if bad:
            return bad
        with self.lock:
            card_id = new_id("7")
            streaming = bool((card.get("config") or {}).get("streaming_mode"))
            self.cards[card_id] = {"card": card, "texts": [], "closed": not streaming, "sequence": 0,
                                   "elements": {}, "message_id": None}
            return ok({"card_id": card_id})

    def _card_seq(self, card_id: str, body: dict[str, Any]) -> tuple[dict[str, Any] | None, Result | None]:
        card = self.cards.get(card_id)
        if card is None:
            return None, err(300301, "card not found")
        seq = body.get("sequence")
        if not isinstance(seq, int) or seq <= card["sequence"]:
            return None, err(300317, f"sequence must increase (last {card['sequence']}, got {seq!r})")
        card["sequence"] = seq
        return card, None

    def stream_text(self, groups: tuple[str, ...], query: dict[str, str], body: dict[str, Any]) -> Result:
        if not isinstance(body.get("content"), str):
            return err(230001, "content must be a string")
        with self.lock:
            card = self.cards.get(groups[0])
            if card is not None and card["closed"]:
                return err(300309, "streaming mode is closed")
            card, bad = self._card_seq(groups[0], body)
            if bad:
                return bad
            card["elements"][groups[1]] = body["content"]
            card["texts"].append(body["content"])
            return ok()

    def card_settings(self, groups: tuple[str, ...], query: dict[str, str], body: dict[str, Any]) -> Result:
        try:
            settings = json.loads(body.get("settings") or "")
        except (TypeError, ValueError):
            return err(230001, "settings must be a JSON string")
        with self.lock:
            card, bad = self._card_seq(groups[0], body)
            if bad:
                return bad
            if (settings.get("config") or {}).get("streaming_mode") is False:
                card["closed"] = True
            card["settings"] = settings
            return ok()
