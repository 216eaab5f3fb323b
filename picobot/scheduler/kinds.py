"""What a job does when it fires, by kind; `run` returns (outcome, error, session_id).

- internal_event: payload.event `memory_maintenance` or `session_cleanup`, run here -> ok/failed.
- outbound_message: payload.text (or prompt) delivered to the target chat -> ok/failed.
- agent_task: a synthetic user input (platform_message_id `job:<id>:<due>`, mode `queue`, so it
  waits behind a running turn and is always the first input of its own turn) in the target chat's
  current dialog (a new dialog with payload.fresh_session), drained by `picobot.turn` on the
  `scheduled` queue -> "running"; the turn's end records the outcome (fire.on_turn_finished).
- silent_agent_task: the same in its own session, channel `scheduler`, chat
  target.session_chat_id or the job id; nothing is pushed on success; a failure sends exactly one
  notice to the target chat (`notify_failure`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from picobot.domain.messages import ChatMessage
from picobot.domain.scope import SOCKET_CHANNELS
from picobot.storage import inbound, messages, sessions
from picobot.storage.models import MODE_QUEUE

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from picobot.runtime.ports import Ports as Runtime

log = logging.getLogger("picobot.scheduler")

MARKER_SYSTEM_PROMPT = "scheduled_system_prompt"
MARKER_JOB_MESSAGE = "scheduled_message"
SILENT_CHANNEL = "scheduler"
LOCAL_CHANNELS = (*sorted(SOCKET_CHANNELS), SILENT_CHANNEL)  # delivered over pub/sub + a stored message


def run(rt: "Runtime", job: Any, due_at: float) -> tuple[str, str | None, str | None]:
    if job.kind == "internal_event":
        return _internal(rt, job)
    if job.kind == "outbound_message":
        text = str(job.payload.get("text") or job.payload.get("prompt") or "")
        if not text.strip():
            return "failed", "payload.text is empty", None
        deliver(rt, job.target or {}, text, key=f"j:{job.id}:{due_at!r}")
        return "ok", None, None
    if job.kind in ("agent_task", "silent_agent_task"):
        return "running", None, _agent_input(rt, job, due_at, silent=job.kind == "silent_agent_task")
    return "failed", f"unknown kind {job.kind!r}", None


def _internal(rt: "Runtime", job: Any) -> tuple[str, str | None, str | None]:
    event = job.payload.get("event")
    if event == "session_cleanup":
        from picobot.scheduler.cleanup import cleanup_sessions

        cleanup_sessions(rt)
        return "ok", None, None
    # memory_maintenance and any event a plugin handles (the memory capability runs that one)
    if isinstance(event, str) and rt.plugins.first("picobot_internal_event", name=event,
                                                   payload=dict(job.payload), ports=rt):
        return "ok", None, None
    return "failed", f"payload.event {event!r} is not memory_maintenance or session_cleanup", None


def _agent_input(rt: "Runtime", job: Any, due_at: float, silent: bool) -> str:
    from picobot.runtime.task_names import QUEUE_SCHEDULED

    with rt.db.begin() as conn:
        session_id = store_input(rt, conn, job, due_at)
    try:
        rt.queue.enqueue_turn(session_id, queue=QUEUE_SCHEDULED)
    except Exception as exc:  # stored: the sweeper wakes the session once the broker is back
        log.warning("job %s input stored but not enqueued (%s); the sweeper will run it", job.id,
                    type(exc).__name__)
    return session_id


def store_input(rt: "Runtime", conn: "Connection", job: Any, due_at: float) -> str:
    """An agent kind's input, in the caller's transaction (a fresh dialog first with
    payload.fresh_session); returns the session it waits in. Its turn is enqueued after the commit."""
    from sqlalchemy.orm import Session

    from picobot.config.access import agent_for
    from picobot.scheduler.fire import input_id

    payload, target = job.payload or {}, job.target or {}
    if job.kind == "silent_agent_task":
        channel, chat_id = SILENT_CHANNEL, str(target.get("session_chat_id") or job.id)
    else:
        channel, chat_id = str(target.get("channel")), str(target.get("chat_id"))
    agent = str(payload.get("agent") or agent_for(rt.config, channel))
    if payload.get("fresh_session"):
        with Session(bind=conn) as s:
            sessions.create(s, channel, chat_id, title=f"job {job.id}", agent=agent)
            s.commit()  # only its own savepoint, or a flush: see sessions.current_or_create_id
    session_id = sessions.current_or_create_id(conn, channel, chat_id, agent)
    _, created = inbound.enqueue(conn, session_id, channel, str(payload.get("prompt") or ""),
                                 str(payload.get("sender_id") or "scheduler"), MODE_QUEUE,
                                 input_id(job.id, due_at))
    if created and payload.get("system_prompt"):
        messages.append(conn, session_id, None, [ChatMessage(
            role="system", content=str(payload["system_prompt"]), marker=MARKER_SYSTEM_PROMPT)])
    return session_id


def deliver(rt: "Runtime", target: dict[str, Any], text: str, marker: str = MARKER_JOB_MESSAGE,
            key: str | None = None, kind: str = "message") -> None:
    """Text to a chat: web/cli_chat get a stored message in its current dialog and a `message`
    event; an external channel (Feishu) gets an outbox delivery whose idempotency key is `key`
    (job id + due time), so a run handled twice still shows once."""
    with rt.db.begin() as conn:
        after = store_delivery(rt, conn, target, text, marker, key, kind)
    after.run(rt)


class After:
    """What to do once a transaction that stored messages has committed: `message` events to publish,
    outbox lanes to wake (one call per lane), turns to enqueue on the `scheduled` queue."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.wakes: dict[tuple[str, str], Any] = {}
        self.turns: list[str] = []

    def merge(self, other: "After") -> None:
        self.events += other.events
        for lane, wake in other.wakes.items():
            self.wakes.setdefault(lane, wake)
        self.turns += [t for t in other.turns if t not in self.turns]

    def run(self, rt: "Runtime") -> None:
        """Best effort each: a lost wake-up is the sweepers' to repair (outbox lanes, pending input)."""
        from picobot.runtime.session_messages import run_after
        from picobot.runtime.task_names import QUEUE_SCHEDULED

        if self.events:
            try:
                rt.publisher.publish(*self.events)  # one round trip for all
            except Exception:
                log.exception("publishing jobs' messages failed (they are stored)")
        run_after(list(self.wakes.values()))
        for session_id in self.turns:
            try:
                rt.queue.enqueue_turn(session_id, queue=QUEUE_SCHEDULED)
            except Exception as exc:  # stored: the sweeper wakes the session once the broker is back
                log.warning("a job's input in %s stored but not enqueued (%s); the sweeper will run it",
                            session_id, type(exc).__name__)


def store_delivery(rt: "Runtime", conn: "Connection", target: dict[str, Any], text: str,
                   marker: str = MARKER_JOB_MESSAGE, key: str | None = None, kind: str = "message") -> After:
    """`deliver`'s SQL in the caller's transaction: the stored message (web, cli_chat) or the outbox
    row (external channel); returns what to run after the commit. ValueError: no such chat."""
    from picobot.runtime.session_messages import record_outbox

    channel, chat_id = str(target.get("channel") or ""), str(target.get("chat_id") or "")
    if not channel or not chat_id:
        raise ValueError("the job has no target chat (target.channel, target.chat_id)")
    after = After()
    if channel in LOCAL_CHANNELS:
        session_id = sessions.current_or_create_id(conn, channel, chat_id)
        messages.append(conn, session_id, None, [job_message(text, marker)])
        after.events.append(message_event(session_id, text))
        return after
    wakes = [w for w in record_outbox(conn, rt, channel, chat_id, text, kind, key) if callable(w)]
    if not wakes:
        raise ValueError(f"channel {channel!r} is not a configured, enabled external channel")
    after.wakes[(channel, chat_id)] = wakes[0] if len(wakes) == 1 else (lambda: [w() for w in wakes])
    return after


def job_message(text: str, marker: str = MARKER_JOB_MESSAGE) -> ChatMessage:
    """A job's text as stored in a web, cli_chat or scheduler chat."""
    return ChatMessage(role="assistant", content=text, marker=marker)


def message_event(session_id: str, text: str) -> dict[str, Any]:
    """The `message` event that shows a stored job message in its open chat."""
    return {"type": "message", "session_id": session_id, "text": text, "from_session": None}


def notify_budget(rt: "Runtime", job: Any, error: str, due_at: float) -> None:
    """The one notice a UTC day that a job's runs are refused by a budget, to its target chat."""
    target = job.target or {}
    if not target.get("channel") or not target.get("chat_id") or target.get("channel") == SILENT_CHANNEL:
        log.warning("job %s is over its budget and has no chat to tell: %s", job.id, error)
        return
    text = (f"⚠ Scheduled job {job.id} was not run: {error} "
            "Its runs are recorded as budget_exceeded; this notice is sent once a day.")[:4000]
    try:
        day = time.strftime("%Y-%m-%d", time.gmtime(due_at))
        deliver(rt, target, text, marker="scheduled_failure", key=f"jb:{job.id}:{day}", kind="notice")
    except Exception:
        log.exception("job %s: the budget notice could not be delivered", job.id)


def notify_failure(rt: "Runtime", job: Any, error: str, due_at: float | None = None) -> None:
    """The one notice of a failed silent_agent_task, to its target chat (best effort, logged)."""
    target = job.target or {}
    if not target.get("channel") or not target.get("chat_id") or target.get("channel") == SILENT_CHANNEL:
        log.warning("silent job %s failed and has no chat to tell: %s", job.id, error)
        return
    text = f"⚠ Scheduled job {job.id} failed: {error}"[:4000]
    try:
        key = None if due_at is None else f"jf:{job.id}:{due_at!r}"
        deliver(rt, target, text, marker="scheduled_failure", key=key, kind="notice")
    except Exception:
        log.exception("job %s: the failure notice could not be delivered", job.id)
