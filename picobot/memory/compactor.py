"""Run a context compaction for one session (the rules are in picobot.memory.compaction).

    read the active history (no transaction held) -> plan -> summary call with the agent's own
    provider and model (no lease, no transaction) -> one short transaction, fenced on the
    `compacted_before` that was read, appends kept prompts + summary + recent messages and moves
    the boundary -> the summary also becomes a Timeline memory of the session's user scope.

A worker killed at any point before the commit leaves the session exactly as it was. The
background task holds a Redis lease (`keys.compacting`) only so a second task does not start the
same work; correctness never depends on it. Turns never wait for it: a turn that overflows the
model's window compacts in its own thread with this same code (`force`, the provider's limit).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from picobot.agent.metered import CallWatch, metered
from picobot.agent.stream import pump
from picobot.coord import Lease, keys
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import ChatMessage, text_of
from picobot.domain.text import repair_text
from picobot.errors import ConfigError, ModelCallRefused, ProviderError, TurnCancelled
from picobot.memory.model import MemorySource, scope_key_for
from picobot.memory import compaction as rules
from picobot.plugins.types import StageContext
from picobot.providers.base import ChatRequest, Completed
from picobot.runtime import placement
from picobot.storage import compaction as sql
from picobot.storage import messages

if TYPE_CHECKING:
    from picobot.memory.ports import MemoryPorts

log = logging.getLogger("picobot.compaction")

DEFAULT_WINDOW = 128000
LEASE_MARGIN_SECS = 30


@dataclass
class Outcome:
    status: str  # compacted | not_needed | busy | lost (another compaction won) | gone | forwarded
    summarised: int = 0  # messages folded into the summary
    kept: int = 0  # messages of the new active segment after the summary
    fallback: bool = False  # the summary call failed: a truncated transcript stands in for it
    position: int | None = None  # the new `compacted_before`


def window_tokens(rt: "MemoryPorts", agent: str) -> int:
    try:
        return rt.config.agent(agent).model.context_window_tokens
    except ConfigError:
        return DEFAULT_WINDOW


def schedule_if_needed(rt: "MemoryPorts", session_id: str, agent: str, history: list[ChatMessage]) -> bool:
    """After a committed turn: the cheap estimate, and a background task when it is over budget."""
    try:
        if not rules.needs_compaction(history, window_tokens(rt, agent)):
            return False
        if rt.redis.exists(keys.compacting(session_id)):
            return False  # one is running; it will see this turn's messages too
        rt.queue.enqueue_compaction(session_id)
        return True
    except Exception:  # the turn is committed and answered: a missed compaction is retried next turn
        log.exception("could not schedule compaction of %s", session_id)
        return False


def run_background(rt: "MemoryPorts", session_id: str, force: bool = False) -> Outcome:
    """The Celery task's body: one compaction at a time per session, on the worker host holding the
    session's chat ("forwarded": sent on to that host's queue, runtime/placement.py)."""
    queue = placement.route(rt, session_id)
    if queue is not None:
        rt.queue.enqueue_compaction(session_id, force, queue=queue)
        return Outcome("forwarded")
    ttl = _lease_secs(rt, session_id)
    lease = Lease(rt.redis, keys.compacting(session_id), ttl, retake=True)
    if not lease.acquire():
        return Outcome("busy")
    try:
        outcome = compact_session(rt, session_id, force=force)
    finally:
        lease.release()
    log.info("compaction of %s: %s (%d folded, %d kept%s)", session_id, outcome.status, outcome.summarised,
             outcome.kept, ", fallback" if outcome.fallback else "")
    return outcome


def _lease_secs(rt: "MemoryPorts", session_id: str) -> float:
    try:
        with rt.db.connect() as conn:
            state = sql.read_state(conn, session_id)
        agent = state.agent if state is not None else "default"
        return rt.config.agent(agent).provider.llm_timeout_secs * 2 + LEASE_MARGIN_SECS
    except ConfigError:
        return 120.0 * 2 + LEASE_MARGIN_SECS


def compact_session(rt: "MemoryPorts", session_id: str, *, force: bool = False, limit_tokens: int | None = None,
                    keep: int = rules.KEEP_USER_TURNS, cancel: CancelToken | None = None) -> Outcome:
    """Compact the session's active history now, in this thread. `force` skips the 50 % check;
    `limit_tokens` is a window the provider reported (used when smaller than the configured one)."""
    with rt.db.connect() as conn:
        state = sql.read_state(conn, session_id)
        if state is None:
            return Outcome("gone")
        positioned = sql.load_positioned(conn, session_id, state.compacted_before)
        sender = sql.latest_sender(conn, session_id)
    history = [m for _, m in positioned]
    window = window_tokens(rt, state.agent)
    if limit_tokens:
        window = min(window, limit_tokens)
    if not force and not rules.needs_compaction(history, window, keep):
        return Outcome("not_needed")
    plan = rules.plan(history, keep)
    if plan is None:
        return Outcome("not_needed")
    stage = StageContext(session_id, state.channel, state.chat_id, sender, "", state.agent)
    summary, fallback = _summarise(rt, stage, plan.summarised, window, cancel or CancelToken())
    head = plan.kept_system + [rules.summary_message(summary)]
    with rt.db.begin() as conn:
        first = sql.commit(conn, session_id, state.compacted_before, positioned[plan.boundary][0], head)
        summary_id = sql.message_id_at(conn, session_id, first + len(head) - 1) if first is not None else None
    if first is None:
        return Outcome("lost")
    _remember(rt, session_id, state, sender, summary, summary_id)
    return Outcome("compacted", len(plan.summarised), len(history) - plan.boundary, fallback, first)


def _summarise(rt: "MemoryPorts", stage: StageContext, older: list[ChatMessage], window: int,
               cancel: CancelToken) -> tuple[str, bool]:
    """(summary, fell back). The agent's provider and model; any failure, or a budget refusing the call,
    falls back to truncation. The call is metered like a turn's (the budgets' gate and ledger)."""
    text = rules.transcript(older, window)
    try:
        resolved = rt.config.agent(stage.agent)
        provider = rt.provider(resolved.provider_key)
        request = ChatRequest(model=resolved.model.model_id, messages=rules.summary_prompt(text),
                              temperature=resolved.model.temperature,
                              max_tokens=resolved.model.max_tokens or rules.summary_max_tokens(window),
                              options=dict(resolved.model.options))
        with metered(rt.plugins, stage, resolved.provider_key, request, "compaction") as watch:
            summary = _summary_of(pump(provider.stream(request), cancel, resolved.provider.llm_timeout_secs + 5),
                                  watch)
        if summary:
            return summary, False
        log.warning("the summary call returned no text; keeping a truncated transcript")
    except TurnCancelled:
        raise
    except (ProviderError, ConfigError) as exc:
        log.warning("the summary call failed (%s); keeping a truncated transcript", exc)
    except ModelCallRefused as exc:
        log.warning("the summary call was refused (%s); keeping a truncated transcript", exc)
    except Exception:  # a bug in a provider must not lose the compaction: the fallback still works
        log.exception("the summary call crashed; keeping a truncated transcript")
    return rules.fallback_summary(text), True


def _summary_of(events: Any, watch: CallWatch) -> str:
    for event in events:
        if isinstance(event, Completed):
            watch.usage, watch.finish_reason = event.usage, event.stop_reason
            return repair_text(text_of(event.message.content)).strip()
    return ""


def _remember(rt: "MemoryPorts", session_id: str, state: sql.State, sender: str, summary: str,
              summary_id: int | None) -> None:
    """The summary as a Timeline memory of the user's scope; the compaction stands without it."""
    store = rt.memory
    if store is None:  # memory is switched off
        return
    try:
        scope = scope_key_for(state.channel, sender)
        store.add_timeline(scope, rules.fit(summary, store.max_content_chars), MemorySource(
            session_id=session_id, message_id=summary_id, channel=state.channel, chat_id=state.chat_id,
            source_type="compaction"))
    except Exception as exc:  # MemoryRejected (no sender), a database hiccup: logged, not fatal
        log.warning("compaction of %s: the Timeline entry was not stored (%s)", session_id, exc)


def active_history(rt: "MemoryPorts", session_id: str) -> list[ChatMessage]:
    """The session's active history as stored now (after a compaction), chains repaired."""
    with rt.db.connect() as conn:
        return messages.load_history(conn, session_id)


def previous_context(rt: "MemoryPorts", channel: str, sender: str, limit: int = 3) -> ChatMessage | None:
    """`[Previous Context]`: the user scope's newest Timeline entries, oldest first (None if none)."""
    if rt.memory is None:
        return None
    try:
        entries = rt.memory.list(scope_key_for(channel, sender), category="timeline", limit=limit)
    except Exception as exc:
        log.warning("could not read Timeline entries for [Previous Context] (%s)", exc)
        return None
    return rules.previous_context([m.content for m in reversed(entries)])
