"""Drain a session's inbound queue: one turn at a time, under the session's lease.

    claim input (SQL) -> run the AgentLoop (steering at safe boundaries, /stop via
    CancelToken) -> commit the turn's messages in one transaction, fenced by the turn's
    `running` status -> publish `turn_completed`.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from typing import Any

from picobot.agent.context import agent_prompt, needs_agent_prompt, runtime_note
from picobot.agent.loop import AgentLoop, LoopResult
from picobot.agent.snapshot import TurnController
from picobot.config.model_refs import ModelChoice
from picobot.config.schema import ResolvedAgent
from picobot.config.workspace import chat_workspace
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import MARKER_TURN_ERROR, MARKER_TURN_STOPPED, ChatMessage, Usage, text_of
from picobot.domain.scope import scope_key_for
from picobot.errors import ConfigError, ToolError
from picobot.plugins.types import InputMessage, StageContext, TurnView
from picobot.runtime import attempts, placement
from picobot.runtime.agent_setup import agent_tools, loop_settings
from picobot.runtime.audio_input import hear
from picobot.runtime.lease import Lease
from picobot.runtime.provider_chain import agent_provider
from picobot.runtime.services import Runtime
from picobot.runtime.session_messages import SessionMessenger, run_after
from picobot.storage import inbound, messages, sessions, turns
from picobot.storage.models import INBOUND_DONE, TURN_CANCELLED, TURN_COMPLETED, TURN_FAILED, TurnStatus
from picobot.tools.base import ToolContext

log = logging.getLogger("picobot.turns")

INTERRUPTED_TEXT = "This turn was interrupted; its messages will be answered by a new turn."
SHARED_WORKSPACE_MISSING = ("This message was not answered: the shared workspace is not reachable on the worker that "
                            "took it. An operator has to mount it (the worker's log says where); then send it again.")
HIDDEN_FROM_MODEL = {MARKER_TURN_ERROR, MARKER_TURN_STOPPED, attempts.MARKER_FAILED_INPUT}


def drain_session(rt: Runtime, session_id: str) -> int:
    """Run turns for the session until its queue is empty; returns how many ran (0 if busy).

    One turn per lease: after each, the lease is released and *then* the queue is checked. A
    task that found the lease held relies on exactly that check to see the input it brought.
    """
    if placement.forwarded(rt, session_id):  # its chat's files are on another live worker host
        return 0
    ran = 0
    while True:
        lease = Lease(rt.redis, session_id, rt.config.gateway.turn_lease_secs)
        if not lease.acquire():
            return ran  # the holder will see our input: it re-checks after it lets go
        try:
            outcome = _run_next_turn(rt, session_id, lease)
        finally:
            lease.release()
        if outcome is _LEAVE:
            return ran
        if outcome:
            ran += 1
        with rt.db.connect() as conn:
            if not inbound.has_pending(conn, session_id):
                return ran


@dataclass
class _Claimed:
    turn_id: str
    rows: list[inbound.Input]
    history: list[ChatMessage]
    channel: str
    chat_id: str
    agent: str
    user_turns: int
    model_choice: tuple[str | None, str | None] = (None, None)  # the dialog's /model (provider, model) keys
    compacted: bool = False  # the session has a compaction boundary
    spoken: bool = False  # an input of the turn was a voice message
    outcome: str = "interrupted"  # how the turn ended (completed | cancelled | failed | interrupted)



# Stop draining: a turn of this session still runs in SQL (its worker may only have lost the
# lease), or this turn could not be finished (its input was put back). Its worker, or the sweeper
# a few seconds later, carries on; looping at once would only spin on the same obstacle.
_LEAVE = object()


def _claim(rt: Runtime, session_id: str) -> "_Claimed | None | object":
    turn_id = uuid.uuid4().hex
    with rt.db.begin() as conn:
        sess = sessions.claim_view(conn, session_id)  # locks the session row (PostgreSQL)
        if sess is None:
            return None
        if sess.deleted_at is not None:
            inbound.cancel_pending(conn, session_id)
            return None
        if sess.running:
            # SQL is the authority: a turn still runs (its worker may only have lost the Redis
            # lease). Never start a second one.
            return _LEAVE
        rows = inbound.claim_first(conn, session_id, turn_id)
        if not rows:
            return None
        turns.start(conn, turn_id, session_id, rt.worker_name, max(r.attempts for r in rows), [r.seq for r in rows])
        stored = rt.history.get(session_id, sess.next_position, sess.compacted_before)
        if stored is None:
            stored = messages.load(conn, session_id, sess.compacted_before)
            rt.history.put(session_id, sess.next_position, sess.compacted_before, stored)
    history = [m for m in messages.repair_tool_chains(stored) if m.marker not in HIDDEN_FROM_MODEL]
    return _Claimed(turn_id, rows, history, sess.channel, sess.chat_id, sess.agent, sess.user_turns,
                    (sess.model_provider, sess.model_key), sess.compacted_before is not None)


def _run_next_turn(rt: Runtime, session_id: str, lease: Lease) -> "bool | object":
    claimed = _claim(rt, session_id)
    if claimed is _LEAVE:
        return _LEAVE
    if not isinstance(claimed, _Claimed):
        return False
    rt.track_turn(claimed.turn_id, True)
    observed = rt.plugins.has("picobot_turn_started") or rt.plugins.has("picobot_turn_ended")
    if observed:  # metrics and traces: the turn's span and latency start here
        rt.plugins.call("picobot_turn_started", ctx=_stage(session_id, claimed), queued_at=claimed.rows[0].created_at)
    try:
        return _run_claimed(rt, session_id, lease, claimed)
    except Exception as exc:  # not even a failed turn could be recorded: try the input again, boundedly
        log.exception("turn %s could not be finished", claimed.turn_id)
        why = f"the turn failed inside the worker ({type(exc).__name__})"
        event = _abandon(rt, session_id, claimed.turn_id, why)
        if event is not None:
            rt.publisher.finish(f"{session_id}#{claimed.turn_id}", event)
        return _LEAVE
    finally:
        rt.track_turn(claimed.turn_id, False)
        if observed:
            rt.plugins.call("picobot_turn_ended", ctx=_stage(session_id, claimed), status=claimed.outcome)


def _run_claimed(rt: Runtime, session_id: str, lease: Lease, claimed: "_Claimed") -> bool:
    cancel = CancelToken()
    controller = TurnController(session_id, claimed.turn_id, show_tool_results=rt.config.gateway.show_tool_results,
                                secrets=rt.secrets)
    turn_key = f"{session_id}#{claimed.turn_id}"
    controller.listener = rt.publisher.snapshot_listener(turn_key, controller.snapshot)
    watched = rt.supervisor.watch(claimed.turn_id, lease, cancel)
    try:
        result = _execute(rt, claimed, session_id, controller, cancel)
        result.status = str(_stored_status(result.status))  # a plugin's refusal status unknown here: failed
    except Exception as exc:  # a bug or infrastructure failure: record it, never lose the input
        log.exception("turn %s crashed", claimed.turn_id)
        result = LoopResult(messages=[], usage=Usage(), status="failed",
                            error=f"Internal error while running the turn ({type(exc).__name__}).")
    finally:
        rt.supervisor.unwatch(claimed.turn_id)
    if watched.lost:
        log.warning("turn %s lost its lease; its input will be re-run", claimed.turn_id)
        event = _abandon(rt, session_id, claimed.turn_id, "the turn lost its session lease")
        if event is not None and event["status"] == "failed":  # that was its last attempt
            claimed.outcome = "failed"
            rt.publisher.finish(turn_key, event)
            _turn_finished(rt, _view(session_id, claimed, LoopResult([], Usage(), status="failed",
                                                                     error=event.get("error")), committed=False))
            return False
        committed = False
    else:
        committed = _commit(rt, claimed, session_id, result)
    _finish(rt, session_id, claimed, controller, turn_key, result, committed)
    if committed:  # after the answer is out: job-run bookkeeping, the cheap estimate, maybe a compaction
        _turn_finished(rt, _view(session_id, claimed, result))
    return committed


def _stage(session_id: str, claimed: "_Claimed") -> StageContext:
    return StageContext(session_id=session_id, channel=claimed.channel, chat_id=claimed.chat_id,
                        sender_id=claimed.rows[0].sender_id, turn_id=claimed.turn_id, agent=claimed.agent,
                        input_ids=tuple(r.platform_message_id for r in claimed.rows if r.platform_message_id))


def _view(session_id: str, claimed: "_Claimed", result: LoopResult, committed: bool = True) -> TurnView:
    return TurnView(
        session_id=session_id, turn_id=claimed.turn_id, channel=claimed.channel, chat_id=claimed.chat_id,
        sender_id=claimed.rows[0].sender_id, agent=claimed.agent, status=result.status,
        final_text=result.final_text, error=result.error, partial_text=result.partial_text,
        input_ids=tuple(r.platform_message_id for r in claimed.rows if r.platform_message_id),
        messages=tuple(result.messages), history=tuple(claimed.history), committed=committed, spoken=claimed.spoken)


def _turn_finished(rt: Runtime, turn: TurnView) -> None:
    """Tell the plugins (the scheduler records its job run, memory may compact); then `after_output`."""
    rt.plugins.call("picobot_turn_finished", turn=turn, ports=rt)
    if turn.committed:
        ctx = StageContext(turn.session_id, turn.channel, turn.chat_id, turn.sender_id, turn.turn_id, turn.agent)
        rt.plugins.after_output(ctx, turn)


def _finish(rt: Runtime, session_id: str, claimed: "_Claimed", controller: TurnController, turn_key: str,
            result: LoopResult, committed: bool) -> None:
    status = result.status if committed else "interrupted"
    claimed.outcome = status
    controller.finish(status)
    seqs = list(dict.fromkeys([r.seq for r in claimed.rows] + controller.inbound_seqs))
    rt.publisher.finish(turn_key, {
        "type": "turn_completed", "session_id": session_id, "turn_id": claimed.turn_id, "status": status,
        "final_text": result.final_text if committed else "", "error": result.error if committed else
        INTERRUPTED_TEXT,
        # an interrupted turn answers nothing: its input goes back to the queue and is re-run
        "inbound_seqs": seqs if committed else [],
        "usage": {"input_tokens": result.usage.input_tokens, "output_tokens": result.usage.output_tokens},
        **({"answered_by": result.answered_by} if result.answered_by else {}),
    }, last_snapshot=controller.snapshot())


def _abandon(rt: Runtime, session_id: str, turn_id: str, why: str) -> dict[str, Any] | None:
    """Store nothing of the turn; its input goes back to the queue, or ends failed after its last attempt.

    Returns the `turn_completed` event for the caller to publish (status `failed` when the input
    ended, else `interrupted`), or None when the turn was no longer this worker's to give back.
    """
    with rt.db.begin() as conn:
        if not turns.interrupt(conn, turn_id, why):
            return None  # finished or declared dead already
        after: list = []
        ended = attempts.give_back(conn, session_id, turn_id, rt.config.gateway.max_turn_attempts, why,
                                   ports=rt, after=after)
    run_after(after)
    return ended or _interrupted(session_id, turn_id)


def _interrupted(session_id: str, turn_id: str) -> dict[str, Any]:
    # answers nothing: the input is back in the queue and a later turn answers it
    return {"type": "turn_completed", "session_id": session_id, "turn_id": turn_id, "status": "interrupted",
            "final_text": "", "error": INTERRUPTED_TEXT, "inbound_seqs": [],
            "usage": {"input_tokens": 0, "output_tokens": 0}}


def _execute(rt: Runtime, claimed: _Claimed, session_id: str, controller: TurnController,
             cancel: CancelToken) -> LoopResult:
    cfg = rt.config
    new: list[ChatMessage] = []
    # resolved once: the turn keeps this agent (an agent file's generation) to its end
    resolved, unusable = _resolve(cfg, claimed.agent, _dialog_choice(rt, session_id, claimed))
    if needs_agent_prompt(claimed.history, claimed.user_turns, cfg.gateway.agent_prompt_reinject_every):
        extra = resolved.agent.system_prompt if resolved is not None else None
        new.append(agent_prompt(cfg.home, extra, _scope_of(claimed)))
    stage = _stage(session_id, claimed)
    contents, unheard = [], None
    for row in claimed.rows:  # a voice message becomes its transcript before anything sees it
        content, why = hear(rt, stage, row.content, cancel)
        claimed.spoken = claimed.spoken or content is not row.content
        unheard = unheard or why
        contents.append(content)
        new.append(ChatMessage(role="user", content=content))
        controller.user(row.seq, content)
    if claimed.spoken and cancel.cancelled:  # /stop while a voice message was being heard
        return LoopResult(messages=new, usage=Usage(), status="cancelled")
    if unheard is not None:  # not heard (no speech-to-text, its server down): the user is told, no model call
        claimed.spoken = False  # that notice is not spoken
        return _answered(new, controller, unheard)
    text = "\n".join(text_of(c) for c in contents)
    answer = rt.plugins.on_input(stage, InputMessage(text=text, content=contents[0], seq=claimed.rows[0].seq))
    if answer is not None:  # a plugin answered: no model call
        return _answered(new, controller, rt.plugins.before_output(stage, answer))
    try:
        if resolved is None:
            assert unusable is not None
            raise unusable
        provider = agent_provider(rt, resolved)
    except ConfigError as exc:
        return LoopResult(messages=new, usage=Usage(), status="failed", error=_unusable_text(claimed.agent, exc))
    settings = loop_settings(cfg, resolved)
    unmounted = cfg.workspace_storage_problem()
    if unmounted:  # never created here: this host's own disk would hide the chat's files from the others
        log.error("turn %s of %s not run: %s", claimed.turn_id, session_id, unmounted)
        return LoopResult(messages=new, usage=Usage(), status="failed", error=SHARED_WORKSPACE_MISSING)
    workspace = cfg.workspace_path()
    if cfg.tools.workspace_per_chat:
        workspace = chat_workspace(workspace, claimed.channel, claimed.chat_id)
    workspace.mkdir(parents=True, exist_ok=True)
    ctx = ToolContext(
        session_id=session_id, channel=claimed.channel, chat_id=claimed.chat_id,
        sender_id=claimed.rows[0].sender_id, turn_id=claimed.turn_id, workspace=workspace, cancel=cancel,
        timezone=cfg.time.timezone, send_message=SessionMessenger(rt, session_id, claimed.channel, claimed.chat_id),
        settings=cfg.tools.model_dump(), secrets=rt.secrets, inbound_seq=claimed.rows[0].seq,
        agent_name=resolved.name, delegates=resolved.delegates, skills=resolved.skills,
    )
    tools = agent_tools(rt.tools(), resolved)
    note = runtime_note(cfg.time.timezone, claimed.channel, workspace, rt.prompt_index(tools, resolved.skills))
    if resolved.instructions:  # an agent file's body: sent with every call, so an edit applies at once
        note = ChatMessage(role="system", content=f"{resolved.instructions}\n\n{text_of(note.content)}")
    # plugins' notes (recalled memories) go right before this turn's new messages, never stored
    recalled = _notes(rt.plugins.call("picobot_turn_notes", ctx=stage, turn_input=text, ports=rt))
    prefix = _notes(rt.plugins.call("picobot_history_prefix", ctx=stage, history=claimed.history,
                                    compacted=claimed.compacted, ports=rt))
    history = [note] + prefix + claimed.history + recalled

    def steer() -> list[ChatMessage]:
        return _drain_steer(rt, session_id, claimed.turn_id, controller)

    def on_overflow(error: str) -> list[ChatMessage] | None:
        compacted = _compact_now(rt, stage, claimed, error, cancel)
        return None if compacted is None else [note] + compacted + recalled

    result = AgentLoop(provider, tools, settings, hooks=rt.plugins).run(history, new, ctx, controller, steer,
                                                                         on_overflow, stage)
    if result.status == "completed":
        _replace_answer(result, rt.plugins.before_output(stage, result.final_text))
    return result


def _dialog_choice(rt: Runtime, session_id: str, claimed: _Claimed) -> ModelChoice | None:
    """The dialog's /model choice while the agent may still use it; a choice the config dropped is ignored."""
    provider, model = claimed.model_choice
    choice = rt.config.dialog_choice(claimed.agent, provider, model)
    if choice is None and provider and model:
        log.warning("dialog %s chose %s:%s, which agent %s may no longer use; using the agent's own model",
                    session_id, provider, model, claimed.agent)
    return choice


def _resolve(cfg: Any, name: str, choice: ModelChoice | None) -> tuple[ResolvedAgent | None, ConfigError | None]:
    try:
        return cfg.agent(name, choice), None
    except ConfigError as exc:
        return None, exc


def _unusable_text(name: str, exc: ConfigError) -> str:
    if exc.key_path.startswith("agents/"):  # an agent file with an error
        return f"The agent {name!r} cannot run: its file has an error: {exc.reason}"
    return f"No model is configured: {exc.reason}"


def _notes(found: list) -> list[ChatMessage]:
    """The ChatMessages among what plugins returned (each returns a list, or nothing)."""
    return [m for group in found if isinstance(group, list) for m in group if isinstance(m, ChatMessage)]


def _answered(new: list[ChatMessage], controller: TurnController, answer: str) -> LoopResult:
    """The turn a plugin's `on_input` answered: its input and that answer, as a model's would be stored."""
    controller.text(answer)
    return LoopResult(messages=new + [ChatMessage(role="assistant", content=answer)], usage=Usage())


def _replace_answer(result: LoopResult, text: str) -> None:
    """`before_output` changed the final answer: the stored (and delivered) answer is the new text."""
    for i in range(len(result.messages) - 1, -1, -1):
        m = result.messages[i]
        if m.role == "assistant" and not m.tool_calls:
            if text_of(m.content) != text:
                result.messages[i] = replace(m, content=text)
            return


def _compact_now(rt: Runtime, stage: StageContext, claimed: _Claimed, error: str,
                 cancel: CancelToken) -> list[ChatMessage] | None:
    """The model said the turn does not fit: a plugin (memory) compacts the stored history now."""
    stored = rt.plugins.first("picobot_context_overflow", ctx=stage, error=error, ports=rt, cancel=cancel)
    if not isinstance(stored, list):
        return None
    claimed.history = [m for m in stored if isinstance(m, ChatMessage) and m.marker not in HIDDEN_FROM_MODEL]
    return claimed.history


def _scope_of(claimed: _Claimed) -> str | None:
    """The sender's memory scope (whose section of AGENT.md's memory block the prompt keeps), if any."""
    try:
        return scope_key_for(claimed.channel, claimed.rows[0].sender_id)
    except ToolError:
        return None


def _drain_steer(rt: Runtime, session_id: str, turn_id: str, controller: TurnController) -> list[ChatMessage]:
    with rt.db.connect() as conn:
        if not inbound.has_pending(conn, session_id):
            return []  # the usual case: no write transaction (and no SQLite write lock)
    with rt.db.begin() as conn:
        rows = inbound.claim_steer(conn, session_id, turn_id)
    out = []
    for row in rows:  # a voice message steered in is heard here; not heard, its note tells the model
        content, why = hear(rt, StageContext(session_id, session_id.split(":", 1)[0], "", row.sender_id, turn_id),
                           row.content)
        if why is not None:
            content = f"{text_of(content)} ({why})"
        out.append(ChatMessage(role="user", content=content))
        controller.user(row.seq, content)
    return out


def _stored_status(status: str) -> TurnStatus:
    """The turn's final status: a refusal's own (budget_exceeded) when it is one, else failed."""
    try:
        stored = TurnStatus(status)
    except ValueError:
        return TURN_FAILED
    return TURN_FAILED if stored in (TurnStatus.RUNNING, TurnStatus.INTERRUPTED) else stored


def _commit(rt: Runtime, claimed: _Claimed, session_id: str, result: LoopResult) -> bool:
    """Store the turn's messages atomically, in true order. False if the turn was fenced out."""
    status = _stored_status(result.status)
    to_store = list(result.messages)
    if status not in (TURN_COMPLETED, TURN_CANCELLED):  # failed, or a plugin's refusal (a budget)
        to_store.append(ChatMessage(role="assistant", content=f"⚠ {result.error}", marker=MARKER_TURN_ERROR))
    elif result.status == "cancelled":
        partial = result.partial_text.rstrip()
        to_store.append(ChatMessage(role="assistant", content=f"{partial}\n\n(stopped)" if partial else "(stopped)",
                                    marker=MARKER_TURN_STOPPED))
    user_turns = sum(1 for m in to_store if m.role == "user")
    with rt.db.begin() as conn:
        if not turns.finish(conn, claimed.turn_id, status, result.usage, result.final_text, result.error,
                            sorted({r.seq for r in claimed.rows})):
            return False  # the sweeper declared this turn dead and owns its input now
        first = sessions.record_turn(conn, session_id, len(to_store), result.usage, result.last_input_tokens,
                                     user_turns)
        messages.insert_at(conn, session_id, first, claimed.turn_id, to_store)
        # an external chat's answer goes into the outbox in this same transaction (the channels plugin)
        after = rt.plugins.call("picobot_turn_committed", conn=conn, turn=_view(session_id, claimed, result),
                                ports=rt)
        inbound.finish(conn, claimed.turn_id, INBOUND_DONE)
    rt.history.extend(session_id, first, to_store)
    run_after(after)
    return True
