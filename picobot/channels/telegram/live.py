"""TelegramLive: while a turn runs, "typing…" in the chat, an optional reaction, an optional live message.

`sendChatAction typing` lasts about 5 s on Telegram, so one ticker thread repeats it every 4 s for
every running turn (at most 10 minutes a turn). With `reaction_emoji` the user's message gets that
reaction until the turn ends. With `live_updates` the first snapshot with answer text sends one
message (a reply to the user's), and later snapshots edit it (at most one edit per 1.5 s per turn;
text so far and tool status, never reasoning); the answer itself still comes through the outbox and
deliver() edits this message into its first part. Every hook swallows its errors: progress is best
effort, the answer never depends on it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from picobot.channels.telegram import keys
from picobot.channels.telegram.inbound import message_id_of
from picobot.channels.telegram.markup import to_html
from picobot.channels.telegram.split import split_html
from picobot.coord import Lease

if TYPE_CHECKING:
    from picobot.channels.telegram.adapter import TelegramAdapter

log = logging.getLogger("picobot.channels.telegram")

TYPING_EVERY_SECS = 4.0
TYPING_MAX_SECS = 600.0
MIN_EDIT_INTERVAL = 1.5  # Telegram allows about one message a second per chat; edits count
LIVE_LOCK_SECS = 5.0  # one progress edit's hold on the live message's lock (the answer waits LIVE_WAIT_SECS for it)
PROGRESS_MAX_CHARS = 3500
TOOL_MARKS = {"pending": "⏳", "running": "⏳", "done": "✅", "error": "❌"}


def progress_markdown(snapshot: dict) -> tuple[str, bool]:
    """The compact progress of a snapshot as Markdown (tool lines, text so far); and whether it has text."""
    lines: list[str] = []
    has_text = False
    for block in snapshot.get("blocks") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            has_text = True
            lines.append(str(block["text"]))
        elif kind == "tool":
            mark = TOOL_MARKS.get(str(block.get("status") or "pending"), "⏳")
            lines.append(f"{mark} `{block.get('name') or 'tool'}`")
    text = "\n\n".join(lines)
    if len(text) > PROGRESS_MAX_CHARS:
        text = "…" + text[-(PROGRESS_MAX_CHARS - 1):]
    return text, has_text


@dataclass
class _Turn:
    chat_id: str
    reply_to: int | None
    started: float = field(default_factory=time.monotonic)
    message_id: int | None = None
    last_text: str = ""
    last_edit: float = 0.0
    gave_up: bool = False
    reacted: bool = False


class TelegramLive:
    def __init__(self, adapter: TelegramAdapter):
        self.api = adapter.api
        self.cfg = adapter.cfg
        self.name = adapter.name
        self.r = adapter.rt.redis
        self._turns: dict[str, _Turn] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._ticker: threading.Thread | None = None

    # ---- hooks -------------------------------------------------------------------------------

    def turn_started(self, chat_id: str, reply_to: str | None, turn_id: str) -> None:
        turn = _Turn(chat_id, message_id_of(reply_to))
        with self._lock:
            self._turns[turn_id] = turn
            if self._ticker is None or not self._ticker.is_alive():
                self._ticker = threading.Thread(target=self._typing_loop, name="telegram-typing", daemon=True)
                self._ticker.start()
        self._wake.set()
        if self.cfg.reaction_emoji and turn.reply_to is not None:
            try:
                self.api.set_reaction(chat_id, turn.reply_to, self.cfg.reaction_emoji)
                turn.reacted = True
            except Exception as exc:
                log.info("telegram (%s): no reaction for turn %s: %s", self.name, turn_id, exc)

    def snapshot(self, chat_id: str, turn_id: str, snapshot: dict) -> None:
        if not self.cfg.live_updates:
            return
        with self._lock:
            turn = self._turns.get(turn_id)
        if turn is None or turn.gave_up:
            return
        text, has_text = progress_markdown(snapshot)
        if not text or text == turn.last_text or time.monotonic() - turn.last_edit < MIN_EDIT_INTERVAL:
            return
        try:
            if turn.message_id is None:
                if has_text:
                    self._send_live(turn_id, turn, text)
            else:
                self._edit_live(turn_id, turn, text)
        except Exception as exc:
            log.info("telegram (%s): live message of turn %s: %s", self.name, turn_id, exc)

    def turn_finished(self, chat_id: str, turn_id: str, event: dict) -> None:
        with self._lock:
            turn = self._turns.pop(turn_id, None)
        if turn is not None and turn.reacted and turn.reply_to is not None:
            try:
                self.api.set_reaction(chat_id, turn.reply_to, None)
            except Exception as exc:
                log.info("telegram (%s): reaction of turn %s not removed: %s", self.name, turn_id, exc)

    # ---- typing ------------------------------------------------------------------------------

    def _typing_loop(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                for turn_id in [t for t, v in self._turns.items() if now - v.started > TYPING_MAX_SECS]:
                    del self._turns[turn_id]  # its end was missed
                chats = {t.chat_id for t in self._turns.values()}
                if not chats:
                    self._ticker = None
                    return
            for chat_id in chats:
                try:
                    self.api.send_chat_action(chat_id, "typing")
                except Exception as exc:
                    log.debug("telegram (%s): typing in %s: %s", self.name, chat_id, exc)
            self._wake.wait(TYPING_EVERY_SECS)
            self._wake.clear()

    # ---- the live message --------------------------------------------------------------------

    def _first_part(self, text: str) -> str:
        parts = split_html(to_html(text))
        return parts[0] if parts else "…"

    def _send_live(self, turn_id: str, turn: _Turn, text: str) -> None:
        key = keys.live(turn_id)
        if not self.r.set(key, "pending", nx=True, ex=3600):
            turn.gave_up = True  # the answer went out first
            return
        try:
            turn.message_id = self.api.send_message(turn.chat_id, self._first_part(text), html=True,
                                                    reply_to=turn.reply_to)
        except Exception:
            turn.gave_up = True
            self.r.set(key, "none", ex=3600)  # deliver() sends the answer as new messages
            raise
        turn.last_text, turn.last_edit = text, time.monotonic()
        self.r.set(key, json.dumps({"message_id": turn.message_id, "final": False}), ex=3600)

    def _edit_live(self, turn_id: str, turn: _Turn, text: str) -> None:
        # a Lease: released only while still ours, so an edit that outlasts its TTL never frees the lock the
        # answer (TelegramAdapter.deliver) took meanwhile
        lock = Lease(self.r, keys.live_lock(turn_id), LIVE_LOCK_SECS)
        if not lock.acquire():
            return
        try:
            raw = self.r.get(keys.live(turn_id))
            try:
                record: Any = json.loads(raw) if raw else None
            except ValueError:  # "none" / "pending"
                record = None
            if not isinstance(record, dict) or record.get("final"):
                turn.gave_up = True  # the answer is being written into it
                return
            assert turn.message_id is not None
            self.api.edit_message_text(turn.chat_id, turn.message_id, self._first_part(text), html=True)
            turn.last_text, turn.last_edit = text, time.monotonic()
        finally:
            lock.release()
