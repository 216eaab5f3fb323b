"""A recorded iLink message -> the InboundMessage PicoBot handles.

Text items become text; a voice item its server transcript (marked 🎤, as a heard voice message); an image is fetched from the CDN,
decrypted and goes to the model as a `data:` image block; a file is saved under `media_dir` and
named in a note; any other item type becomes a short "[unsupported …]" note next to the rest (a
message with nothing readable — only unknown items, empty text — is ignored: no reply to garbage). A quoted message
(`ref_msg`) is prepended as context. A text alone (a slash command too) stays plain text. The chat
is the user: replies go to `from_user_id` with the user's latest context_token.
"""

from __future__ import annotations

import base64
import logging
import re
from pathlib import Path
from typing import Any

from picobot.channels.wechat import media
from picobot.channels.wechat.config import WeChatConfig
from picobot.domain.audio import SPOKEN_MARK
from picobot.gateway.inbound import InboundMessage

log = logging.getLogger("picobot.channels.wechat")

MAX_INLINE_IMAGE_BYTES = 5 * 1024 * 1024
MAX_ITEMS = 16
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"))
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-\u4e00-\u9fff]+")
_EXT = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif"}
TEXT, IMAGE, VOICE, FILE, VIDEO = 1, 2, 3, 4, 5


def to_inbound(event: dict[str, Any], cfg: WeChatConfig, channel: str, media_dir: Path) -> list[InboundMessage]:
    msg = event.get("message")
    msg = msg if isinstance(msg, dict) else {}
    sender = msg.get("from_user_id")
    if not isinstance(sender, str) or not sender:
        return []
    items = msg.get("item_list")
    items = items if isinstance(items, list) else []
    pmid = str(msg.get("message_id") or "") or None
    reader = _Reader(cfg, media_dir, pmid or "msg")
    blocks = [b for item in items[:MAX_ITEMS] for b in reader.item(item)]
    if not any(b.get("readable") for b in blocks):
        log.info("wechat (%s): message %s has no item PicoBot can read; ignored", channel, pmid)
        return []
    blocks = [{k: v for k, v in b.items() if k != "readable"} for b in blocks]
    quote = _quote(msg.get("ref_msg"))
    if quote:
        blocks.insert(0, {"type": "text", "text": quote})
    content = _merge(blocks)
    if not content:
        log.info("wechat (%s): message %s has nothing to answer", channel, pmid)
        return []
    return [InboundMessage(channel=channel, chat_id=sender, sender_id=sender, content=content,
                           platform_message_id=pmid, metadata={"chat_type": "p2p"})]


def _merge(blocks: list[dict[str, Any]]) -> Any:
    merged: list[dict[str, Any]] = []
    for block in blocks:
        if block["type"] == "text":
            if not block["text"].strip():
                continue
            if merged and merged[-1]["type"] == "text":
                merged[-1] = {"type": "text", "text": merged[-1]["text"] + "\n\n" + block["text"]}
                continue
        merged.append(block)
    if len(merged) == 1 and merged[0]["type"] == "text":
        return merged[0]["text"].strip()  # a slash command stays plain text: the gateway handles it
    return merged


def _quote(ref: Any) -> str:
    if not isinstance(ref, dict):
        return ""
    item = ref.get("message_item")
    item = item if isinstance(item, dict) else ref
    text = item.get("text_item", {}).get("text") if isinstance(item.get("text_item"), dict) else ref.get("title")
    if not isinstance(text, str) or not text.strip():
        return ""
    return "Replying to:\n" + "\n".join(f"> {line}" for line in text[:500].splitlines())


class _Reader:
    def __init__(self, cfg: WeChatConfig, media_dir: Path, message_id: str):
        self.cfg, self.media_dir, self.message_id = cfg, media_dir, message_id

    def item(self, item: Any) -> list[dict[str, Any]]:
        if not isinstance(item, dict):
            return []
        kind = item.get("type")
        kind = None if isinstance(kind, bool) else kind  # true == 1 in Python: not a text item
        if kind == TEXT and isinstance(item.get("text_item"), dict) and isinstance(item["text_item"].get("text"), str):
            return [_text(item["text_item"]["text"])]
        if kind == VOICE and isinstance(item.get("voice_item"), dict):
            said = item["voice_item"].get("text")
            if isinstance(said, str) and said.strip():  # WeChat's own transcript: shown like PicoBot's own
                return [_text(SPOKEN_MARK + said.strip())]
            # the audio is SILK, which speech-to-text servers do not take: nothing to hear without a transcript
            return [_text(f"{SPOKEN_MARK}[voice message without a transcript from WeChat; it cannot be heard here]")]
        if kind == IMAGE and isinstance(item.get("image_item"), dict):
            return [self.image(item["image_item"])]
        if kind == FILE and isinstance(item.get("file_item"), dict):
            return [self.file(item["file_item"])]
        label = kind if isinstance(kind, int) and not isinstance(kind, bool) else "unknown"
        return [{"type": "text", "text": f"[unsupported WeChat item type {label}]"}]  # not readable by itself

    def _fetch(self, ref: Any, hex_key: Any = None) -> tuple[bytes | None, str]:
        try:
            return media.download(ref, self.cfg.cdn_base_url, self.cfg.max_download_bytes, hex_key), ""
        except media.MediaError as exc:
            log.info("wechat: media of message %s not fetched (%s)", self.message_id, exc)
            return None, str(exc)

    def image(self, image: dict[str, Any]) -> dict[str, Any]:
        data, why = self._fetch(image.get("media"), image.get("aeskey"))
        if data is None:
            return _text(f"[image could not be downloaded: {why}]")
        mime = next((m for magic, m in _IMAGE_MAGIC if data.startswith(magic)), None)
        path = self._save("image" + _EXT.get(mime or "", ""), data)
        if mime is None or len(data) > MAX_INLINE_IMAGE_BYTES:
            return _text(f"[image saved to {path} ({len(data)} bytes), not shown to the model]")
        return {"type": "image_url", "url": f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}",
                "readable": True}

    def file(self, file: dict[str, Any]) -> dict[str, Any]:
        name = file.get("file_name")
        name = name if isinstance(name, str) and name else "file"
        data, why = self._fetch(file.get("media"))
        if data is None:
            return _text(f"[file {name[:120]} could not be downloaded: {why}]")
        path = self._save(name, data)
        return _text(f"[file {name[:120]} ({len(data)} bytes) saved to {path}]")

    def _save(self, name: str, data: bytes) -> Path:
        self.media_dir.mkdir(parents=True, exist_ok=True)
        safe = _UNSAFE.sub("_", Path(name).name).strip("._") or "file"
        path = self.media_dir / f"{_UNSAFE.sub('_', self.message_id)[:80]}-{safe[-120:]}"
        tmp = path.with_name(path.name + ".part")
        tmp.write_bytes(data)
        tmp.replace(path)
        return path


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "readable": bool(text.strip())}
