"""A stored Telegram message -> the InboundMessage PicoBot handles (or none).

Private chats always count; groups per `group_policy` ("mention": a command, an @mention of the bot
or a reply to one of its messages; "open": every message; "disabled": none). `/cmd@thisbot` becomes
`/cmd`; a command addressed to another bot is not ours; `/start` (what Telegram sends first) is
`/help`. The bot's own @mention is removed from the text. A photo is downloaded (getFile, the
largest size within `max_download_bytes`), saved to the media dir and given to the model as a
`data:` image block (≤ 5 MB, else a note); a document is saved and named in a note; a voice
message (or an audio file) is downloaded and becomes an `audio` block, heard (transcribed) by the
worker before the turn (docs/VOICE.md); other kinds a short "[unsupported message type X]". A reply gets `Replying to:` and the quoted text first (the
user's own quote when they picked one). A file Telegram refuses becomes a note; a transient failure
(network, 5xx, 429) raises, so the event inbox processes the message again later.
"""

from __future__ import annotations

import base64
import logging
import re
from pathlib import Path
from typing import Any

from picobot.channels.telegram.api import TelegramError
from picobot.domain.audio import audio_block
from picobot.gateway.inbound import InboundMessage

log = logging.getLogger("picobot.channels.telegram")

MAX_INLINE_IMAGE_BYTES = 5 * 1024 * 1024
_COMMAND = re.compile(r"/([A-Za-z0-9_]{1,64})(?:@([A-Za-z0-9_]{1,64}))?(?=\s|$)")
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-]+")
_KINDS = ("video", "video_note", "animation", "location", "venue", "contact", "poll", "dice", "game",
          "story", "invoice")
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"))


def message_ref(chat_id: Any, message_id: Any) -> str:
    """PicoBot's platform id of a message: unique per bot (Telegram's ids are per chat), no colon."""
    return f"{chat_id}_{message_id}"


def message_id_of(ref: Any) -> int | None:
    """The Telegram message id in a platform id from message_ref (None if it is not one)."""
    if not isinstance(ref, str):
        return None
    tail = ref.rpartition("_")[2]
    return int(tail) if tail.isdigit() else None


class Reader:
    """Turns one stored message into input; `api` is the bot's TelegramApi."""

    def __init__(self, cfg: Any, api: Any, media_dir: Path, channel: str):
        self.cfg, self.api, self.media_dir, self.channel = cfg, api, Path(media_dir), channel

    def to_inbound(self, event: dict[str, Any]) -> list[InboundMessage]:
        if isinstance(event.get("callback_query"), dict):
            return self._button(event["callback_query"])
        message = event.get("message")
        if not isinstance(message, dict):
            return []
        chat, sender = message.get("chat") or {}, message.get("from") or {}
        chat_id, ref = str(chat.get("id")), message_ref(chat.get("id"), message.get("message_id"))
        private = chat.get("type", "private") == "private"
        text = message.get("text") if isinstance(message.get("text"), str) else message.get("caption")
        text = text if isinstance(text, str) else ""
        command, text = self._command(text)
        if command is False:
            return []  # a command for another bot in the group
        if not private and not (command or self._group_allows(message, text)):
            return []
        if not private:
            text = self._without_own_mention(text)
        blocks = self._media(message, ref)
        text = text.strip()
        if not text and not blocks:  # a quoted message alone (or nothing): nothing of the user's to answer
            content: Any = None
        elif text and command and not blocks:
            content = text  # the gateway runs it, exactly as on the web
        else:
            content = _merge([_text(self._reply_context(message)), _text(text), *blocks])
        if not content:
            log.info("telegram (%s): message %s ignored: nothing in it to answer", self.channel, ref)
            return []
        return [InboundMessage(channel=self.channel, chat_id=chat_id, sender_id=str(sender.get("id")), content=content,
                               platform_message_id=ref,
                               metadata={"reply_to": ref, "chat_type": "p2p" if private else "group"})]

    def _button(self, query: dict[str, Any]) -> list[InboundMessage]:
        """A pressed inline button: its data (a slash command) as the presser's input; the spinner stopped."""
        try:
            self.api.answer_callback_query(str(query.get("id")))
        except TelegramError as exc:  # a press answered late (over ~15 s) is refused by Telegram; the command still runs
            log.info("telegram (%s): answerCallbackQuery failed: %s", self.channel, exc)
        message, sender = query.get("message") or {}, query.get("from") or {}
        chat = message.get("chat") or {}
        data = query.get("data")
        if not isinstance(data, str) or not data.startswith("/"):
            return []
        ref = message_ref(chat.get("id"), message.get("message_id"))
        return [InboundMessage(channel=self.channel, chat_id=str(chat.get("id")), sender_id=str(sender.get("id")),
                               content=data, platform_message_id=f"{chat.get('id')}_cb{query.get('id')}",
                               metadata={"reply_to": ref, "chat_type": "p2p" if chat.get("type", "private") ==
                                         "private" else "group"})]

    # ---- who is it for -----------------------------------------------------------------------

    def _me(self) -> dict[str, Any]:
        return self.api.get_me()

    def _command(self, text: str) -> tuple[bool | None, str]:
        """(True, "/cmd rest") for our command, (False, "") for another bot's, (None, text) for no command."""
        m = _COMMAND.match(text)
        if not m:
            return None, text
        if m.group(2):
            username = str(self._me().get("username") or "")
            if m.group(2).lower() != username.lower():
                return False, ""
        name = "help" if m.group(1).lower() == "start" else m.group(1)  # Telegram's first message is /start
        return True, f"/{name}{text[m.end():]}"

    def _group_allows(self, message: dict[str, Any], text: str) -> bool:
        policy = self.cfg.group_policy
        if policy != "mention":
            return policy == "open"
        me = self._me()
        username = str(me.get("username") or "")
        if username and f"@{username.lower()}" in text.lower():
            return True
        parent = message.get("reply_to_message")
        parent_from = parent.get("from") if isinstance(parent, dict) else None
        if isinstance(parent_from, dict) and parent_from.get("id") == me.get("id"):
            return True
        for entity in message.get("entities") or message.get("caption_entities") or []:
            user = entity.get("user") if isinstance(entity, dict) else None
            if isinstance(user, dict) and entity.get("type") == "text_mention" and user.get("id") == me.get("id"):
                return True
        return False

    def _without_own_mention(self, text: str) -> str:
        username = str(self._me().get("username") or "") if "@" in text else ""
        if not username:
            return text
        return re.sub(rf"@{re.escape(username)}\b", "", text, flags=re.I).strip()

    # ---- what is in it -----------------------------------------------------------------------

    def _reply_context(self, message: dict[str, Any]) -> str:
        limit = self.cfg.reply_context_max_chars
        parent = message.get("reply_to_message")
        if not (limit and isinstance(parent, dict)):
            return ""
        quote = message.get("quote")
        quoted = quote.get("text") if isinstance(quote, dict) else None
        if not isinstance(quoted, str) or not quoted.strip():
            quoted = parent.get("text") if isinstance(parent.get("text"), str) else parent.get("caption")
        if not isinstance(quoted, str) or not quoted.strip():
            quoted = f"[{_kind(parent)}]"
        if len(quoted) > limit:
            quoted = quoted[:limit].rstrip() + "…"
        return "Replying to:\n" + "\n".join(f"> {line}" for line in quoted.splitlines())

    def _media(self, message: dict[str, Any], ref: str) -> list[dict[str, Any]]:
        photo = message.get("photo")
        if isinstance(photo, list) and photo:
            return [self._photo(photo, ref)]
        document = message.get("document")
        if isinstance(document, dict):
            return [self._document(document, ref)]
        for key in ("voice", "audio"):
            if isinstance(message.get(key), dict):
                return [self._voice(message[key], ref)]
        sticker = message.get("sticker")
        if isinstance(sticker, dict):
            emoji = sticker.get("emoji")
            emoji = emoji if isinstance(emoji, str) else ""
            return [_text(f"[sticker {emoji[:8]}]".replace(" ]", "]"))]
        kind = next((k for k in _KINDS if k in message), None)
        if kind:
            return [_text(f"[unsupported message type {kind}]")]
        return []

    def _photo(self, sizes: list[Any], ref: str) -> dict[str, Any]:
        usable = [s for s in sizes if isinstance(s, dict) and isinstance(s.get("file_id"), str)
                  and (not isinstance(s.get("file_size"), int) or s["file_size"] <= self.cfg.max_download_bytes)]
        if not usable:
            return _text("[a photo that could not be downloaded: too large]")
        best = max(usable, key=_area)
        data, why = self._download(best["file_id"])
        if data is None:
            return _text(f"[a photo that could not be downloaded: {why}]")
        mime = _image_mime(data)
        path = self._save(f"{ref}-{_safe(str(best.get('file_unique_id') or 'photo'))}{_EXT.get(mime or '', '.jpg')}",
                          data)
        if mime is None or len(data) > MAX_INLINE_IMAGE_BYTES:
            return _text(f"[photo saved to {path} ({len(data)} bytes), not shown to the model]")
        return {"type": "image_url", "url": f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"}

    def _document(self, document: dict[str, Any], ref: str) -> dict[str, Any]:
        name = document.get("file_name")
        name = name if isinstance(name, str) else "file"
        name = name[:120] or "file"
        size = document.get("file_size")
        if not isinstance(document.get("file_id"), str):
            return _text(f"[file {name}: no file id]")
        if isinstance(size, int) and size > self.cfg.max_download_bytes:
            return _text(f"[file {name} ({size} bytes) not downloaded: over {self.cfg.max_download_bytes} bytes]")
        data, why = self._download(document["file_id"])
        if data is None:
            return _text(f"[file {name} could not be downloaded: {why}]")
        path = self._save(f"{ref}-{name}", data)
        return _text(f"[file {name} ({len(data)} bytes) saved to {path}]")

    def _voice(self, voice: dict[str, Any], ref: str) -> dict[str, Any]:
        """A voice message (or audio file) as an `audio` block; a note when it cannot be downloaded."""
        size = voice.get("file_size")
        if not isinstance(voice.get("file_id"), str):
            return _text("[voice message: no file id]")
        if isinstance(size, int) and size > self.cfg.max_download_bytes:
            return _text(f"[voice message ({size} bytes) not downloaded: over {self.cfg.max_download_bytes} bytes]")
        data, why = self._download(voice["file_id"])
        if data is None:
            return _text(f"[a voice message that could not be downloaded: {why}]")
        mime = voice.get("mime_type")
        if not isinstance(mime, str) or not re.fullmatch(r"audio/[A-Za-z0-9.+-]{1,64}", mime):
            mime = "audio/ogg"
        return audio_block(mime.lower(), data)

    def _download(self, file_id: str) -> tuple[bytes | None, str]:
        try:
            info = self.api.get_file(file_id)
            file_path = info.get("file_path")
            if not isinstance(file_path, str) or not file_path:
                return None, "Telegram gave no file path"
            return self.api.download(file_path, self.cfg.max_download_bytes), ""
        except TelegramError as exc:
            if not exc.permanent:
                raise  # the inbox tries the message again later
            log.info("telegram (%s): a file was not downloaded (%s)", self.channel, exc.code)
            return None, "too large" if "larger than" in str(exc) else "Telegram refused it"

    def _save(self, name: str, data: bytes) -> Path:
        self.media_dir.mkdir(parents=True, exist_ok=True)
        path = self.media_dir / _safe(name)[-160:]
        tmp = path.with_name(path.name + ".part")
        tmp.write_bytes(data)
        tmp.replace(path)
        return path


_EXT = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}


def _image_mime(data: bytes) -> str | None:
    for magic, mime in _IMAGE_MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _area(size: dict[str, Any]) -> int:
    width, height = size.get("width"), size.get("height")
    return width * height if type(width) is int and type(height) is int else 0


def _kind(message: dict[str, Any]) -> str:
    for key in ("photo", "document", "voice", "audio", "sticker", *_KINDS):
        if key in message:
            return key
    return "message"


def _safe(name: str) -> str:
    name = _UNSAFE.sub("_", Path(name).name).strip("._")
    return name or "file"


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _merge(blocks: list[dict[str, Any]]) -> Any:
    merged: list[dict[str, Any]] = []
    for block in blocks:
        if block["type"] == "text":
            if not block["text"].strip():
                continue
            if merged and merged[-1]["type"] == "text":
                merged[-1] = _text(merged[-1]["text"] + "\n\n" + block["text"])
                continue
        merged.append(block)
    if len(merged) == 1 and merged[0]["type"] == "text":
        return merged[0]["text"].strip()
    return merged
