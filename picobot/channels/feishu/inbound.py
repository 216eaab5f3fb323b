"""A stored `im.message.receive_v1` event -> the InboundMessage(s) PicoBot handles.

p2p messages always count; group messages per `group_policy` ("mention": only when the bot's
open_id is among the mentions). Text and posts become Markdown text with mentions resolved
and the bot's own @ removed; images are downloaded to `media_dir` and go to the model as
`data:` image blocks; a voice message (`audio`) becomes an `audio` block, heard by the worker before
the turn (docs/VOICE.md); files are saved there and named in a text note; other types become a
short "[unsupported message type X]" note. A reply gets the quoted parent message prepended
(up to `reply_context_max_chars`); slash commands pass through as plain text for the
gateway. Malformed events are ignored with one log line; a resource Feishu refuses (gone, too
large) becomes a note, while a transient API failure (down, 429) raises FeishuError so the event
inbox processes the event again later (docs/CHANNELS.md).
"""

from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path
from typing import Any

from picobot.channels.feishu.config import FeishuConfig
from picobot.channels.feishu.richtext import Mentions, post_markdown, text_markdown
from picobot.domain.audio import audio_block
from picobot.gateway.commands import is_command
from picobot.gateway.inbound import InboundMessage

log = logging.getLogger(__name__)

MAX_INLINE_IMAGE_BYTES = 5 * 1024 * 1024  # gateway.max_image_bytes' default; larger images become file notes
MAX_IMAGES = 8
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
                (b"GIF89a", "image/gif"))
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._\-\u4e00-\u9fff]+")


def to_inbound(event: dict[str, Any], cfg: FeishuConfig, api: Any, bot_open_id: str | None, media_dir: Path,
               channel: str = "feishu") -> list[InboundMessage]:
    """The inputs of one event ([] = ignore it; the reason is logged)."""
    body = event.get("event")
    body = body if isinstance(body, dict) else {}
    header = event.get("header")
    header = header if isinstance(header, dict) else {}
    if header.get("event_type") == "card.action.trigger":
        return _card_action(header, body, channel)
    message = body.get("message")
    message = message if isinstance(message, dict) else {}
    message_id, chat_id = message.get("message_id"), message.get("chat_id")
    sender = body.get("sender")
    sender = sender if isinstance(sender, dict) else {}
    ids = sender.get("sender_id")
    ids = ids if isinstance(ids, dict) else {}
    open_id = ids.get("open_id")
    if not (isinstance(message_id, str) and message_id and isinstance(chat_id, str) and chat_id
            and isinstance(open_id, str) and open_id):
        log.info("feishu (%s): ignored an event without message_id, chat_id or sender open_id", channel)
        return []
    if sender.get("sender_type") == "app":
        return []  # a bot's own message
    chat_type = message.get("chat_type") if message.get("chat_type") == "p2p" else "group"
    mentions = Mentions(message.get("mentions"), bot_open_id)
    if chat_type == "group" and not _group_allows(cfg.group_policy, mentions):
        log.debug("feishu (%s): group message %s not for the bot (group_policy %s)", channel, message_id,
                  cfg.group_policy)
        return []
    try:
        content = json.loads(message.get("content") or "")
        if not isinstance(content, dict):
            raise ValueError("not an object")
    except (TypeError, ValueError, RecursionError):
        log.info("feishu (%s): ignored message %s: its content is not a JSON object", channel, message_id)
        return []
    reader = _Reader(cfg, api, Path(media_dir), message_id, mentions)
    blocks = reader.blocks(str(message.get("message_type") or ""), content)
    text = "".join(b["text"] for b in blocks if b["type"] == "text").strip()
    if text and is_command(text) and len(blocks) == 1:
        payload: Any = text  # the gateway handles it, exactly as on the web
    else:
        payload = _with_context(blocks, reader.reply_context(message.get("parent_id")))
    if not payload:
        log.info("feishu (%s): ignored message %s: nothing in it to answer", channel, message_id)
        return []
    return [InboundMessage(channel=channel, chat_id=chat_id, sender_id=open_id, content=payload,
                           platform_message_id=message_id,
                           metadata={"reply_to": message_id, "chat_type": chat_type})]


def _dict(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """parent[key] when it is an object, else {} (a hostile event may carry anything there)."""
    found = parent.get(key)
    return found if isinstance(found, dict) else {}


def _card_action(header: dict[str, Any], body: dict[str, Any], channel: str) -> list[InboundMessage]:
    """A button pressed on one of the bot's cards: its command as the presser's input in that chat."""
    operator, context, action = (_dict(body, "operator"), _dict(body, "context"), _dict(body, "action"))
    value = _dict(action, "value")
    command, open_id, chat_id = value.get("command"), operator.get("open_id"), context.get("open_chat_id")
    if not (isinstance(command, str) and is_command(command) and isinstance(open_id, str) and open_id
            and isinstance(chat_id, str) and chat_id):
        log.info("feishu (%s): ignored a card action without a command, operator or chat", channel)
        return []
    message_id = context.get("open_message_id") if isinstance(context.get("open_message_id"), str) else None
    return [InboundMessage(channel=channel, chat_id=chat_id, sender_id=open_id, content=command,
                           platform_message_id=f"card_{header.get('event_id')}",
                           metadata={"reply_to": message_id})]


def _group_allows(policy: str, mentions: Mentions) -> bool:
    if policy == "all":
        return True
    return policy == "mention" and mentions.bot_mentioned


def _with_context(blocks: list[dict[str, Any]], context: str) -> Any:
    if context:
        blocks = [{"type": "text", "text": context}, *blocks]
    merged: list[dict[str, Any]] = []
    for block in blocks:  # neighbouring text blocks become one
        if block["type"] == "text" and merged and merged[-1]["type"] == "text":
            merged[-1] = {"type": "text", "text": merged[-1]["text"] + "\n\n" + block["text"]}
        elif block["type"] != "text" or block["text"].strip():
            merged.append(block)
    if len(merged) == 1 and merged[0]["type"] == "text":
        return merged[0]["text"].strip()
    return merged


class _Reader:
    """Content of one message to blocks, downloading what it references."""

    def __init__(self, cfg: FeishuConfig, api: Any, media_dir: Path, message_id: str, mentions: Mentions):
        self.cfg, self.api, self.media_dir, self.message_id, self.mentions = cfg, api, media_dir, message_id, mentions

    def blocks(self, msg_type: str, content: dict[str, Any]) -> list[dict[str, Any]]:
        if msg_type == "text":
            return [_text(text_markdown(content, self.mentions))]
        if msg_type == "post":
            markdown, keys = post_markdown(content, self.mentions)
            return [_text(markdown), *(self.image(k) for k in keys[:MAX_IMAGES])]
        if msg_type == "image" and isinstance(content.get("image_key"), str):
            return [self.image(content["image_key"])]
        if msg_type == "audio" and isinstance(content.get("file_key"), str):
            return [self.audio(content["file_key"])]
        if msg_type in ("file", "media") and isinstance(content.get("file_key"), str):
            return [self.file(content["file_key"], content.get("file_name"))]
        return [_text(f"[unsupported message type {msg_type[:40] or 'unknown'}]")]

    def image(self, image_key: str) -> dict[str, Any]:
        data, ctype = self._download(image_key, "image")
        if data is None:
            return _text(f"[image {image_key[:80]} could not be downloaded: {ctype}]")
        mime = _image_mime(data, ctype)
        path = self._save(f"{image_key}{_EXT.get(mime or '', '')}", data)
        if mime is None or len(data) > MAX_INLINE_IMAGE_BYTES:
            return _text(f"[image saved to {path} ({len(data)} bytes), not shown to the model]")
        return {"type": "image_url", "url": f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"}

    def audio(self, file_key: str) -> dict[str, Any]:
        """A voice message (Feishu records Ogg Opus) as an `audio` block, heard by the worker before the turn."""
        data, ctype = self._download(file_key, "file")
        if data is None:
            return _text(f"[a voice message that could not be downloaded: {ctype}]")
        mime = (ctype or "").split(";")[0].strip().lower()
        if not re.fullmatch(r"audio/[a-z0-9.+-]{1,64}", mime):
            mime = "audio/ogg"
        return audio_block(mime, data)

    def file(self, file_key: str, name: Any) -> dict[str, Any]:
        data, ctype = self._download(file_key, "file")
        label = name if isinstance(name, str) and name else file_key
        if data is None:
            return _text(f"[file {label[:120]} could not be downloaded: {ctype}]")
        path = self._save(label, data)
        return _text(f"[file {label[:120]} ({len(data)} bytes) saved to {path}]")

    def _download(self, key: str, kind: str) -> tuple[bytes | None, str | None]:
        try:
            return self.api.download_resource(self.message_id, key, kind, self.cfg.max_download_bytes)
        except Exception as exc:
            _raise_if_transient(exc)  # Feishu down or rate limited: the event is processed again later
            log.info("feishu: %s of message %s not downloaded (%s)", kind, self.message_id, type(exc).__name__)
            reason = "too large" if "larger than" in str(exc) else "Feishu refused it"
            return None, reason

    def _save(self, name: str, data: bytes) -> Path:
        self.media_dir.mkdir(parents=True, exist_ok=True)
        path = self.media_dir / f"{_safe(self.message_id)[:80]}-{_safe(name)[-120:]}"
        tmp = path.with_name(path.name + ".part")
        tmp.write_bytes(data)
        tmp.replace(path)
        return path

    def reply_context(self, parent_id: Any) -> str:
        limit = self.cfg.reply_context_max_chars
        if not (isinstance(parent_id, str) and parent_id and limit):
            return ""
        try:
            parent = self.api.get_message(parent_id)
        except Exception as exc:
            _raise_if_transient(exc)
            log.info("feishu: parent of message %s not fetched (%s)", self.message_id, type(exc).__name__)
            return ""
        text = _parent_text(parent, self.mentions) if isinstance(parent, dict) else ""
        if not text:
            return ""
        if len(text) > limit:
            text = text[:limit].rstrip() + "…"
        return "Replying to:\n" + "\n".join(f"> {line}" for line in text.splitlines())


def _raise_if_transient(exc: Exception) -> None:
    # FeishuError says whether retrying can help (5xx, 429, timeouts); anything else becomes a note.
    if getattr(exc, "permanent", True) is False:
        raise exc


def _parent_text(parent: dict[str, Any], mentions: Mentions) -> str:
    # GET /im/v1/messages/{id} items: {"msg_type", "body": {"content": "<json>"}, "mentions": [...]}
    body = parent.get("body")
    body = body if isinstance(body, dict) else {}
    msg_type = parent.get("msg_type") or parent.get("message_type")
    try:
        content = json.loads(body.get("content") or parent.get("content") or "")
    except (TypeError, ValueError, RecursionError):
        return ""
    if not isinstance(content, dict):
        return ""
    names = Mentions(parent.get("mentions"), None)
    if msg_type == "text":
        return text_markdown(content, names)
    if msg_type == "post":
        return post_markdown(content, names)[0]
    return f"[{msg_type if isinstance(msg_type, str) else 'message'}]"


_EXT = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}


def _image_mime(data: bytes, ctype: str | None) -> str | None:
    for magic, mime in _IMAGE_MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return ctype if ctype in _EXT else None


def _safe(name: str) -> str:
    name = _UNSAFE_NAME.sub("_", Path(name).name).strip("._")
    return name or "file"


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}
