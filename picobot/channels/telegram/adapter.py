"""TelegramAdapter: delivers outbox rows to Telegram and normalises stored updates.

Markdown becomes Telegram HTML (markup.py), cut into parts of at most 4096 UTF-16 units with their
tags balanced (split.py); plain rows (notices) go without parse_mode. The first part replies to the
user's message (`reply_parameters`, sent even when that message is gone). A part Telegram cannot
parse ("can't parse entities") is sent again as its plain text. Telegram has no idempotency key, so
each part sent is noted on the outbox row (`result.sent`: part index -> message id) right after
Telegram accepts it: a retried delivery skips those parts. A part is shown twice only if the worker
dies between Telegram's answer and that note (docs/CHANNELS.md). With `live_updates` the turn's live
message (live.py) is edited into the answer's first part instead of sending a new one. The answer's
images (`payload["media"]`, e.g. a browser screenshot) follow the text as photos (sendPhoto), noted on
the row the same way (`result.media`); one that cannot be sent is skipped with a log line.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from picobot.channels.base import Capabilities, Delivery, DeliveryError, LiveHooks
from picobot.channels.outbound import media_entries, read_image
from picobot.channels.telegram import keys
from picobot.channels.telegram.api import TelegramApi, TelegramError
from picobot.channels.telegram.config import TelegramConfig
from picobot.channels.telegram.inbound import message_id_of
from picobot.channels.telegram.markup import to_html
from picobot.channels.telegram.split import MAX_UNITS, split_html, split_plain, visible
from picobot.coord import Lease
from picobot.storage import outbox

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts
    from picobot.gateway.inbound import InboundMessage

log = logging.getLogger("picobot.channels.telegram")

LIVE_WAIT_SECS = 5.0  # how long deliver() waits for a live message being sent, and for its lock
LIVE_LOCK_SECS = 10.0  # the answer's hold on the live message's lock, should it die holding it
MAX_PHOTO_BYTES = 10 * 1024 * 1024  # Telegram's limit for a photo sent by upload


def _decode(raw: Any) -> str | None:
    return raw.decode() if isinstance(raw, bytes) else raw


class TelegramAdapter:
    def __init__(self, name: str, config: Any, rt: ChannelPorts):
        self.name = name
        self.cfg = config if isinstance(config, TelegramConfig) else TelegramConfig.from_channel(config)
        self.rt = rt
        self.api = TelegramApi(self.cfg.token, self.cfg.base_url, redis=rt.redis)
        self.capabilities = Capabilities(max_message_chars=MAX_UNITS, edits=True,
                                         reactions=bool(self.cfg.reaction_emoji), markdown=True, live=True)
        self._live: LiveHooks | None = None

    def live(self) -> LiveHooks | None:
        if self._live is None:
            from picobot.channels.telegram.live import TelegramLive

            self._live = TelegramLive(self)
        return self._live

    # ---- inbound -----------------------------------------------------------------------------

    def normalize(self, event: dict) -> list[InboundMessage]:
        from picobot.channels.telegram.inbound import Reader

        media = self.cfg.media_path(self.rt.config.home, self.name)
        return Reader(self.cfg, self.api, media, self.name).to_inbound(event)

    # ---- outbound ----------------------------------------------------------------------------

    def deliver(self, delivery: Delivery) -> dict | None:
        try:
            return self._deliver(delivery)
        except TelegramError as exc:
            raise DeliveryError(str(exc), permanent=exc.permanent, retry_after=exc.retry_after,
                                code=None if exc.code is None else str(exc.code)) from None

    def _deliver(self, d: Delivery) -> dict[str, Any]:
        payload = d.payload or {}
        text = str(payload.get("text") or "")
        plain = d.kind == "notice" or payload.get("format") == "plain"
        parts = split_plain(text) if plain else split_html(to_html(text))
        with self.rt.db.connect() as conn:
            progress = outbox.progress_of(conn, d.id)
        sent: dict[str, int] = dict(progress.get("sent") or {})
        chat_id = str(progress.get("chat_id") or d.chat_id)  # a group that became a supergroup moved
        reply_to = message_id_of(payload.get("reply_to")) if d.kind != "message" else None
        turn_id = payload.get("turn_id")
        if parts and "0" not in sent and d.kind == "reply" and self.cfg.live_updates and turn_id:
            live_id = self._finish_live(chat_id, str(turn_id), parts[0])
            if live_id is not None:
                sent["0"] = live_id
                self._note(d, sent, chat_id, progress.get("media"))
        buttons = payload.get("buttons") if isinstance(payload.get("buttons"), list) else None
        for index, part in enumerate(parts):
            if str(index) in sent:
                continue  # sent by an earlier attempt
            last = buttons if index == len(parts) - 1 else None  # slash-command buttons under the last part
            message_id, chat_id = self._send(chat_id, part, html=not plain, reply_to=reply_to if index == 0 else None,
                                             buttons=last)
            sent[str(index)] = message_id
            self._note(d, sent, chat_id, progress.get("media"))
        media = self._photos(d, sent, chat_id, dict(progress.get("media") or {}))
        result: dict[str, Any] = {"message_ids": [sent[str(i)] for i in range(len(parts))], "sent": sent,
                                  "chat_id": chat_id}
        if media:
            result["media"] = media
        return result

    def _photos(self, d: Delivery, sent: dict[str, int], chat_id: str, media: dict[str, Any]) -> dict[str, Any]:
        """The answer's images as photos after its text; each noted (message id, or why skipped) once handled."""
        for index, entry in enumerate(media_entries(d.payload)):
            if str(index) in media:
                continue  # sent (or skipped) by an earlier attempt
            image = read_image(entry, self.rt.config.workspace_path(), MAX_PHOTO_BYTES)
            if isinstance(image, str):
                log.warning("telegram (%s): image %d of delivery %d skipped: %s", self.name, index, d.id, image)
                media[str(index)] = {"skipped": image}
            else:
                try:
                    media[str(index)] = self.api.send_photo(chat_id, image.data, filename=image.name, mime=image.mime)
                except TelegramError as exc:
                    if not exc.permanent:
                        raise  # the lane retries; the text and the photos noted are not sent again
                    log.warning("telegram (%s): image %d of delivery %d refused: %s", self.name, index, d.id,
                                exc.description[:200] or exc.code)
                    media[str(index)] = {"skipped": f"refused ({exc.code})"}
            self._note(d, sent, chat_id, media)
        return media

    def deliver_voice(self, delivery: Delivery, clip: Any) -> dict | None:
        """A spoken answer: a voice note when the clip is Ogg Opus, else an audio file (no converter here)."""
        payload = delivery.payload or {}
        voice_note = clip.format == "opus"
        try:
            message_id = self.api.send_voice(delivery.chat_id, clip.data, voice_note=voice_note, mime=clip.mime,
                                             filename="answer.ogg" if voice_note else f"answer.{clip.format or 'mp3'}",
                                             reply_to=message_id_of(payload.get("reply_to")))
        except TelegramError as exc:
            raise DeliveryError(str(exc), permanent=exc.permanent, retry_after=exc.retry_after,
                                code=None if exc.code is None else str(exc.code)) from None
        return {"message_ids": [message_id], "voice_note": voice_note, "bytes": len(clip.data)}

    def _note(self, d: Delivery, sent: dict[str, int], chat_id: str, media: Any = None) -> None:
        progress: dict[str, Any] = {"sent": sent, "chat_id": chat_id}
        if media:
            progress["media"] = media
        with self.rt.db.begin() as conn:
            outbox.note_progress(conn, d.id, progress)

    def _send(self, chat_id: str, part: str, *, html: bool, reply_to: int | None,
              buttons: list[list[str]] | None = None) -> tuple[int, str]:
        """(message id, chat id) of one part; a part Telegram cannot parse goes again as plain text."""
        try:
            return self.api.send_message(chat_id, part, html=html, reply_to=reply_to, buttons=buttons), chat_id
        except TelegramError as exc:
            if exc.migrate_to_chat_id is not None:
                log.info("telegram (%s): chat %s is now %s; sending there", self.name, chat_id, exc.migrate_to_chat_id)
                return self._send(str(exc.migrate_to_chat_id), part, html=html, reply_to=None, buttons=buttons)
            if not (html and exc.says("can't parse entities")):
                raise
            log.warning("telegram (%s): a part did not parse as HTML (%s); sent as plain text", self.name,
                        exc.description[:200])
        return self.api.send_message(chat_id, visible(part), html=False, reply_to=reply_to, buttons=buttons), chat_id

    # ---- the turn's live message -------------------------------------------------------------

    def _live_record(self, turn_id: str) -> dict | None:
        """The turn's live message, waiting briefly for one being sent; None = there is none (and none will be)."""
        key, r = keys.live(turn_id), self.rt.redis
        if r.set(key, "none", nx=True, ex=3600):
            return None
        deadline = time.monotonic() + LIVE_WAIT_SECS
        raw = _decode(r.get(key))
        while raw == "pending" and time.monotonic() < deadline:
            time.sleep(0.05)
            raw = _decode(r.get(key))
        try:
            record = json.loads(raw) if raw and raw not in ("none", "pending") else None
        except ValueError:
            return None
        return record if isinstance(record, dict) and isinstance(record.get("message_id"), int) else None

    def _finish_live(self, chat_id: str, turn_id: str, part: str) -> int | None:
        """Edit the live message into the answer's first part; its id, or None to send a new message."""
        record = self._live_record(turn_id)
        if record is None:
            return None
        r = self.rt.redis
        r.set(keys.live(turn_id), json.dumps({**record, "final": True}), ex=3600)  # live.py stops here
        # live.py holds the lock during one edit; past the wait the answer is edited in anyway
        lock = Lease(r, keys.live_lock(turn_id), LIVE_LOCK_SECS)
        lock.acquire_within(LIVE_WAIT_SECS)
        try:
            self.api.edit_message_text(chat_id, record["message_id"], part, html=True)
        except TelegramError as exc:
            if exc.says("can't parse entities"):
                self.api.edit_message_text(chat_id, record["message_id"], visible(part), html=False)
            elif exc.permanent:  # gone (deleted by the user, too old): the answer goes as a new message
                log.info("telegram (%s): live message of turn %s not editable (%s)", self.name, turn_id, exc.code)
                return None
            else:
                raise
        finally:
            lock.release()  # only if ours: when the wait ran out, the holder's lock stays
        return int(record["message_id"])
