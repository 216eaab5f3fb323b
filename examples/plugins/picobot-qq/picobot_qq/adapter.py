"""QQAdapter: a recorded OneBot message event becomes input; an outbox row becomes QQ messages.

Inbound: the text (the bot's own @ left out, other @s and faces kept as words), each image
downloaded through `ports.fetch` (the network guard, size-capped) into an image block the model
sees, each file downloaded into the PicoBot home's `media/<channel>/` and named in a note. A chat is
`private:<user id>` or `group:<group id>`; the sender is the user id.

Outbound: the text in parts of at most `max_message_chars`, cut at paragraphs or lines; in a group the
first part quotes the user's message (a `reply` segment). The answer's files (`payload["media"]`,
only files inside the workspace) follow, each as its own `image` or `file` message, sent as
`base64://`. The parts already sent are noted in Redis, so a retried delivery does not send them twice;
each sent message id is kept for a while, so that a group reply to it addresses the bot.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import stat
from pathlib import Path
from typing import Any

from picobot.plugins import Capabilities, Delivery, DeliveryError, InboundMessage

from picobot_qq import intake, state
from picobot_qq.api import ApiError, HttpApi, RelayedApi
from picobot_qq.config import HTTP, QQChannel
from picobot_qq.message import Segment, id_text, parse_message, plain_text, split_text, text_segment

log = logging.getLogger("picobot_qq")

MAX_INLINE_IMAGE_BYTES = 5 * 1024 * 1024  # a larger image is saved and named, not shown to the model
MAX_MEDIA = 10
MAX_INBOUND_MEDIA = 8
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png", ".png"), (b"\xff\xd8\xff", "image/jpeg", ".jpg"),
                (b"GIF87a", "image/gif", ".gif"), (b"GIF89a", "image/gif", ".gif"))
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-\u4e00-\u9fff]+")
_CHAT = re.compile(r"^(private|group):([1-9][0-9]{0,19})$")
_UNSUPPORTED = {"record": "voice message", "video": "video", "json": "card", "xml": "card", "forward": "forwarded messages",
                "poke": "poke", "markdown": "markdown card"}


def image_type(data: bytes) -> tuple[str, str] | None:
    """(mime, suffix) of PNG, JPEG, GIF or WebP bytes; None otherwise."""
    for magic, mime, suffix in _IMAGE_MAGIC:
        if data.startswith(magic):
            return mime, suffix
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", ".webp"
    return None


class QQAdapter:
    def __init__(self, name: str, config: Any, ports: Any) -> None:
        self.name = name
        self.cfg = QQChannel.of(name, config)
        self.ports = ports
        self.settings = ports.settings("qq")
        self.capabilities = Capabilities(max_message_chars=self.settings.max_message_chars, markdown=False)

    def live(self) -> None:
        return None

    def api(self) -> Any:
        if self.cfg.mode == HTTP:
            return HttpApi(self.cfg.http_url, self.cfg.access_token, self.settings.api_timeout_secs)
        return RelayedApi(self.ports.redis, self.name, self.settings.api_timeout_secs)

    # ---- inbound -------------------------------------------------------------------------------

    def normalize(self, event: dict) -> list[InboundMessage]:
        if event.get("post_type") != "message" or not intake.wanted(self.ports.redis, self.cfg, event):
            return []
        self_id, user_id, message_id = (id_text(event.get(k)) for k in ("self_id", "user_id", "message_id"))
        group = event.get("message_type") == "group"
        segments = parse_message(event.get("message"))
        blocks = [{"type": "text", "text": plain_text(segments, self_id), "readable": True}]
        blocks += [self._media(s, message_id) for s in segments if s.type not in ("text", "at", "face", "reply")][
            :MAX_INBOUND_MEDIA]
        content = _merge(blocks)
        if not content:
            log.info("qq (%s): message %s has nothing to answer", self.name, message_id)
            return []
        chat_id = f"group:{id_text(event.get('group_id'))}" if group else f"private:{user_id}"
        return [InboundMessage(channel=self.name, chat_id=chat_id, sender_id=user_id, content=content,
                               platform_message_id=message_id,
                               metadata={"reply_to": message_id, "chat_type": "group" if group else "p2p",
                                         "self_id": self_id})]

    def _media(self, segment: Segment, message_id: str) -> dict[str, Any]:
        if segment.type == "image":
            return self._image(segment, message_id)
        if segment.type == "file":
            return self._file(segment, message_id)
        what = _UNSUPPORTED.get(segment.type, f"QQ message part {segment.type[:20]!r}")
        return {"type": "text", "text": f"[{what}: not supported here]", "readable": False}

    def _download(self, segment: Segment) -> tuple[bytes | None, str]:
        """The bytes a segment points to (`base64://…` in `file`, else its http(s) `url`), or why not."""
        limit = self.settings.max_media_bytes
        source = segment.get("file")
        if source.startswith("base64://"):
            if len(source) > limit * 4 // 3 + 16:
                return None, f"over {limit} bytes"
            try:
                return base64.b64decode(source[len("base64://"):], validate=True), ""
            except (binascii.Error, ValueError):
                return None, "not base64"
        url = segment.get("url") or (source if source.startswith(("http://", "https://")) else "")
        if not url.startswith(("http://", "https://")):
            return None, "no URL to download it from"
        try:
            data, _type = self.ports.fetch(url, max_bytes=limit)
        except Exception as exc:  # refused by the network guard, too big, not 2xx, unreachable
            log.info("qq (%s): a file was not downloaded (%s)", self.name, self.ports.redact(str(exc))[:200])
            return None, self.ports.redact(str(exc))[:120] or type(exc).__name__
        return data, ""

    def _image(self, segment: Segment, message_id: str) -> dict[str, Any]:
        data, why = self._download(segment)
        if data is None:
            return {"type": "text", "text": f"[an image that could not be downloaded: {why}]", "readable": True}
        found = image_type(data)
        if found is None or len(data) > MAX_INLINE_IMAGE_BYTES:
            path = self._save(f"{message_id}-image{found[1] if found else ''}", data)
            return {"type": "text", "text": f"[image saved to {path} ({len(data)} bytes), not shown to the model]",
                    "readable": True}
        return {"type": "image_url", "url": f"data:{found[0]};base64,{base64.b64encode(data).decode('ascii')}",
                "readable": True}

    def _file(self, segment: Segment, message_id: str) -> dict[str, Any]:
        name = (segment.get("name") or Path(segment.get("file")).name or "file")[:120]
        data, why = self._download(segment)
        if data is None:
            return {"type": "text", "text": f"[file {name} could not be downloaded: {why}]", "readable": True}
        path = self._save(f"{message_id}-{name}", data)
        return {"type": "text", "text": f"[file {name} ({len(data)} bytes) saved to {path}]", "readable": True}

    def _save(self, name: str, data: bytes) -> Path:
        folder = Path(self.ports.config.home) / "media" / self.name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / ((_UNSAFE.sub("_", Path(name).name).strip("._") or "file")[-160:])
        tmp = path.with_name(path.name + ".part")
        tmp.write_bytes(data)
        tmp.replace(path)
        return path

    # ---- outbound ------------------------------------------------------------------------------

    def deliver(self, delivery: Delivery) -> dict | None:
        payload = delivery.payload or {}
        match = _CHAT.match(delivery.chat_id or "")
        if match is None:
            raise DeliveryError(f"{delivery.chat_id[:60]!r} is not a QQ chat (private:<id> or group:<id>)",
                                permanent=True, code="chat")
        kind, target = match.groups()
        messages = [[text_segment(part)] for part in split_text(str(payload.get("text") or ""),
                                                                 self.capabilities.max_message_chars)]
        reply_to = id_text(payload.get("reply_to")) if delivery.kind != "message" else ""
        if messages and kind == "group" and reply_to:
            messages[0].insert(0, {"type": "reply", "data": {"id": reply_to}})
        messages += [m for m in (self._outbound_file(e) for e in _media_entries(payload)) if m]
        action, params = ("send_group_msg", {"group_id": int(target)}) if kind == "group" else \
            ("send_private_msg", {"user_id": int(target)})
        progress = state.key(self.name, "progress", str(delivery.id))
        r = self.ports.redis
        sent = {state.text(k): state.text(v) for k, v in (r.hgetall(progress) or {}).items()}
        api = self.api()
        for index, message in enumerate(messages):
            if str(index) in sent:
                continue  # sent by an earlier attempt
            try:
                data = api.call(action, {**params, "message": message})
            except ApiError as exc:
                raise DeliveryError(str(exc), permanent=not exc.transient,
                                    code=None if exc.retcode is None else str(exc.retcode)) from None
            message_id = id_text(data.get("message_id")) if isinstance(data, dict) else ""
            sent[str(index)] = message_id
            r.hset(progress, str(index), message_id)
            r.expire(progress, state.PROGRESS_TTL_SECS)
            state.note_sent(r, self.name, message_id, self.settings.sent_ids_ttl_secs)
        return {"message_ids": [sent[str(i)] for i in range(len(messages))]}

    def _outbound_file(self, entry: Any) -> list[dict[str, Any]] | None:
        """An answer's file as one message (an image or a file segment), or None (skipped, logged)."""
        found = _workspace_file(entry, Path(self.ports.config.workspace_path()), self.settings.max_media_bytes)
        if isinstance(found, str):
            log.warning("qq (%s): a file of an answer was skipped: %s", self.name, found)
            return None
        path, data = found
        encoded = "base64://" + base64.b64encode(data).decode("ascii")
        if image_type(data) is not None:
            return [{"type": "image", "data": {"file": encoded}}]
        name = entry.get("name") if isinstance(entry.get("name"), str) and entry.get("name") else path.name
        return [{"type": "file", "data": {"file": encoded, "name": name[:120]}}]


def _media_entries(payload: dict[str, Any]) -> list[Any]:
    found = payload.get("media")
    return list(found[:MAX_MEDIA]) if isinstance(found, list) else []


def _workspace_file(entry: Any, workspace: Path, max_bytes: int) -> tuple[Path, bytes] | str:
    """(path, bytes) of the regular file inside the workspace a media entry ({"path"}) names; else why not.
    The payload is not trusted: links are resolved before the workspace check."""
    raw = entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(raw, str) or not raw.startswith("/") or "\x00" in raw:
        return "not a file path"
    try:
        path = Path(raw).resolve(strict=True)
        if not path.is_relative_to(workspace.resolve()):
            return "outside the workspace"
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, RuntimeError, ValueError):
        return "no such file"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size > max_bytes:
            return f"larger than {max_bytes} bytes"
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    return (path, data) if len(data) <= max_bytes else f"larger than {max_bytes} bytes"


def _merge(blocks: list[dict[str, Any]]) -> Any:
    """The blocks as content: one string when only text remains (a slash command stays a command), else a
    list; nothing when no block is readable (only unsupported parts)."""
    if not any(b.get("readable") and (b["type"] != "text" or b["text"].strip()) for b in blocks):
        return None
    merged: list[dict[str, Any]] = []
    for block in ({k: v for k, v in b.items() if k != "readable"} for b in blocks):
        if block["type"] == "text":
            if not block["text"].strip():
                continue
            if merged and merged[-1]["type"] == "text":
                merged[-1] = {"type": "text", "text": merged[-1]["text"] + "\n\n" + block["text"]}
                continue
        merged.append(block)
    if len(merged) == 1 and merged[0]["type"] == "text":
        return merged[0]["text"].strip()
    return merged
