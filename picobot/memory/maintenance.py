"""Memory maintenance: per user scope, one model pass that tidies the scope's knowledge entries.

    take the Redis lock (a second run at the same time returns "busy")
    -> scopes whose entries changed since their last good pass, longest-waiting first, at most
       `memory.maintenance_max_scopes_per_run`
    -> per scope: its newest `memory.maintenance_max_entries_per_scope` knowledge entries -> one
       call to the default agent's provider and model, cancelled after
       `providers.<name>.memory_maintenance_timeout_secs` -> a strict JSON plan (maintenance_plan)
       -> one transaction: merges and deletions (`source_type = memory_maintenance`), the
       scope's summary, and the fingerprint of its entries as they are now
    -> every scope's summary into AGENT.md's managed block, one section per scope.

Bounded and idempotent: one model call per due scope per run, no retry inside a run, and a scope
whose entries did not change since its last good pass costs nothing. A failed pass (no answer, bad
JSON, an invalid plan) changes no memory; its error is kept in `memory_maintenance_state` and the
scope is due again next run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from picobot.agent.context import write_memory_summary
from picobot.agent.managed_block import scope_section
from picobot.agent.metered import metered
from picobot.agent.stream import pump
from picobot.config.schema import ResolvedAgent
from picobot.coord import Lease
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import text_of
from picobot.errors import (ConfigError, MemoryRejected, ModelCallRefused, ProviderError, ProviderUnavailable,
                            TurnCancelled)
from picobot.memory import keys, maintenance_plan as plans
from picobot.memory.model import MAX_KEY, MAX_NAMESPACE, Memory, clean_text
from picobot.plugins.types import StageContext
from picobot.providers.base import ChatRequest, Completed
from picobot.storage import memory_maintenance as sql
from picobot.threadpool import watchdog

if TYPE_CHECKING:
    from picobot.memory.store import MemoryStore
    from picobot.memory.ports import MemoryPorts

log = logging.getLogger("picobot.memory.maintenance")

LOCK_KEY = keys.MAINTENANCE_LOCK
LOCK_MARGIN_SECS = 60  # beyond one scope's model call: reading, writing, AGENT.md
IDLE_MARGIN_SECS = 5  # the stream's idle limit past the maintenance timeout, which the watchdog enforces
PAGE = 100  # MemoryStore.list's largest page
BLOCK_HEADER = ("## What PicoBot remembers about its users\n\n"
                "Kept by memory maintenance from the long-term memories; edits here are replaced on its next run.")


@dataclass
class ScopeResult:
    scope_key: str
    status: str  # maintained | failed
    merged: int = 0  # entries folded into merged ones
    deleted: int = 0  # low-value entries deleted
    conflicts: int = 0
    error: str = ""


@dataclass
class RunReport:
    status: str  # done | busy (another run holds the lock) | disabled | no_model
    scopes: list[ScopeResult] = field(default_factory=list)
    agent_md_rewritten: bool = False
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "agent_md_rewritten": self.agent_md_rewritten, "error": self.error,
                "scopes": [vars(s) for s in self.scopes]}


def run_maintenance(rt: "MemoryPorts") -> RunReport:
    """One maintenance run over the due scopes, under the run lock; the Celery task and the CLI call this."""
    if rt.memory is None:
        return RunReport("disabled", error="memory.enabled is false")
    try:
        resolved = rt.config.agent("default")
    except ConfigError as exc:
        log.warning("memory maintenance: no model to run it with (%s)", exc)
        return RunReport("no_model", error=str(exc))
    timeout = resolved.provider.memory_maintenance_timeout_secs
    lock = Lease(rt.redis, LOCK_KEY, timeout + LOCK_MARGIN_SECS, retake=True)
    if not lock.acquire():
        log.info("memory maintenance: another run holds the lock; not starting a second one")
        return RunReport("busy")
    try:
        report = _run_locked(rt, resolved, lock)
    finally:
        lock.release()
    failed = sum(1 for s in report.scopes if s.status == "failed")
    log.info("memory maintenance: %d scope(s) processed, %d failed, AGENT.md %s", len(report.scopes), failed,
             "rewritten" if report.agent_md_rewritten else "unchanged")
    return report


def _run_locked(rt: "MemoryPorts", resolved: ResolvedAgent, lock: Lease) -> RunReport:
    cfg = rt.config.memory
    with rt.db.connect() as conn:
        due = sql.due_scopes(conn, cfg.maintenance_max_scopes_per_run)
    report = RunReport("done")
    for scope in due:
        if not lock.renew():  # someone else holds it now: let them; never two runs at once
            log.warning("memory maintenance: lost the run lock; stopping before scope %s", scope)
            break
        report.scopes.append(maintain_scope(rt, resolved, scope))
    report.agent_md_rewritten = _write_agent_md(rt)
    return report


def maintain_scope(rt: "MemoryPorts", resolved: ResolvedAgent, scope_key: str) -> ScopeResult:
    """One pass over one scope; failures are recorded, never raised."""
    cfg = rt.config.memory
    assert rt.memory is not None
    entries = _entries(rt.memory, scope_key, cfg.maintenance_max_entries_per_scope)
    messages, shown = plans.prompt(scope_key, entries)
    try:
        plan = plans.parse(_ask(rt, resolved, messages, _stage(scope_key)), shown, cfg.maintenance_summary_max_chars)
        merges = [_merge_write(m, rt.memory.max_content_chars) for m in plan.merges]
        return _apply(rt, scope_key, shown, plan, merges)
    except (ProviderError, plans.InvalidPlan, MemoryRejected, sql.StalePlan, ModelCallRefused) as exc:
        return _failed(rt, scope_key, _why(exc))


def _stage(scope_key: str) -> StageContext:
    """Whom a scope's maintenance call is charged to (budgets): the user of the scope, no dialog."""
    channel, _, sender = scope_key.partition(":")
    return StageContext("", channel, "", sender, "")


def _entries(store: "MemoryStore", scope_key: str, cap: int) -> list[Memory]:
    """The scope's newest knowledge entries, at most `cap` (a bounded number of pages)."""
    out: list[Memory] = []
    while len(out) < cap:
        page = store.list(scope_key, category="knowledge", limit=min(PAGE, cap - len(out)), offset=len(out))
        out += page
        if len(page) < PAGE:
            break
    return out[:cap]


def _ask(rt: "MemoryPorts", resolved: ResolvedAgent, messages: list[Any], stage: StageContext) -> str:
    """The model's answer text; ProviderError when it fails or takes longer than the maintenance timeout."""
    timeout = resolved.provider.memory_maintenance_timeout_secs
    request = ChatRequest(model=resolved.model.model_id, messages=messages, temperature=resolved.model.temperature,
                          max_tokens=resolved.model.max_tokens, options=dict(resolved.model.options))
    cancel = CancelToken()
    disarm = watchdog().arm(timeout, lambda: cancel.cancel("timeout"))
    started = time.monotonic()
    late = ProviderUnavailable(f"the model did not answer within {timeout:g} s (providers.{resolved.provider_key}."
                               "memory_maintenance_timeout_secs)")
    try:
        with metered(rt.plugins, stage, resolved.provider_key, request, "maintenance") as watch:
            # the stream's own idle limit sits past the timeout: the watchdog's cancel, which names the setting,
            # is what ends a silent model (a tie between the two under load reads as the timeout below)
            for event in pump(rt.provider(resolved.provider_key).stream(request), cancel, timeout + IDLE_MARGIN_SECS):
                if isinstance(event, Completed):
                    watch.usage, watch.finish_reason = event.usage, event.stop_reason
                    return text_of(event.message.content)
    except TurnCancelled:
        raise late from None
    except ProviderError:
        if cancel.cancelled or time.monotonic() - started >= timeout:
            raise late from None
        raise
    finally:
        disarm()
    raise ProviderUnavailable("the model's answer ended without a complete message")


def _merge_write(merge: plans.Merge, max_chars: int) -> sql.MergeWrite:
    return sql.MergeWrite(ids=merge.ids, namespace=clean_text(merge.namespace, "merges.namespace", MAX_NAMESPACE),
                          key=clean_text(merge.key, "merges.key", MAX_KEY),
                          content=clean_text(merge.content, "merges.content", max_chars),
                          importance=merge.importance)


def _apply(rt: "MemoryPorts", scope_key: str, shown: plans.Shown, plan: plans.Plan,
           merges: list[sql.MergeWrite]) -> ScopeResult:
    seen = {i: m.updated_at for i, m in shown.entries.items()}
    conflicts = [{"ids": c.ids, "note": _plain(c.note)} for c in plan.conflicts]
    merged = len({i for m in merges for i in m.ids}) - len(merges)
    deleted = len(set(plan.low_value))
    report = {"classified": plans.class_counts(plan), "merged": merged, "deleted": deleted,
              "conflicts": conflicts}
    with rt.db.begin() as conn:  # StalePlan inside rolls all of it back
        sql.apply_plan(conn, scope_key, seen, merges, plan.low_value)
        sql.save_pass(conn, scope_key, sql.fingerprint(conn, scope_key), _summary(plan, conflicts), report)
    log.info("memory maintenance of %s: %d merged away, %d deleted, %d conflict(s)", scope_key, merged,
             deleted, len(conflicts))
    return ScopeResult(scope_key, "maintained", merged, deleted, len(conflicts))


def _summary(plan: plans.Plan, conflicts: list[dict[str, Any]]) -> str:
    text = _plain(plan.managed_markdown).strip()
    if conflicts:
        notes = "\n".join(f"- {c['note']}" for c in conflicts)
        text = f"{text}\n\nConflicting memories (ask the user which is right):\n{notes}".strip()
    return text


def _plain(text: str) -> str:
    """Text fit for a file and a database: no NUL, no lone surrogates (JSON can carry both)."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def _failed(rt: "MemoryPorts", scope_key: str, why: str) -> ScopeResult:
    log.warning("memory maintenance of %s failed: %s; nothing was changed", scope_key, why)
    with rt.db.begin() as conn:
        sql.save_error(conn, scope_key, why)
    return ScopeResult(scope_key, "failed", error=why)


def _why(exc: Exception) -> str:
    if isinstance(exc, (plans.InvalidPlan, MemoryRejected)):
        return f"the model's plan is invalid: {exc}"
    return str(exc)


def _write_agent_md(rt: "MemoryPorts") -> bool:
    """All scopes' summaries into AGENT.md's managed block (scopes with no entries left drop out)."""
    with rt.db.connect() as conn:
        live = sql.fingerprints(conn)
        states = sql.states(conn)
    sections = [scope_section(scope, states[scope].summary) for scope in sorted(states)
                if scope in live and states[scope].summary.strip()]
    body = "\n".join([BLOCK_HEADER, "", *sections]) if sections else ""
    return write_memory_summary(rt.config.home, body)
