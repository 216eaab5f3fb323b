"""Budgets on the plugin SDK: a gate before each model call, the ledger and the counters after it.

`picobot_model_call_gate` estimates the call (input characters / 4 plus its max_tokens), reserves
that on every counter the call falls under (counters.py) and refuses it with a `budget_exceeded`
Refusal when one would go over. `picobot_model_call`, in the same thread after the call, writes the
call's `usage_records` row (always, limits or not) and settles the reservation with what it used.

With no limit configured nothing reads the ledger while a turn runs, so a turn's own calls are held
in memory and written in the transaction that commits the turn (`picobot_turn_committed`), or in one
of their own when the turn ends without that commit (`picobot_turn_ended`): one SQL write
transaction per turn instead of one more per model call. A worker killed mid-turn loses the rows of
that turn's calls. With a limit set every row is written at once, as the counters are re-seeded
from the ledger after a Redis flush.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import redis

from picobot.budgets import scopes
from picobot.budgets.counters import Counter, Counters, Over, Reservation
from picobot.budgets.prices import PriceTable, request_tokens
from picobot.plugins import hookimpl
from picobot.plugins.types import Refusal
from picobot.storage import usage

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.budgets")

BUDGET_EXCEEDED = "budget_exceeded"  # the turn status of a refused call (storage TurnStatus)


class BudgetsPlugin:
    def __init__(self) -> None:
        self._ports: "Ports | None" = None
        self._prices: PriceTable | None = None
        self._counters: Counters | None = None  # None: no limit configured, only the ledger is written
        self._local = threading.local()  # the reservation of the call under way in this thread
        self._held: dict[str, list[tuple[usage.Call, float]]] = {}  # turn id -> its calls' rows, not yet written
        self._held_lock = threading.Lock()

    def bind(self, ports: "Ports") -> None:
        """Take the process's ports (once): the ledger's database, the counters' Redis, the limits."""
        if self._ports is None:
            self._prices = PriceTable(ports.config.prices)
            self._counters = Counters(ports.redis) if ports.config.budgets.any_limit() else None
            self._ports = ports

    @hookimpl
    def picobot_started(self, ports: "Ports") -> None:
        self.bind(ports)

    @hookimpl
    def picobot_model_call_gate(self, ctx: Any, request: Any) -> Refusal | None:
        self._local.pending = None
        if self._counters is None or self._ports is None or self._prices is None:
            return None
        budgets, now = self._ports.config.budgets, time.time()
        found = scopes.counters(budgets, self._ports.db, scopes.who(ctx), now)
        if not found:
            return None
        estimate_in = request_tokens(request.messages, request.tools_chars)
        estimate_out = request.max_tokens or budgets.output_estimate_tokens
        cost = self._prices.cost(request.provider, request.model, estimate_in, estimate_out)
        answer = self._reserve(found, estimate_in + estimate_out, cost)
        if isinstance(answer, Over):
            log.info("session %s: model call refused by %s", ctx.session_id, answer.counter.name)
            return Refusal(BUDGET_EXCEEDED, refusal_text(answer, estimate_in + estimate_out, cost, now))
        self._local.pending = answer
        return None

    def _reserve(self, found: list[Counter], tokens: int, cost: float) -> Reservation | Over | None:
        assert self._counters is not None
        try:
            return self._counters.reserve(found, tokens, cost)
        except redis.RedisError as exc:  # no counters: check against the ledger alone (no reservation)
            log.warning("budget counters unavailable (%s); checking against the ledger", type(exc).__name__)
            return ledger_check(found, tokens, cost)

    @hookimpl
    def picobot_model_call(self, ctx: Any, call: Any) -> None:
        reservation: Reservation | None = getattr(self._local, "pending", None)
        self._local.pending = None
        if self._ports is None or self._prices is None:
            return
        cost = self._prices.cost(call.provider, call.model, call.input_tokens, call.output_tokens,
                                 call.cached_input_tokens)
        w = scopes.who(ctx)
        run_id = getattr(ctx, "run_id", "") or None
        kind = getattr(call, "kind", "") or "turn"
        if kind == "turn" and run_id:  # a sub-agent run's call, made by the loop as a turn's is
            kind = "subagent"
        row = usage.Call(kind, w.session_id or None, w.turn_id or None, run_id, w.job_id,
                         ctx.channel, w.user, getattr(ctx, "agent", "") or "", call.provider, call.model,
                         call.input_tokens, call.output_tokens, call.cached_input_tokens, cost)
        try:
            if kind == "turn" and w.turn_id and self._counters is None:  # written with the turn's commit
                with self._held_lock:
                    self._held.setdefault(w.turn_id, []).append((row, time.time()))
                return
            with self._ports.db.begin() as conn:
                usage.record(conn, row)
        finally:  # settled even when the row could not be written: the reservation must not stay
            if reservation is not None and self._counters is not None:
                self._settle(reservation, call.input_tokens + call.output_tokens, cost)

    @hookimpl
    def picobot_turn_committed(self, conn: Any, turn: Any, ports: Any) -> Any:
        with self._held_lock:
            rows = list(self._held.get(turn.turn_id, ()))
        if not rows:
            return None
        for row, at in rows:
            usage.record(conn, row, now=at)
        return lambda: self._release(turn.turn_id)  # after the commit: written; a rollback keeps them held

    @hookimpl
    def picobot_turn_ended(self, ctx: Any, status: str) -> None:
        """The turn is over: rows its commit did not take (failed, interrupted, fenced out) go in now."""
        rows = self._release(ctx.turn_id)
        if rows and self._ports is not None:
            with self._ports.db.begin() as conn:
                for row, at in rows:
                    usage.record(conn, row, now=at)

    def _release(self, turn_id: str) -> list[tuple[usage.Call, float]]:
        with self._held_lock:
            return self._held.pop(turn_id, [])

    def _settle(self, reservation: Reservation, tokens: int, cost: float) -> None:
        assert self._counters is not None
        try:
            self._counters.settle(reservation, tokens, cost)
        except redis.RedisError as exc:  # the counters are re-seeded from the ledger once Redis is back
            log.warning("budget counters not settled (%s)", type(exc).__name__)


def ledger_check(found: list[Counter], tokens: int, cost: float) -> Over | None:
    """Without Redis: the first counter the call would push over, from the ledger's sums."""
    for counter in found:
        used_tokens, used_cost = counter.seed()
        if counter.tokens is not None and used_tokens + tokens > counter.tokens:
            return Over(counter, "tokens", used_tokens)
        if counter.cost_usd is not None and used_cost + cost > counter.cost_usd:
            return Over(counter, "cost_usd", used_cost)
    return None


def refusal_text(over: Over, tokens: int, cost: float, now: float) -> str:
    """Which limit, its use, the limit, what the call needed and when it resets."""
    counter, key = over.counter, scopes.limit_key(over.counter, over.unit)
    if over.unit == "tokens":
        what = f"{int(over.used):,} of {counter.tokens:,} tokens used; this call needs about {tokens:,}"
    else:
        what = f"${over.used:.4f} of ${counter.cost_usd:.4f} used; this call needs about ${cost:.4f}"
    return f"Budget exceeded: {key} ({what}); {scopes.resets(counter, now)}."
