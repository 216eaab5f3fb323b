"""FeishuAdapter: delivers outbox rows to Feishu (cards, text, replies) and normalises Feishu events.

A final answer goes as Markdown cards replying to the user's message, split by cards.py; each part
carries a Feishu ``uuid`` derived from the delivery's idempotency key, so a retried delivery never shows
twice. When the parent message is gone the part is sent to the chat instead. With ``live_updates`` the
streaming card of the turn (see live.py) is finalised with the answer instead of a second message.
The answer's images (`payload["media"]`, e.g. a browser screenshot) follow the text: each uploaded
(im/v1/images) and sent as an image message with its own uuid; each one handled is noted on the row
(`result.media`), so a retry neither uploads nor sends it again. One that cannot be sent is skipped
with a log line.
Feishu errors become ``DeliveryError`` (permanent or transient with retry_after).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from picobot.channels.base import Capabilities, Delivery, DeliveryError, LiveHooks
from picobot.channels.feishu import cards, keys
from picobot.channels.feishu.api import FeishuApi, FeishuError
from picobot.channels.feishu.config import FeishuConfig
from picobot.channels.outbound import media_entries, read_image
from picobot.coord import Lease
from picobot.storage import outbox

if TYPE_CHECKING:
    from picobot.gateway.inbound import InboundMessage
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger("picobot.channels.feishu")

PARENT_GONE = frozenset({230011, 231003})
CARD_WAIT_SECS = 5.0  # how long deliver() waits for a streaming card still being created, and for its lock
CARD_LOCK_SECS = 10.0  # the final update's hold on the card's lock, should it die holding it
MAX_IMAGE_BYTES = 10 * 1024 * 1024  # Feishu's limit for an uploaded message image


card_key = keys.card  # Redis: "pending" while the turn's card is created, then {card_id, message_id}
card_lock_key = keys.card_lock
card_seq_key = keys.card_seq


def part_uuid(key: str, index: int) -> str:
    """Feishu's uuid (≤ 50 chars) for part `index` of a delivery."""
    uuid = key if index == 0 else f"{key}-{index}"
    return uuid if len(uuid) <= 50 else hashlib.sha1(uuid.encode()).hexdigest()


def _decode(raw: Any) -> str | None:
    return raw.decode() if isinstance(raw, bytes) else raw


class FeishuAdapter:
    def __init__(self, name: str, config: Any, rt: ChannelPorts):
        self.name = name
        self.cfg = config if isinstance(config, FeishuConfig) else FeishuConfig.from_channel(config)
        self.rt = rt
        self.api = FeishuApi(self.cfg.app_id, self.cfg.app_secret, self.cfg.domain, redis=rt.redis)
        self.capabilities = Capabilities(max_message_chars=self.cfg.max_message_chars, edits=True,
                                         reactions=bool(self.cfg.reaction_emoji), markdown=True,
                                         live=self.cfg.live_updates or bool(self.cfg.reaction_emoji))
        self._live: LiveHooks | None = None

    def live(self) -> LiveHooks | None:
        if self._live is None and self.capabilities.live:
            from picobot.channels.feishu.live import FeishuLive

            self._live = FeishuLive(self)
        return self._live

    # ---- inbound -----------------------------------------------------------------------------

    def normalize(self, event: dict) -> list[InboundMessage]:
        from picobot.channels.feishu.inbound import to_inbound

        # The bot's own id is only needed to resolve @-mentions; a message without any must not
        # depend on bot/v3/info (one more call that can fail while Feishu is flaky).
        message = (event.get("event") or {}).get("message") if isinstance(event.get("event"), dict) else None
        mentions = message.get("mentions") if isinstance(message, dict) else None
        bot_open_id = self.api.bot_info().get("open_id") if mentions else None
        return to_inbound(event, self.cfg, self.api, bot_open_id, self.cfg.media_path(self.rt.config.home),
                          channel=self.name)

    # ---- outbound ----------------------------------------------------------------------------

    def deliver(self, delivery: Delivery) -> dict | None:
        try:
            result: dict[str, Any] = {"message_ids": self._deliver(delivery)}
            media = self._images(delivery)
            if media:
                result["media"] = media
            return result
        except FeishuError as exc:
            raise DeliveryError(str(exc), permanent=exc.permanent, retry_after=exc.retry_after,
                                code=None if exc.code is None else str(exc.code)) from None

    def _deliver(self, d: Delivery) -> list[str]:
        payload = d.payload or {}
        text = payload.get("text") or ""
        plain = d.kind == "notice" or payload.get("format") == "plain"
        if plain:
            bodies = [("text", cards.text_content(p)) for p in cards.split_plain(text, self.cfg.max_message_chars)]
        else:
            bodies = [("interactive", cards.markdown_card(p))
                      for p in cards.split_markdown(text, self.cfg.max_message_chars)]
        buttons = payload.get("buttons") if isinstance(payload.get("buttons"), list) else None
        if buttons and bodies:  # slash-command buttons under the last part: a card (a press is a card action)
            last = cards.split_plain(text, self.cfg.max_message_chars)[-1] if plain else text
            bodies[-1] = ("interactive", cards.buttons_card(last if plain else bodies[-1][1]["body"]["elements"][0]
                                                            ["content"], buttons))
        reply_to = payload.get("reply_to") if d.kind in ("reply", "notice") else None
        ids: list[str] = []
        start = 0
        turn_id = payload.get("turn_id")
        if d.kind == "reply" and not plain and bodies and self.cfg.live_updates and turn_id:
            card_message_id = self._finish_card(turn_id, bodies[0][1]["body"]["elements"][0]["content"])
            if card_message_id is not None:
                ids.append(card_message_id)
                start = 1
        for index in range(start, len(bodies)):
            msg_type, content = bodies[index]
            ids.append(self._post(d.chat_id, reply_to, msg_type, content, part_uuid(d.idempotency_key, index)))
        return ids

    def _images(self, d: Delivery) -> dict[str, Any]:
        """The answer's images after its text, as image messages; each noted (message id, or why skipped)."""
        entries = media_entries(d.payload)
        if not entries:
            return {}
        with self.rt.db.connect() as conn:
            media: dict[str, Any] = dict(outbox.progress_of(conn, d.id).get("media") or {})
        reply_to = (d.payload or {}).get("reply_to") if d.kind in ("reply", "notice") else None
        for index, entry in enumerate(entries):
            if str(index) in media:
                continue  # sent (or skipped) by an earlier attempt
            image = read_image(entry, self.rt.config.workspace_path(), MAX_IMAGE_BYTES)
            if isinstance(image, str):
                log.warning("feishu (%s): image %d of delivery %d skipped: %s", self.name, index, d.id, image)
                media[str(index)] = {"skipped": image}
            else:
                try:
                    key = self.api.upload_image(image.data, image.name)
                    media[str(index)] = self._post(d.chat_id, reply_to, "image", {"image_key": key},
                                                   part_uuid(f"{d.idempotency_key}-img", index))
                except FeishuError as exc:
                    if not exc.permanent:
                        raise  # the lane retries; the text (same uuids) and the images noted are not sent again
                    log.warning("feishu (%s): image %d of delivery %d refused: %s", self.name, index, d.id, exc)
                    media[str(index)] = {"skipped": f"refused ({exc.code})"}
            with self.rt.db.begin() as conn:
                outbox.note_progress(conn, d.id, {"media": media})
        return media

    def deliver_voice(self, delivery: Delivery, clip: Any) -> dict | None:
        """A spoken answer: an audio message when the clip is Ogg Opus (what Feishu plays), else a file."""
        payload = delivery.payload or {}
        opus = clip.format == "opus"
        try:
            key = self.api.upload_file(clip.data, "opus" if opus else "stream",
                                       "answer.opus" if opus else f"answer.{clip.format or 'mp3'}",
                                       duration_ms=_opus_ms(clip.data) if opus else None)
            message_id = self._post(delivery.chat_id, payload.get("reply_to"), "audio" if opus else "file",
                                    {"file_key": key}, part_uuid(delivery.idempotency_key, 0))
        except FeishuError as exc:
            raise DeliveryError(str(exc), permanent=exc.permanent, retry_after=exc.retry_after,
                                code=None if exc.code is None else str(exc.code)) from None
        return {"message_ids": [message_id], "audio": opus, "bytes": len(clip.data)}

    def _post(self, chat_id: str, reply_to: str | None, msg_type: str, content: dict, uuid: str) -> str:
        if reply_to:
            try:
                return self.api.reply(reply_to, msg_type, content, uuid)
            except FeishuError as exc:
                if exc.code not in PARENT_GONE:
                    raise
                log.info("feishu: message %s is gone (code %s); sending to the chat instead", reply_to, exc.code)
        return self.api.send(chat_id, msg_type, content, uuid)

    # ---- the turn's streaming card -----------------------------------------------------------

    def _card_record(self, turn_id: str) -> dict | None:
        """The turn's streaming card, waiting briefly for one being created; None = there is none."""
        key = card_key(turn_id)
        r = self.rt.redis
        if r.set(key, "none", nx=True, ex=3600):
            return None  # no card: live.py will not start one for this turn any more
        deadline = time.monotonic() + CARD_WAIT_SECS
        while True:
            raw = _decode(r.get(key))
            if raw not in ("pending",) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        try:
            record = json.loads(raw) if raw else None
        except ValueError:
            return None
        return record if isinstance(record, dict) and record.get("card_id") else None

    def _finish_card(self, turn_id: str, text: str) -> str | None:
        """Stream the final text into the turn's card and close streaming; the card's message id, or None."""
        record = self._card_record(turn_id)
        if record is None:
            return None
        card_id, r = record["card_id"], self.rt.redis
        if not record.get("final"):
            record["final"] = True
            r.set(card_key(turn_id), json.dumps(record), ex=3600)  # live.py stops streaming from here on
            # live.py holds the lock during one streaming call; past the wait the answer goes in anyway
            lock = Lease(r, card_lock_key(card_id), CARD_LOCK_SECS)
            lock.acquire_within(CARD_WAIT_SECS)
            try:
                self.api.stream_text(card_id, cards.STREAM_ELEMENT_ID, text, int(r.incr(card_seq_key(card_id))),
                                     part_uuid(f"final-{card_id}", 0))
                self.api.close_streaming(card_id, int(r.incr(card_seq_key(card_id))))
            except FeishuError as exc:
                if exc.code == 300309:  # streaming closed itself (10 min limit): answer in messages instead
                    r.set(card_key(turn_id), "none", ex=3600)
                    return None
                record["final"] = False
                r.set(card_key(turn_id), json.dumps(record), ex=3600)
                raise
            finally:
                lock.release()  # only if ours: when the wait ran out, the holder's lock stays
            r.set(card_key(turn_id), json.dumps({**record, "closed": True}), ex=3600)
        return str(record.get("message_id") or "")


def _opus_ms(data: bytes) -> int | None:
    """The length of an Ogg Opus stream in milliseconds (its last page's granule position, 48 kHz), or None."""
    at = data.rfind(b"OggS")
    if at < 0 or len(data) < at + 14:
        return None
    granule = int.from_bytes(data[at + 6:at + 14], "little", signed=True)
    return granule // 48 if granule > 0 else None
