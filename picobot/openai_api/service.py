"""A /v1 chat request end to end, without HTTP: pick the dialog, submit the input through the
gateway's intake (mode `queue`, so it gets a turn and an answer of its own), then follow the
turn's events and read the answer from SQL.

The caller (web/openai_api.py) has authenticated the request as a Principal.
"""

from __future__ import annotations

import hashlib
import queue
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any, Iterator

from sqlalchemy import bindparam, select

from picobot.gateway.inbound import InboundMessage
from picobot.gateway.intake import Gateway
from picobot.openai_api import CHANNEL, answer as answers
from picobot.openai_api.errors import NOT_FOUND, PERMISSION, RATE_LIMIT, SERVER, TIMEOUT, ApiError, rejected
from picobot.openai_api.models import agent_of
from picobot.openai_api.request import ChatRequest
from picobot.openai_api.watch import TurnWatch
from picobot.runtime.services import Runtime
from picobot.storage import sessions
from picobot.storage.models import MODE_QUEUE, ChatScopeRow, SessionRow

POLL_SECS = 1.0  # with no event for this long, SQL is asked whether the answer is in
_SLUG = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_s, _scope = SessionRow.__table__, ChatScopeRow.__table__
_CURRENT = (select(_s.c.id, _s.c.next_seq).select_from(_scope.join(_s, _scope.c.current_session_id == _s.c.id))
            .where(_scope.c.scope == bindparam("scope"), _s.c.deleted_at.is_(None), _s.c.archived_at.is_(None)))


@dataclass(frozen=True)
class Principal:
    """Who sent a request: an API key (scoped to one agent) or a paired device (every agent)."""

    kind: str  # "key" | "device" | "open" (pairing off and no token)
    id: str
    name: str
    agent: str | None  # the only agent it may use; None: any

    @property
    def sender_id(self) -> str:
        """Whom allow_from rules and memories see: `apikey:<name>`, `device:<id>` or `address:<client>`."""
        return {"key": f"apikey:{self.name}", "device": f"device:{self.id}"}.get(self.kind, f"address:{self.id}")

    @property
    def limit_key(self) -> str:
        """Whom the per-device rate limits count (the same `dev:` key /ws uses for a paired device)."""
        return {"key": f"key:{self.id}", "device": f"dev:{self.id}"}.get(self.kind, f"addr:{self.id}")


@dataclass(frozen=True)
class Dialog:
    name: str  # the client's name for it (X-PicoBot-Session)
    chat_id: str
    session_id: str
    new: bool  # nothing was said in it yet: the request's earlier messages are its context


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Progress:
    info: dict[str, Any]


def resolve_agent(rt: Runtime, principal: Principal, model: str) -> str:
    agent = agent_of(rt.config, model)
    if agent is None:
        raise ApiError(404, f"The model {model[:128]!r} does not exist; GET /v1/models lists the agents.",
                       NOT_FOUND, "model", "model_not_found")
    if principal.agent is not None and principal.agent != agent:
        raise ApiError(403, f"This API key may only use the model of agent {principal.agent!r}.", PERMISSION,
                       "model", "model_not_allowed")
    return agent


def chat_id_of(principal: Principal, agent: str, name: str) -> str:
    """The dialog's chat: one per credential, agent and session name, so no key reads another's."""
    slug = agent if _SLUG.match(agent) else "a" + hashlib.sha256(agent.encode()).hexdigest()[:16]
    return f"{principal.id[:64]}.{slug}.{name}"


def open_dialog(rt: Runtime, principal: Principal, agent: str, name: str | None) -> Dialog:
    name = name or "s-" + secrets.token_hex(12)
    chat_id = chat_id_of(principal, agent, name)
    with rt.db.connect() as conn:  # the common case, a dialog in use: one read, no write transaction
        found = conn.execute(_CURRENT, {"scope": f"{CHANNEL}:{chat_id}"}).first()
    if found is not None:
        return Dialog(name, chat_id, found.id, found.next_seq == 0)
    with rt.db.write() as s:
        row = sessions.get_or_create_current(s, CHANNEL, chat_id, agent)
        return Dialog(name, chat_id, row.id, row.next_seq == 0)


def submit(rt: Runtime, gateway: Gateway, principal: Principal, dialog: Dialog, req: ChatRequest) -> int:
    """Store the input durably (the gateway's rules, limits and checks); its seq in the dialog."""
    msg = InboundMessage(CHANNEL, dialog.chat_id, principal.sender_id, req.content(with_context=dialog.new),
                         mode=MODE_QUEUE, metadata={"device": principal.limit_key})
    reply = gateway.submit(msg)
    if reply.kind != "accepted" or reply.seq is None:
        raise rejected(reply.code, reply.text, reply.retry_after)
    if reply.session_id != dialog.session_id:  # the chat's current dialog moved under us: never mix answers
        raise ApiError(409, "The dialog changed while the message was stored; send it again.", code="conflict")
    return reply.seq


def follow(rt: Runtime, watch: TurnWatch, events: "queue.Queue[dict[str, Any]]", session_id: str, seq: int,
           timeout: float) -> Iterator[Delta | Progress | answers.Answer]:
    """The answer to input `seq` as it forms: text deltas, tool progress, then the Answer from SQL."""
    deadline = time.monotonic() + timeout
    stream = _TextStream()
    tools: dict[str, str] = {}
    polled = time.monotonic()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ApiError(504, f"No answer within {timeout:g} s (gateway.openai_api.timeout_secs); the turn goes "
                                "on and its answer will be in the dialog (send the same X-PicoBot-Session).",
                           TIMEOUT, code="timeout")
        try:
            frame: dict[str, Any] | None = events.get(timeout=min(POLL_SECS, left))
        except queue.Empty:
            frame = None
        mine = frame is not None and seq in (frame.get("inbound_seqs") or ())
        if mine and frame is not None and frame.get("type") == "turn_updated":
            yield from _progress(frame, tools)
            delta = stream.update(frame.get("blocks") or [])
            if delta:
                yield Delta(delta)
        # SQL is read when the turn says it ended (its last snapshot comes right after the commit),
        # or when the events have been quiet a while (missed ones, a Redis restart)
        ended = mine and frame is not None and (frame.get("type") == "turn_completed"
                                                or frame.get("status") != "running")
        if ended or time.monotonic() - polled >= POLL_SECS:
            polled = time.monotonic()
            with rt.db.connect() as conn:
                found = answers.find(conn, session_id, seq)
            if found is not None:
                tail = stream.finish(found.text) if found.status in ("completed", "cancelled") else ""
                if tail:
                    yield Delta(tail)
                yield found
                return


def _progress(frame: dict[str, Any], seen: dict[str, str]) -> Iterator[Progress]:
    for block in frame.get("blocks") or ():
        if not isinstance(block, dict) or block.get("type") != "tool":
            continue
        call_id, status = str(block.get("id")), str(block.get("status"))
        if seen.get(call_id) != status:
            seen[call_id] = status
            yield Progress({"tool": block.get("name"), "id": call_id, "status": status})


class _TextStream:
    """Turns full snapshots into text deltas: the text blocks in order, a blank line between two."""

    def __init__(self) -> None:
        self.sent = ""
        self.last = ""  # the text block being streamed

    def update(self, blocks: list[Any]) -> str:
        texts = [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"
                 and isinstance(b.get("text"), str) and b["text"]]
        visible = "\n\n".join(texts)
        if not visible.startswith(self.sent):  # never seen (masking changed it): keep what was sent
            return ""
        delta, self.sent, self.last = visible[len(self.sent):], visible, texts[-1] if texts else ""
        return delta

    def finish(self, final: str) -> str:
        """What still has to go out so the stream ends with the stored answer."""
        if not final or self.last == final:
            return ""
        if not self.sent:
            return final
        if final.startswith(self.last):
            return final[len(self.last):]
        return "\n\n" + final


def failure(found: answers.Answer) -> ApiError | None:
    """The error for an answer that is not one (a failed or cancelled turn), else None."""
    if found.status == "failed":
        return ApiError(502, found.error or "The turn failed.", SERVER, code="turn_failed")
    if found.status == "budget_exceeded":  # a budget refused the model call: nothing was sent or spent
        return ApiError(429, found.error or "A budget refused the model call.", RATE_LIMIT, code="budget_exceeded")
    if found.status == "cancelled" and not found.text:
        return ApiError(409, found.error or "The turn was stopped before it answered.", code="cancelled")
    return None
