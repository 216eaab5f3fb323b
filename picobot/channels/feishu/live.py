"""FeishuLive: live progress of a turn in Feishu — a reaction while it runs, a streaming card if enabled.

turn_started adds ``reaction_emoji`` to the user's message (its id kept in Redis so any process can
remove it); turn_finished removes it. With ``live_updates`` the first snapshot that has answer text
creates a CardKit streaming card, replied to the user's message, and later snapshots stream compact
progress into it (tool status, the text so far, never reasoning), at most a few operations a second.
The final answer is written into the same card by FeishuAdapter.deliver (the outbox's guarantee).
Every hook swallows its errors: progress is best effort, the answer never depends on it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from picobot.channels.feishu import cards, keys
from picobot.channels.feishu.adapter import PARENT_GONE, card_key, card_lock_key, card_seq_key, part_uuid
from picobot.channels.feishu.api import FeishuError
from picobot.coord import Lease

if TYPE_CHECKING:
    from picobot.channels.feishu.adapter import FeishuAdapter

log = logging.getLogger("picobot.channels.feishu")

MIN_OP_INTERVAL = 0.2  # per card, between the end of one operation and the next; Feishu allows 10 ops/s
LIVE_LOCK_SECS = 5.0  # one progress operation's hold on the card's lock (the answer waits CARD_WAIT_SECS for it)
PROGRESS_MAX_CHARS = 8000
TOOL_MARKS = {"pending": "⏳", "running": "⏳", "done": "✅", "error": "❌"}


reaction_key = keys.reaction


def progress_text(snapshot: dict, max_chars: int = PROGRESS_MAX_CHARS) -> tuple[str, bool]:
    """The compact progress of a snapshot (tool status lines and text, no reasoning); and whether it has text."""
    lines: list[str] = []
    has_text = False
    for block in snapshot.get("blocks") or []:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            has_text = True
            lines.append(str(block["text"]))
        elif kind == "tool":
            lines.append(f"{TOOL_MARKS.get(block.get('status') or 'pending', '⏳')} `{block.get('name') or 'tool'}`")
        elif kind == "subagent":
            lines.append(f"🤖 {block.get('agent_type') or block.get('type_name') or 'sub-agent'}: "
                         f"{str(block.get('description') or '')[:80]} ({block.get('status') or 'running'})")
    text = "\n\n".join(lines)
    if len(text) > max_chars:
        text = "…" + text[-(max_chars - 1):]
    return text, has_text


@dataclass
class _Turn:
    chat_id: str
    reply_to: str | None
    card_id: str | None = None
    message_id: str | None = None
    last_text: str = ""
    last_op: float = 0.0
    gave_up: bool = False  # no card for this turn (creation failed or the answer went out first)


class FeishuLive:
    def __init__(self, adapter: FeishuAdapter):
        self.api = adapter.api
        self.cfg = adapter.cfg
        self.r = adapter.rt.redis
        self._turns: dict[str, _Turn] = {}
        self._lock = threading.Lock()

    def _turn(self, turn_id: str, chat_id: str, reply_to: str | None = None) -> _Turn:
        with self._lock:
            return self._turns.setdefault(turn_id, _Turn(chat_id, reply_to))

    # ---- hooks -------------------------------------------------------------------------------

    def turn_started(self, chat_id: str, reply_to: str | None, turn_id: str) -> None:
        self._turn(turn_id, chat_id, reply_to)
        if not (self.cfg.reaction_emoji and reply_to):
            return
        try:
            reaction_id = self.api.add_reaction(reply_to, self.cfg.reaction_emoji)
            self.r.set(reaction_key(turn_id), json.dumps({"message_id": reply_to, "reaction_id": reaction_id}),
                       ex=3600)
        except Exception as exc:  # progress is best effort
            log.info("feishu: could not add the reaction for turn %s: %s", turn_id, exc)

    def snapshot(self, chat_id: str, turn_id: str, snapshot: dict) -> None:
        if not self.cfg.live_updates:
            return
        turn = self._turn(turn_id, chat_id)
        text, has_text = progress_text(snapshot, min(PROGRESS_MAX_CHARS, self.cfg.max_message_chars))
        if turn.gave_up or not text or text == turn.last_text:
            return
        try:
            if turn.card_id is None:
                if has_text:
                    self._create_card(turn_id, turn, text)
            else:
                # the relay hands a turn's snapshots over one at a time, the newest when it comes back: a short
                # wait keeps the card within its rate, where skipping this one would leave the card on older
                # progress until the next change (a long tool run shows no mark of it)
                wait = turn.last_op + MIN_OP_INTERVAL - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self._stream(turn_id, turn, text)
        except Exception as exc:
            log.info("feishu: live card of turn %s: %s", turn_id, exc)

    def turn_finished(self, chat_id: str, turn_id: str, event: dict) -> None:
        with self._lock:
            turn = self._turns.pop(turn_id, None)
        try:
            self._remove_reaction(turn_id)
        except Exception as exc:
            log.info("feishu: could not remove the reaction of turn %s: %s", turn_id, exc)
        if turn is not None and turn.card_id and (event.get("status") != "completed" or not event.get("final_text")):
            try:  # no answer will finish this card: stop its streaming animation
                self._close_card(turn_id, turn)
            except Exception as exc:
                log.info("feishu: could not close the live card of turn %s: %s", turn_id, exc)

    # ---- parts -------------------------------------------------------------------------------

    def _remove_reaction(self, turn_id: str) -> None:
        raw = self.r.get(reaction_key(turn_id))
        if not raw:
            return
        record = json.loads(raw)
        self.api.remove_reaction(record["message_id"], record["reaction_id"])
        self.r.delete(reaction_key(turn_id))

    def _create_card(self, turn_id: str, turn: _Turn, text: str) -> None:
        key = card_key(turn_id)
        if not self.r.set(key, "pending", nx=True, ex=3600):
            turn.gave_up = True  # the answer went out first, or another process has the card
            return
        try:
            card_id = self.api.create_card(cards.streaming_card(text))
            content, uuid = cards.card_message(card_id), part_uuid(f"live-{turn_id}", 0)
            message_id = self._post(turn, content, uuid)
        except Exception:
            turn.gave_up = True
            self.r.set(key, "none", ex=3600)  # deliver() sends the answer as messages
            raise
        turn.card_id, turn.message_id, turn.last_text, turn.last_op = card_id, message_id, text, time.monotonic()
        self.r.set(key, json.dumps({"card_id": card_id, "message_id": message_id}), ex=3600)

    def _post(self, turn: _Turn, content: dict, uuid: str) -> str:
        if turn.reply_to:
            try:
                return self.api.reply(turn.reply_to, "interactive", content, uuid)
            except FeishuError as exc:
                if exc.code not in PARENT_GONE:
                    raise
        return self.api.send(turn.chat_id, "interactive", content, uuid)

    def _locked(self, turn_id: str, card_id: str) -> Lease | None:
        """The card's lock, taken unless another holds it or the answer is being written into it (then never again).

        A Lease: released only while it is still ours, so an operation that outlasts its TTL never frees the
        lock the answer (FeishuAdapter.deliver) took meanwhile.
        """
        lock = Lease(self.r, card_lock_key(card_id), LIVE_LOCK_SECS)
        if not lock.acquire():
            return None
        raw = self.r.get(card_key(turn_id))
        try:
            final = bool(json.loads(raw).get("final")) if raw else True
        except (ValueError, AttributeError):
            final = True
        if final:
            lock.release()
            return None
        return lock

    def _stream(self, turn_id: str, turn: _Turn, text: str) -> None:
        card_id = turn.card_id
        assert card_id is not None
        lock = self._locked(turn_id, card_id)
        if lock is None:
            return
        try:
            seq = int(self.r.incr(card_seq_key(card_id)))
            self.api.stream_text(card_id, cards.STREAM_ELEMENT_ID, text, seq, part_uuid(f"s{seq}-{card_id}", 0))
            turn.last_text, turn.last_op = text, time.monotonic()
        finally:
            lock.release()

    def _close_card(self, turn_id: str, turn: _Turn) -> None:
        card_id = turn.card_id
        assert card_id is not None
        lock = self._locked(turn_id, card_id)
        if lock is None:
            return
        try:
            record = {"card_id": card_id, "message_id": turn.message_id, "final": True, "closed": True}
            self.r.set(card_key(turn_id), json.dumps(record), ex=3600)
            self.api.close_streaming(card_id, int(self.r.incr(card_seq_key(card_id))))
        finally:
            lock.release()
