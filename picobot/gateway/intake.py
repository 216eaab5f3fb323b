"""Input becomes durable before it is acknowledged, then a turn is enqueued."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable

from sqlalchemy import Connection

from picobot.config.access import agent_for, allowed
from picobot.domain.messages import Content
from picobot.domain.text import repair_content
from picobot.gateway.blocks import BadBlock, audio_bytes, measure_blocks
from picobot.gateway.commands import CommandContext, handle_command, is_command
from picobot.gateway.inbound import InboundMessage, Reply
from picobot.gateway.limits import RateLimits
from picobot.plugins.types import StageContext
from picobot.runtime.services import Runtime
from picobot.storage import inbound, sessions
from picobot.storage.models import MODE_QUEUE, MODE_STEER

log = logging.getLogger("picobot.gateway")

MAX_PENDING_PER_SESSION = 64
MAX_BLOCKS = 32


class Gateway:
    def __init__(self, rt: Runtime, limits: RateLimits | None = None):
        self.rt = rt
        # one RateLimits per process is best (it logs a Redis outage once); a private one works too
        self.limits = limits or RateLimits(rt.redis, rt.config.gateway.rate_limits)

    def submit(self, msg: InboundMessage) -> Reply:
        msg = repaired(msg)
        if not allowed(self.rt.config, msg.channel, msg.sender_id):  # before anything, commands too
            log.info("rejected input from %s:%s: sender %s is not in allow_from", msg.channel, msg.chat_id,
                     msg.sender_id)
            return Reply("rejected", fate="rejected", code="forbidden",
                         text="You are not allowed to talk to this agent here (channels.<name>.allow_from).")
        if isinstance(msg.content, str) and is_command(msg.content):
            return handle_command(CommandContext(self.rt, self.submit, msg, self.limits), msg.content.strip())
        problem = self._check(msg.content)
        if problem:
            code, text = problem
            log.info("rejected input from %s:%s: %s", msg.channel, msg.chat_id, code)
            return Reply("rejected", fate="rejected", code=code, text=text)
        # after the content checks (a malformed frame costs no budget), before anything is stored
        limited = self.limits.message(f"{msg.channel}:{msg.chat_id}", msg.metadata.get("device"))
        if limited is not None:
            log.info("rate limited input from %s:%s", msg.channel, msg.chat_id)
            return Reply("rejected", fate="rejected", code="rate_limited", text=limited.text,
                         retry_after=limited.retry_after)
        return self.accept(msg)

    def accept(self, msg: InboundMessage) -> Reply:
        if not self.rt.plugins.has("picobot_input_received"):
            return self._accept(msg)
        ctx = StageContext("", msg.channel, msg.chat_id, msg.sender_id, "")
        done = [f for f in self.rt.plugins.call("picobot_input_received", ctx=ctx, ports=self.rt) if callable(f)]
        reply: Reply | None = None
        try:
            reply = self._accept(msg)
            return reply
        finally:  # metrics and the trace's intake span (it covers the store and the enqueue)
            for finish in done:
                _guarded(finish, reply)

    def _accept(self, msg: InboundMessage) -> Reply:
        mode = MODE_QUEUE if msg.mode == MODE_QUEUE else MODE_STEER
        agent = agent_for(self.rt.config, msg.channel)

        def store(conn: Connection) -> tuple[str, inbound.Queued | None, bool, bool]:
            session_id = sessions.current_or_create_id(conn, msg.channel, msg.chat_id, agent)
            pending, busy = inbound.intake_state(conn, session_id)
            if pending >= MAX_PENDING_PER_SESSION:
                return session_id, None, False, busy
            row, created = inbound.enqueue(conn, session_id, msg.channel, msg.content, msg.sender_id, mode,
                                           msg.platform_message_id)
            return session_id, row, created, busy

        # committed with the other inputs arriving at the same time (group commit), before any answer
        session_id, row, created, busy = self.rt.db.grouped(store)
        if row is None:
            return Reply("rejected", session_id=session_id, fate="rejected", code="queue_full",
                         text=f"This dialog already has {MAX_PENDING_PER_SESSION} messages waiting; "
                              "wait for the agent or /stop.")
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
            try:
                text_len, image_bytes = measure_blocks(content)
                sound_bytes = audio_bytes(content)
            except BadBlock as exc:
                return "bad_content", str(exc)
            audio_limit = self.rt.config.gateway.max_audio_bytes
            if sound_bytes > audio_limit:
                return "too_large", (f"The voice message holds {sound_bytes} bytes; the limit is {audio_limit} "
                                     "(gateway.max_audio_bytes). Send a shorter one.")
            image_limit = self.rt.config.gateway.max_image_bytes
            if image_bytes > image_limit:
                return "too_large", (f"The message's data: images hold {image_bytes} bytes; the limit is "
                                     f"{image_limit} (gateway.max_image_bytes). Send smaller images or https:// URLs.")
        if text_len > limit:
            return "too_large", (f"The message has {text_len} characters; the limit is {limit} "
                                 "(gateway.max_message_chars).")
        return None


def _guarded(finish: Callable[..., Any], reply: Reply | None) -> None:
    """Call a plugin's intake `done`; its failure is logged and never changes the reply."""
    try:
        finish(session_id=reply.session_id if reply else None, fate=reply.fate if reply else "error")
    except Exception:
        log.exception("an input_received callback failed")


def repaired(msg: InboundMessage) -> InboundMessage:
    """The message with text no provider, Redis or SQL could encode (lone surrogates, NUL) replaced.

    Repaired rather than rejected: a browser sends such text after a bad paste or a split emoji,
    and the rest of the message is worth answering. Everything stored as text is covered.
    """
    return replace(msg, content=repair_content(msg.content), chat_id=repair_content(msg.chat_id),
                   sender_id=repair_content(msg.sender_id), platform_message_id=repair_content(msg.platform_message_id))
