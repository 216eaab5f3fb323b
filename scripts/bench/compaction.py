"""Context compaction: the time to compact a 300-turn session, and proof that it does not slow the
session's own turns.

One stack (web + worker + beat, the fake LLM in its own process). Sessions are seeded straight into
SQL with 300 turns each (user, assistant tool call, tool result, answer).

1. Compaction time: `compact_session` in this process, on a fresh 300-turn session each time, with
   the fake LLM answering the summary call at once, so the figure is PicoBot's own work plus one
   model call: read, plan, transcript, summary call, the fenced commit, the Timeline memory.
2. Turn latency of the same 300-turn session, over /ws: first with no compaction running (the
   baseline, same run), then while a /compact of that session is running on the worker (its summary
   call held open by the fake LLM for the whole phase). The ratio is the cost a compaction puts on
   its own session's turns; the target is none beyond noise (p50 ratio <= 1.25).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from scripts.bench.common import Result, log, main, p50_p99, running_stack, timed_turn

NAME = "compaction"
TURNS = 300
REPEATS = 3
LATENCY_TURNS = 15
SUMMARY_MATCH = "Conversation to summarise"
TARGET_RATIO = 1.25
HELD_MS = 20_000


def seed(rt: Any, session_id: str, turns: int) -> None:
    """`turns` realistic turns, stored in one transaction (as turns store them, in true order)."""
    from picobot.domain.messages import ChatMessage, ToolCall
    from picobot.storage import messages

    batch: list[ChatMessage] = []
    for i in range(turns):
        call = ToolCall(f"call-{i}", "read_file", f'{{"path": "/srv/project/src/module_{i}.py"}}')
        batch += [ChatMessage(role="user", content=f"seed turn {i}: what does module_{i}.py do? " + "detail " * 8),
                  ChatMessage(role="assistant", tool_calls=[call]),
                  ChatMessage(role="tool", content=f"def handler_{i}(request):\n    return route(request)\n" * 6,
                              tool_call_id=call.id, name="read_file"),
                  ChatMessage(role="assistant", content=f"module_{i}.py routes requests to handler_{i}. " * 2)]
    with rt.db.begin() as conn:
        messages.append(conn, session_id, None, batch)


class _Queue:
    def enqueue_turn(self, session_id: str) -> None:
        pass

    def enqueue_compaction(self, session_id: str, force: bool = False) -> None:
        pass


def compaction_times(bench: Any, rt: Any) -> list[dict[str, Any]]:
    from picobot.memory.compactor import compact_session

    out = []
    bench.llm.add_rule(SUMMARY_MATCH, {"content": "The user reviewed modules 0 to 296 of /srv/project/src."},
                       repeat=True)
    for i in range(REPEATS + 1):  # the first one warms up (the jieba dictionary, the provider's connection)
        client = bench.client()
        seed(rt, client.session_id, TURNS)
        client.close()
        started = time.perf_counter()
        outcome = compact_session(rt, client.session_id, force=True)
        elapsed = (time.perf_counter() - started) * 1000
        assert outcome.status == "compacted" and not outcome.fallback, outcome
        log(f"compacted {TURNS} turns in {elapsed:.0f} ms ({outcome.summarised} messages folded)"
            + (" (warm-up, not counted)" if i == 0 else ""))
        if i:
            out.append({"ms": elapsed, "folded": outcome.summarised, "kept": outcome.kept})
    bench.llm.reset()
    return out


def turn_latencies(bench: Any, rt: Any) -> tuple[list[float], list[float]]:
    from picobot.coord import keys

    # first: the summary call's rule (its transcript contains "bench-turn" too); held open, but for less
    # than the provider's timeout, which would end the compaction with the fallback
    bench.llm.add_rule(SUMMARY_MATCH, {"content": "held summary", "delay_ms": HELD_MS})
    bench.llm.add_rule("bench-turn", {"content": "ok"}, repeat=True)
    client = bench.client()
    sid = client.session_id
    seed(rt, sid, TURNS)
    r = bench.stack.redis()
    # Baseline: the post-turn check would start a compaction of this big session; holding its lease
    # keeps one from running while the baseline is measured.
    r.set(keys.compacting(sid), "bench-baseline", ex=600)
    for i in range(3):
        timed_turn(client, f"bench-turn warm {i}")
    base = [timed_turn(client, f"bench-turn base {i}").total_ms for i in range(LATENCY_TURNS)]
    r.delete(keys.compacting(sid))
    client.command("/compact")
    deadline = time.monotonic() + 30
    while not any(SUMMARY_MATCH in str(q["body"]) for q in bench.llm.requests()):
        if time.monotonic() > deadline:
            raise RuntimeError("the compaction's summary call never reached the fake LLM")
        time.sleep(0.05)
    during = [timed_turn(client, f"bench-turn during {i}").total_ms for i in range(LATENCY_TURNS)]
    still = r.exists(keys.compacting(sid))
    client.close()
    if not still:
        raise RuntimeError("the compaction ended before the measurement did")
    return base, during


def run(args: argparse.Namespace) -> Result:
    from picobot.config.loader import load_config
    from picobot.app import build_runtime

    result = Result(NAME)
    with running_stack(NAME, worker_concurrency=20) as bench:
        rt = build_runtime(load_config(environ=bench.stack.env), _Queue())
        try:
            times = compaction_times(bench, rt)
            base, during = turn_latencies(bench, rt)
        finally:
            rt.close()
    ms = statistics.median(t["ms"] for t in times)
    folded = times[0]["folded"]
    result.add(f"compaction of a {TURNS}-turn session ({folded} messages folded; p50 of {REPEATS})", round(ms, 1),
               "ms")
    b50, b99 = p50_p99(base)
    d50, d99 = p50_p99(during)
    ratio = d50 / b50 if b50 else 0.0
    result.add("turn latency p50 while its session compacts", round(d50, 1), "ms", target=f"<= {TARGET_RATIO}x",
               ok=ratio <= TARGET_RATIO, baseline=f"no compaction {b50:.1f}", ratio=f"{ratio:.2f}x")
    result.add("turn latency p99 while its session compacts", round(d99, 1), "ms",
               baseline=f"no compaction {b99:.1f}", ratio=f"{d99 / b99 if b99 else 0:.2f}x")
    result.raw.update({"compactions": times, "latency_base_ms": base, "latency_during_ms": during})
    result.notes.append(f"{TURNS} turns = {TURNS * 4} messages; the summary call answered at once in (1), "
                        "held open for the whole phase in (2)")
    return result


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, doc=__doc__))
