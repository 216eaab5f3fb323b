"""Sub-agents: what delegating costs, through a real stack (web, one worker, fake LLM process).

1. Foreground overhead: a turn that delegates to a foreground sub-agent (parent calls `task`, the
   child answers, the parent answers: three model calls) against the same work as a plain turn (three
   model calls, two rounds of a trivial tool), alternated in one run. Target: <= 20 ms added at p50.
2. Background fan-out: one turn starts 20 background sub-agents on one worker process, each making
   one 2 s model call; measured from the first run's admission to the last run's end, as recorded
   in `agent_runs`. Target: all done <= 3 s. Baseline (same run): 20 plain turns in 20 dialogs, each
   one 2 s model call, sent at once.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import sqlalchemy

from scripts.bench.common import BENCH_GATEWAY, FakeLLMProcess, Result, log, main, p50_p99, timed_turn
from tests.stack import Stack, base_config

NAME = "subagent"
TARGET_ADDED_MS = 20.0
TARGET_FANOUT_S = 3.0
FANOUT = 20
MODEL_CALL_MS = 2000


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--turns", type=int, default=30, help="turns per side for the overhead (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="unmeasured turns per side first (default 5)")


@contextmanager
def _stack() -> Iterator[tuple[Stack, FakeLLMProcess]]:
    tmp = Path(tempfile.mkdtemp(prefix="picobot-bench-subagent-"))
    llm = FakeLLMProcess(tmp / "fake_llm.log")
    stack = None
    try:
        cfg = base_config(llm.url, 0)
        cfg["gateway"].update(BENCH_GATEWAY)
        cfg["subagents"] = {"max_children_per_turn": FANOUT}
        stack = Stack(tmp, llm.url, config=cfg)
        cfg["gateway"]["port"] = stack.port
        (stack.home / "config.json").write_text(json.dumps(cfg))
        stack.start_web()
        stack.start_worker("w1", concurrency=50)
        yield stack, llm
    finally:
        if stack is not None:
            stack.stop()
        llm.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace) -> Result:
    with _stack() as (stack, llm):
        plain, sub = _overhead(stack, llm, args)
        fanout, baseline = _fanout(stack, llm)
    result = Result(NAME)
    added = p50_p99(sub)[0] - p50_p99(plain)[0]
    result.add("foreground sub-agent turn, p50", p50_p99(sub)[0], "ms", baseline=f"plain {p50_p99(plain)[0]:.1f} ms",
               ratio=f"{added:+.1f} ms")
    result.add("added by the foreground sub-agent, p50", added, "ms", target=f"<= {TARGET_ADDED_MS:g}",
               ok=added <= TARGET_ADDED_MS)
    result.add(f"{FANOUT} background sub-agents, {MODEL_CALL_MS} ms model call each: all done", round(fanout, 2),
               "s", target=f"<= {TARGET_FANOUT_S:g}", ok=fanout <= TARGET_FANOUT_S,
               baseline=f"{FANOUT} plain turns {baseline:.2f} s", ratio=f"{fanout / baseline:.2f}x")
    result.raw.update(plain_ms=plain, subagent_ms=sub, fanout_s=fanout, baseline_s=baseline)
    result.notes.append("overhead: 3 model calls on both sides (fake LLM, no delay); the sub-agent side also "
                        "admits, runs and records the run in agent_runs")
    return result


def _overhead(stack: Stack, llm: FakeLLMProcess, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    clock = {"name": "get_time", "arguments": {}}
    llm.add_rule("plainwork", {"tool_calls": [clock]}, {"tool_calls": [clock]}, {"content": "plain done"}, repeat=True)
    task = {"name": "task", "arguments": {"description": "bench", "prompt": "childwork answer"}}
    llm.add_rule("subwork", {"tool_calls": [task]}, {"content": "sub done"}, repeat=True)
    llm.add_rule("childwork", {"content": "child done"}, repeat=True)
    plain_client, sub_client = stack.client(), stack.client()
    plain: list[float] = []
    sub: list[float] = []
    for i in range(args.warmup + args.turns):
        p = timed_turn(plain_client, "plainwork").total_ms
        s = timed_turn(sub_client, "subwork").total_ms
        if i >= args.warmup:
            plain.append(p)
            sub.append(s)
    log(f"plain p50 {p50_p99(plain)[0]:.1f} ms, with a foreground sub-agent p50 {p50_p99(sub)[0]:.1f} ms")
    return plain, sub


def _fanout(stack: Stack, llm: FakeLLMProcess) -> tuple[float, float]:
    llm.reset()
    baseline = _plain_fanout(stack, llm)
    calls = [{"name": "task", "arguments": {"description": f"job {i}", "prompt": f"fanchild {i}", "background": True}}
             for i in range(FANOUT)]
    llm.add_rule("fanparent", {"tool_calls": calls}, {"content": "started"})
    llm.add_rule("fanchild", {"content": "child result", "delay_ms": MODEL_CALL_MS}, repeat=True)
    llm.add_rule("Sub-agent result", {"content": "reported"}, repeat=True)
    client = stack.client()
    timed_turn(client, "fanparent")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = _runs(stack, client.session_id)
        if len(rows) == FANOUT and all(r.finished_at for r in rows):
            break
        time.sleep(0.1)
    else:
        raise TimeoutError("the background runs did not finish within 60 s")
    assert all(r.status == "completed" for r in rows), [r.status for r in rows]
    took = max(r.finished_at for r in rows) - min(r.created_at for r in rows)
    log(f"{FANOUT} background runs done in {took:.2f} s (baseline: {FANOUT} plain turns in {baseline:.2f} s)")
    return took, baseline


def _plain_fanout(stack: Stack, llm: FakeLLMProcess) -> float:
    llm.add_rule("fanplain", {"content": "plain", "delay_ms": MODEL_CALL_MS}, repeat=True)
    clients = [stack.client() for _ in range(FANOUT)]
    started = time.monotonic()
    threads = [threading.Thread(target=timed_turn, args=(c, "fanplain")) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - started


def _runs(stack: Stack, session_id: str) -> list[Any]:
    eng = sqlalchemy.create_engine(stack.database_url)
    try:
        with eng.connect() as c:
            return list(c.exec_driver_sql("SELECT status, created_at, finished_at FROM agent_runs WHERE session_id = ?",
                                          (session_id,)).all())
    finally:
        eng.dispose()


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, doc=__doc__))
