"""The process's own metrics, in its own prometheus_client registry (never the global one).

Counters and histograms only move in the process where things happen: inputs in the web process,
turns, model and tool calls in the workers. Each worker publishes its samples (publish.py); the
gateway's /metrics serves its own and every live worker's with a `process` label (gateway.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector

from picobot.plugins.types import ModelCallView, ToolCallRecord
from picobot.storage.models import TurnStatus

TURN_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
FIRST_TOKEN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
CALL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)


@dataclass
class _Turn:
    channel: str
    since: float  # epoch seconds: its input's intake (else the turn's start)
    first_seen: bool = False


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.inputs = Counter("picobot_inputs", "Inputs the gateway stored or refused, by channel and fate",
                              ["channel", "fate"], registry=r)
        self.turns = Counter("picobot_turns", "Turns that ended, by channel and status", ["channel", "status"],
                             registry=r)
        self.turn_seconds = Histogram("picobot_turn_duration_seconds", "From the input's intake to the end of its turn",
                                      ["channel"], buckets=TURN_BUCKETS, registry=r)
        self.first_token = Histogram("picobot_first_token_seconds",
                                     "From the input's intake to the first streamed token of its turn",
                                     ["channel"], buckets=FIRST_TOKEN_BUCKETS, registry=r)
        self.model_calls = Counter("picobot_model_calls", "Model calls, by provider (config key), model and "
                                   "outcome (ok, error, cancelled)", ["provider", "model", "outcome"], registry=r)
        self.model_seconds = Histogram("picobot_model_call_duration_seconds", "How long a model call took",
                                       ["provider", "model"], buckets=CALL_BUCKETS, registry=r)
        self.tokens = Counter("picobot_model_tokens", "Tokens of model calls, by kind: input, output, "
                              "cached (of input)", ["provider", "model", "kind"], registry=r)
        self.tool_calls = Counter("picobot_tool_calls", "Tool calls, by tool and outcome "
                                  "(ok, error, denied, timeout, cancelled)", ["tool", "outcome"], registry=r)
        self.tool_seconds = Histogram("picobot_tool_call_duration_seconds", "How long a tool call took", ["tool"],
                                      buckets=CALL_BUCKETS, registry=r)
        self.budget_refusals = Counter("picobot_budget_refusals", "Turns a budget ended (a model call that "
                                       "would cross a limit was not sent: status budget_exceeded), by channel", ["channel"], registry=r)
        ProcessCollector(namespace="picobot", registry=r)  # picobot_process_resident_memory_bytes, cpu, fds
        self._running: dict[str, _Turn] = {}
        self._lock = threading.Lock()

    def input(self, channel: str, fate: str) -> None:
        self.inputs.labels(channel, fate).inc()

    def turn_started(self, turn_id: str, channel: str, since: float) -> None:
        with self._lock:
            self._running[turn_id] = _Turn(channel, since)

    def turn_ended(self, turn_id: str, channel: str, status: str, now: float) -> None:
        with self._lock:
            turn = self._running.pop(turn_id, None)
        self.turns.labels(channel, status).inc()
        if status == TurnStatus.BUDGET_EXCEEDED:
            self.budget_refusals.labels(channel).inc()
        if turn is not None:
            self.turn_seconds.labels(channel).observe(max(0.0, now - turn.since))

    def model_call(self, turn_id: str, call: ModelCallView) -> None:
        labels = (call.provider, call.model)
        outcome = "ok" if not call.error else "cancelled" if call.error == "TurnCancelled" else "error"
        self.model_calls.labels(*labels, outcome).inc()
        self.model_seconds.labels(*labels).observe(call.duration_secs)
        for kind, n in (("input", call.input_tokens), ("output", call.output_tokens),
                        ("cached", call.cached_input_tokens)):
            if n:
                self.tokens.labels(*labels, kind).inc(n)
        if call.first_token_secs is not None:
            self._first_token(turn_id, call.started_at + call.first_token_secs)

    def _first_token(self, turn_id: str, at: float) -> None:
        with self._lock:
            turn = self._running.get(turn_id)
            if turn is None or turn.first_seen:
                return
            turn.first_seen = True
        self.first_token.labels(turn.channel).observe(max(0.0, at - turn.since))

    def tool_call(self, call: ToolCallRecord) -> None:
        self.tool_calls.labels(call.name, call.outcome).inc()
        self.tool_seconds.labels(call.name).observe(call.duration_secs)
