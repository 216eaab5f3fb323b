"""Input becomes durable before it is acknowledged, then a turn is enqueued."""

from __future__ import annotations

import logging

from picobot.domain.messages import Content
from picobot.gateway.commands import CommandContext, handle_command, is_command
from picobot.gateway.inbound import InboundMessage, Reply
from picobot.runtime.services import Runtime
from picobot.storage import inbound, sessions
from picobot.storage.models import MODE_QUEUE, MODE_STEER

log = logging.getLogger("picobot.gateway")

MAX_PENDING_PER_SESSION = 64
MAX_BLOCKS = 32


class Gateway:
    def __init__(self, rt: Runtime):
        self.rt = rt

    def submit(self, msg: InboundMessage) -> Reply:
        if isinstance(msg.content, str) and is_command(msg.content):
            return handle_command(CommandContext(self.rt, self, msg), msg.content.strip())
        problem = self._check(msg.content)
        if problem:
            code, text = problem
            log.info("rejected input from %s:%s: %s", msg.channel, msg.chat_id, code)
            return Reply("rejected", fate="rejected", code=code, text=text)
        return self.accept(msg)

    def accept(self, msg: InboundMessage) -> Reply:
        mode = MODE_QUEUE if msg.mode == MODE_QUEUE else MODE_STEER
        with self.rt.db.begin() as conn:
            session_id = sessions.current_or_create_id(conn, msg.channel, msg.chat_id)
            pending, busy = inbound.intake_state(conn, session_id)
            if pending >= MAX_PENDING_PER_SESSION:
                return Reply("rejected", session_id=session_id, fate="rejected", code="queue_full",
                             text=f"This dialog already has {MAX_PENDING_PER_SESSION} messages waiting; "
                                  "wait for the agent or /stop.")
            row, created = inbound.enqueue(conn, session_id, msg.channel, msg.content, msg.sender_id, mode,
                                           msg.platform_message_id)
        seq = row.seq
        if not created:
            return Reply("accepted", session_id=session_id, seq=seq, fate="duplicate")
        try:
            self.rt.queue.enqueue_turn(session_id)
        except Exception as exc:  # stored already: the sweeper starts it once Redis is back
            log.warning("input %s#%d stored but not enqueued (%s); the sweeper will run it", session_id, seq,
                        type(exc).__name__)
            return Reply("accepted", session_id=session_id, seq=seq, fate="queued")
        # `busy`: a turn of this dialog was running when the input was stored (SQL, not the lease)
        fate = ("queued" if mode == MODE_QUEUE else "steered") if busy else "started"
        return Reply("accepted", session_id=session_id, seq=seq, fate=fate)

    def _check(self, content: Content) -> tuple[str, str] | None:
        limit = self.rt.config.gateway.max_message_chars
        if isinstance(content, str):
            text_len = len(content)
            if not content.strip():
                return "empty", "The message is empty."
        else:
            if not content or len(content) > MAX_BLOCKS:
                return "bad_content", f"A message needs 1 to {MAX_BLOCKS} content blocks."
            text_len = 0
            for block in content:
                kind = block.get("type") if isinstance(block, dict) else None
                if kind == "text" and isinstance(block.get("text"), str):
                    text_len += len(block["text"])
                elif kind == "image_url" and isinstance(block.get("url"), str):
                    text_len += 0 if block["url"].startswith("data:") else len(block["url"])
                else:
                    return "bad_content", ("Each content block must be {\"type\": \"text\", \"text\": ...} "
                                           "or {\"type\": \"image_url\", \"url\": ...}.")
        if text_len > limit:
            return "too_large", (f"The message has {text_len} characters; the limit is {limit} "
                                 "(gateway.max_message_chars).")
        return None
