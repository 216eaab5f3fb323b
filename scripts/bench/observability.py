"""Observability: what metrics and traces add to one turn, against the same turn with both off.

One turn with one tool round makes these observation calls, exactly as the core makes them
(each behind `PluginHost.has`): the intake (`picobot_input_received` and its `done`), the task's
trace context (sent and received, with tracing), `picobot_turn_started`, two `picobot_model_call`,
one `picobot_tool_call`, `picobot_turn_ended`. This runs that sequence through a real PluginHost
(the built-in capabilities registered, as in a worker) many times in process and reports the p50
per turn for: off (metrics and tracing disabled), metrics, metrics + tracing (spans made, exporter
`none`), metrics + tracing writing every span to a file (`file`, synchronous: the worst case; `otlp`
exports from a background thread). Budgets: metrics <= 0.5 ms, metrics + tracing <= 2 ms p50.
A worker's publish of its samples (every 2 s, on the heartbeat thread, never in a turn) is timed too.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from scripts.bench.common import Result, log, main

NAME = "observability"
TURNS = 2000
BUDGET_METRICS_MS = 0.5
BUDGET_TRACING_MS = 2.0


def one_turn(host: Any, ctx: Any, turn_ctx: Any, model_calls: list[Any], tool_call: Any, config: Any,
             traced: bool) -> None:
    from picobot.observability import propagation

    done = host.call("picobot_input_received", ctx=ctx, ports=None) if host.has("picobot_input_received") else []
    headers: dict[str, str] = {}
    if traced:
        propagation.inject(headers)  # the turn task's headers, sent inside the intake span
    for finish in done:
        finish(session_id=None, fate="started")  # no session: /info's Redis write is left out
    if traced:
        propagation.task_started(config, "task-1", "picobot.turn", headers)
    if host.has("picobot_turn_started"):
        host.call("picobot_turn_started", ctx=turn_ctx, queued_at=time.time())
    for call in model_calls:
        if host.has("picobot_model_call"):
            host.call("picobot_model_call", ctx=turn_ctx, call=call)
    if host.has("picobot_tool_call"):
        host.call("picobot_tool_call", ctx=turn_ctx, call=tool_call)
    if host.has("picobot_turn_ended"):
        host.call("picobot_turn_ended", ctx=turn_ctx, status="completed")
    if traced:
        propagation.task_finished("task-1", "SUCCESS")


def p50_ms(run: Callable[[], None], turns: int) -> float:
    for _ in range(200):  # warm up
        run()
    samples = []
    for _ in range(turns):
        start = time.perf_counter_ns()
        run()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(samples)


def run(args: argparse.Namespace) -> Result:
    from picobot.app import build_plugins
    from picobot.config import Config
    from picobot.observability import publish, tracing
    from picobot.plugins.types import ModelCallView, StageContext, ToolCallRecord

    result = Result(NAME)
    ctx = StageContext("", "web", "c", "owner", "")
    turn_ctx = StageContext("web:c:d", "web", "c", "owner", "t1")
    now = time.time()
    calls = [ModelCallView("default", "gpt-4o-mini", now, 1.2, 0.3, 1200, 40, 800, "tool_calls"),
             ModelCallView("default", "gpt-4o-mini", now + 2, 0.8, 0.2, 1300, 60, 1100, "stop")]
    tool = ToolCallRecord("c1", "calculator", "ok", now + 1.3, 0.001)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="picobot-bench-obs-") as raw:
        home = Path(raw)
        cases = {
            "off": ({"metrics": {"enabled": False}}, False),
            "metrics": ({}, False),
            "metrics + tracing": ({"tracing": {"enabled": True, "exporter": "none"}}, True),
            "metrics + tracing to a file": ({"tracing": {"enabled": True, "exporter": "file",
                                                         "file_path": str(home / "spans.jsonl")}}, True),
        }
        for label, (extra, traced) in cases.items():
            config = Config(home=home, **extra)
            tracing._state.clear()  # a fresh tracer per case (a process normally builds one, once)
            host = build_plugins(config, discover=False)
            figures[label] = p50_ms(lambda: one_turn(host, ctx, turn_ctx, calls, tool, config, traced), args.turns)
            if label == "metrics":
                registry = host.plugin("metrics").metrics.registry
                figures["publish"] = p50_ms(lambda: publish.snapshot(registry), 200)
            host.close()
    off = figures["off"]
    log(", ".join(f"{k} {v * 1000:.1f} µs" for k, v in figures.items()))
    for label, budget in (("metrics", BUDGET_METRICS_MS), ("metrics + tracing", BUDGET_TRACING_MS),
                          ("metrics + tracing to a file", BUDGET_TRACING_MS)):
        value = figures[label]
        result.add(f"observation per turn, {label} (p50)", round(value * 1000, 1), "µs",
                   target=f"<= {budget * 1000:g}", ok=value <= budget,
                   baseline=f"off {off * 1000:.1f} µs", ratio=f"{value / off:.0f}x")
    result.add("observation per turn, off (p50)", round(off * 1000, 2), "µs", target="~0", ok=off <= 0.01)
    result.add("a worker's sample snapshot (every 2 s, heartbeat thread; p50)", round(figures["publish"] * 1000, 1),
               "µs")
    result.raw.update({**{k.replace(" ", "_"): v for k, v in figures.items()}, "turns": args.turns})
    return result


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=TURNS, help=f"turns measured per case (default {TURNS})")


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, _args, doc=__doc__))
