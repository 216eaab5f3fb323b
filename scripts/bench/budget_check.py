"""Budget check: what the budgets plugin adds to each model call, next to the model call it guards.

In process, against the real Redis (127.0.0.1:6379) and a real SQLite ledger: the gate
(`picobot_model_call_gate`: scopes, the request's size estimate, one Lua check-and-reserve over
the dialog's, the user's day and month and the global day counters) on a 40-message history, and the
whole per-call cost (gate + the ledger row + the settle). Same-run baselines: one streamed call to
the fake LLM (its own process) with the same history, and a Redis PING. Target: gate p50 <= 1 ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from scripts.bench.common import FakeLLMProcess, Result, log, main

NAME = "budget_check"
TARGET_MS = 1.0


def _p50_ms(fn: Callable[[], object], n: int) -> float:
    for _ in range(10):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def run(args: argparse.Namespace) -> Result:
    import redis

    from picobot.budgets.plugin import BudgetsPlugin
    from picobot.config.schema import Config
    from picobot.budgets.keys import BUDGET_PREFIX
    from picobot.domain.messages import ChatMessage
    from picobot.plugins.types import ModelCallView, ModelRequestView, StageContext
    from picobot.providers.base import ChatRequest, Completed
    from picobot.providers.openai_provider import OpenAIProvider
    from picobot.storage.db import Database

    result = Result(NAME)
    tag = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="bench-budget-"))
    big = 10**12  # limits far out of reach: every call is let through, as in normal operation
    config = Config.model_validate({"home": str(tmp), "budgets": {
        "session": {"tokens": big}, "user": {"daily_tokens": big, "monthly_cost_usd": 1e6},
        "global": {"daily_tokens": big}}})
    db = Database(f"sqlite:///{tmp / 'picobot.db'}")
    db.migrate()
    r = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    plugin = BudgetsPlugin()
    plugin.bind(SimpleNamespace(config=config, db=db, redis=r))
    history = [ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"message {i} " + "w " * 500)
               for i in range(40)]
    ctx = StageContext(f"bench:{tag}:default", "bench", tag, tag, "turn-" + tag)
    request = ModelRequestView("default", "gpt-4o", tuple(history), 1024, 6000)
    call = ModelCallView("default", "gpt-4o", time.time(), 1.0, 0.1, 3000, 200, 0, "stop")
    llm = FakeLLMProcess()
    try:
        llm.add_rule(None, {"content": "ok"}, repeat=True)
        provider = OpenAIProvider("bench", base_url=llm.openai_url, api_key="sk-bench", timeout=10, max_retries=0)
        chat = ChatRequest(model="fake-model", messages=history)

        def model_call() -> None:
            assert any(isinstance(e, Completed) for e in provider.stream(chat))

        def gate() -> None:
            assert plugin.picobot_model_call_gate(ctx, request) is None
            plugin._local.pending and plugin._settle(plugin._local.pending, 0, 0.0)  # release, as a failed call

        def whole() -> None:
            assert plugin.picobot_model_call_gate(ctx, request) is None
            plugin.picobot_model_call(ctx, call)

        base_call = _p50_ms(model_call, args.n)
        ping = _p50_ms(r.ping, args.n * 4)
        check = _p50_ms(gate, args.n * 4)
        full = _p50_ms(whole, args.n * 4)
    finally:
        llm.stop()
        for key in r.scan_iter(BUDGET_PREFIX + "*"):
            if tag in key.decode() or key.decode().startswith(BUDGET_PREFIX + "global:"):
                r.delete(key)
        db.dispose()
    log(f"model call {base_call:.2f} ms, PING {ping:.3f} ms, gate {check:.3f} ms, gate+ledger+settle {full:.3f} ms")
    result.add("budget check before a model call (gate: estimate + Lua check-and-reserve, 4 counters), p50",
               round(check, 3), "ms", target=f"<= {TARGET_MS:g}", ok=check <= TARGET_MS,
               baseline=f"a streamed model call to the fake LLM {base_call:.2f} ms; Redis PING {ping:.3f} ms",
               ratio=f"{check / base_call:.3f}x the call, {check / ping:.1f}x a PING")
    result.add("whole per-call cost (gate + usage_records row in SQLite + settle), p50", round(full, 3), "ms",
               baseline=f"a streamed model call {base_call:.2f} ms", ratio=f"{full / base_call:.3f}x the call")
    result.raw.update(n=args.n, model_call_ms=base_call, ping_ms=ping, gate_ms=check, whole_ms=full)
    return result


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", type=int, default=200, help="measured model calls (the checks run 4x as many)")


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, _args, doc=__doc__))
