"""Record deliveries to external channels in the producer's transaction; the payload shapes.

A turn's answer (`record_turn`) is written inside the turn's commit transaction, so a committed
turn always has its delivery and a fenced-out one never does. After the commit the caller
wakes the lane (`wake`); if that is lost, the sweeper finds the pending row.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from picobot.storage import outbox
from picobot.storage.models import InboundRow

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger("picobot.channels")

MAX_KEY_CHARS = 50  # Feishu's uuid (dedupe key) takes at most 50 characters
MAX_HEARD_CHARS = 1000
KINDS = ("reply", "notice", "message", "command", "voice")
_i = InboundRow.__table__


def delivery_key(raw: str) -> str:
    """A deterministic idempotency key of at most 50 characters (sha1-based when `raw` is longer)."""
    if len(raw) <= MAX_KEY_CHARS:
        return raw
    return "h:" + hashlib.sha1(raw.encode("utf-8", "surrogatepass")).hexdigest()


def payload(text: str, fmt: str = "markdown", reply_to: str | None = None, turn_id: str | None = None,
            session_id: str | None = None, buttons: Any = ()) -> dict[str, Any]:
    body: dict[str, Any] = {"text": text, "format": fmt, "reply_to": reply_to, "turn_id": turn_id, "session_id": session_id}
    shown = command_buttons(buttons)
    if shown:
        body["buttons"] = shown
    return body


MAX_BUTTONS = 6
MAX_BUTTON_LABEL = 40
MAX_BUTTON_COMMAND_BYTES = 64  # Telegram's callback_data limit


def command_buttons(buttons: Any) -> list[list[str]]:
    """[[label, command], …] of the well-formed (label, slash command) pairs, at most MAX_BUTTONS."""
    found: list[list[str]] = []
    for item in list(buttons or ())[:MAX_BUTTONS]:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            continue
        label, command = item[0][:MAX_BUTTON_LABEL], item[1]
        if label and command.startswith("/") and len(command.encode("utf-8", "replace")) <= MAX_BUTTON_COMMAND_BYTES:
            found.append([label, command])
    return found


def reply_to_of(conn: Connection, turn_id: str) -> str | None:
    """The platform message id of the turn's last claimed input that came from the platform.

    Internal inputs carry ids with a prefix (`job:…`); platform ids (Feishu `om_…`) have no colon.
    """
    q = (select(_i.c.platform_message_id).where(_i.c.turn_id == turn_id, _i.c.platform_message_id.is_not(None))
         .order_by(_i.c.seq.desc()))
    for pmid in conn.execute(q).scalars():
        if pmid and ":" not in pmid:
            return pmid
    return None


def turn_text(status: str, final_text: str, error: str | None) -> tuple[str, str, str] | None:
    """(kind, text, format) of a finished turn's delivery; None when there is nothing to say."""
    if status == "completed":
        text = (final_text or "").strip()
        return ("reply", text, "markdown") if text else None
    if status == "cancelled":
        partial = (final_text or "").strip()
        return "notice", f"{partial}\n\n(stopped)" if partial else "(stopped)", "plain"
    return "notice", f"⚠ {error or 'The turn failed.'}", "plain"


def answer_media(turn: Any) -> list[dict[str, str]]:
    """The files attached to a completed turn's answer (a tool's images, e.g. a browser screenshot), as
    `payload["media"]` entries: [{"path"}]. Channels that send files (WeChat) send them after the text."""
    if turn.status != "completed":
        return []
    answer = next((m for m in reversed(turn.messages) if m.role == "assistant" and not m.tool_calls), None)
    if answer is None or isinstance(answer.content, str):
        return []
    return [{"path": b["path"]} for b in answer.content
            if b.get("type") == "image_url" and isinstance(b.get("path"), str) and b["path"].startswith("/")]


MAX_MEDIA = 10  # images of one answer a channel sends, at most
_IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png", "png"), (b"\xff\xd8\xff", "image/jpeg", "jpg"),
                (b"GIF87a", "image/gif", "gif"), (b"GIF89a", "image/gif", "gif"))


@dataclass(frozen=True)
class AnswerImage:
    """One image of an answer, read and checked, ready to upload."""

    name: str  # the file name to upload as (its stem and the type found in its bytes)
    data: bytes
    mime: str


def media_entries(payload: Any) -> list[Any]:
    """The delivery's `payload["media"]` entries (at most MAX_MEDIA), unchecked: see `read_image`."""
    found = payload.get("media") if isinstance(payload, dict) else None
    return list(found[:MAX_MEDIA]) if isinstance(found, list) else []


def image_type(data: bytes) -> tuple[str, str] | None:
    """(mime, extension) of PNG, JPEG, GIF or WebP bytes; None for anything else."""
    for magic, mime, ext in _IMAGE_MAGIC:
        if data.startswith(magic):
            return mime, ext
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", "webp"
    return None


def workspace_file(entry: Any, workspace: Path) -> Path | str:
    """The existing file a media entry ({"path"}) names, resolved, when it lies inside the workspace; else why not."""
    raw = entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(raw, str) or not raw.startswith("/") or "\x00" in raw:
        return "not a file path"
    try:
        root = workspace.resolve()
        path = Path(raw).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        return "no such file"
    if not path.is_relative_to(root):
        return "outside the workspace"
    return path


def read_image(entry: Any, workspace: Path, max_bytes: int) -> AnswerImage | str:
    """A media entry ({"path"}) as an image to send, or why it is skipped.

    The payload is not trusted: only a regular file inside the workspace (after resolving links), of at
    most `max_bytes`, whose bytes are a PNG, JPEG, GIF or WebP image is read.
    """
    path = workspace_file(entry, workspace)
    if isinstance(path, str):
        return path
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except (OSError, ValueError) as exc:
        return f"unreadable ({getattr(exc, 'strerror', None) or type(exc).__name__})"
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
    except OSError as exc:
        return f"unreadable ({exc.strerror or type(exc).__name__})"
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        return f"larger than {max_bytes} bytes"
    found = image_type(data)
    if found is None:
        return "not a PNG, JPEG, GIF or WebP image"
    return AnswerImage(f"{path.stem[:60] or 'image'}.{found[1]}", data, found[0])


def record_turn(conn: Connection, rt: "ChannelPorts", channel: str, chat_id: str, session_id: str, turn_id: str,
                status: str, final_text: str, error: str | None, reply_to: str | None = None,
                media: list[dict[str, str]] | None = None) -> bool:
    """Record a finished turn's answer for an external channel (in the caller's transaction).

    `final_text` is the answer (completed) or the partial text (cancelled). `reply_to` None: looked
    up from the turn's inputs. False when the channel is not external or there is nothing to send.
    """
    if not rt.channels.external(channel):
        return False
    shaped = turn_text(status, final_text, error)
    if shaped is None:
        return False
    kind, text, fmt = shaped
    if reply_to is None:
        reply_to = reply_to_of(conn, turn_id)
    # one delivery per turn: a committed turn (reply/notice) or one given up on (notice), never both
    body = payload(text, fmt, reply_to, turn_id, session_id)
    if media and kind == "reply":
        body["media"] = media
    return outbox.add(conn, channel, chat_id, body,
                      delivery_key(f"t:{turn_id}"), session_id=session_id, turn_id=turn_id, kind=kind)


def record_heard(conn: Connection, rt: "ChannelPorts", channel: str, chat_id: str, session_id: str, turn_id: str,
                 transcript: str) -> bool:
    """What was heard of a user's voice message (`🎤 "…"`), delivered right before the answer."""
    if not rt.channels.external(channel) or not transcript.strip():
        return False
    if len(transcript) > MAX_HEARD_CHARS:
        transcript = transcript[:MAX_HEARD_CHARS].rstrip() + "…"
    return outbox.add(conn, channel, chat_id, payload(f"🎤 “{transcript}”", "plain", reply_to_of(conn, turn_id),
                                                      turn_id, session_id),
                      delivery_key(f"h:{turn_id}"), session_id=session_id, turn_id=turn_id, kind="notice")


def record_voice(conn: Connection, rt: "ChannelPorts", channel: str, chat_id: str, session_id: str, turn_id: str,
                 text: str) -> bool:
    """The spoken copy of a turn's answer to a user who spoke (in the turn's transaction), after its text.

    Made into speech only when it is delivered (the `picobot_speech` hook); without speech configured,
    or on a channel that sends no voice, the row is done with nothing sent.
    """
    if not rt.channels.external(channel) or not text.strip():
        return False
    reply_to = reply_to_of(conn, turn_id)
    return outbox.add(conn, channel, chat_id, payload(text, "plain", reply_to, turn_id, session_id),
                      delivery_key(f"v:{turn_id}"), session_id=session_id, turn_id=turn_id, kind="voice")


def record_message(conn: "Connection | ChannelPorts", channel: str, chat_id: str, text: str, kind: str = "message",
                   key: str | None = None, session_id: str | None = None, reply_to: str | None = None,
                   fmt: str | None = None, buttons: Any = ()) -> bool:
    """Record one message to a chat (send_session_message, scheduler, command answers). False if a duplicate.

    Given a Connection it writes in the caller's transaction (the caller wakes the lane after its
    commit); given the ChannelPorts it commits on its own and wakes the lane itself.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown delivery kind {kind!r}")
    if not isinstance(conn, Connection):
        rt = conn
        if not rt.channels.external(channel):
            raise ValueError(f"channel {channel!r} is not a configured, enabled external channel")
        with rt.db.begin() as tx:
            created = record_message(tx, channel, chat_id, text, kind, key, session_id, reply_to, fmt, buttons)
        wake(rt, channel, chat_id)
        return created
    fmt = fmt or ("plain" if kind == "notice" else "markdown")
    key = delivery_key(key or f"m:{uuid.uuid4().hex}")
    return outbox.add(conn, channel, chat_id, payload(text, fmt, reply_to, None, session_id, buttons), key,
                      session_id=session_id, kind=kind)


def wake(rt: "ChannelPorts", channel: str, chat_id: str) -> None:
    """After the commit: start the lane's delivery. A lost wake-up is the sweeper's to repair."""
    try:
        rt.queue.enqueue_delivery(channel, chat_id)
    except Exception as exc:  # recorded in SQL: the sweeper re-enqueues due lanes
        log.warning("delivery lane %s:%s not enqueued (%s); the sweeper will", channel, chat_id,
                    type(exc).__name__)
