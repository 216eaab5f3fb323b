"""Overhead per turn: end-to-end time of a tool-using turn over /ws minus the same two model calls
made directly with the openai SDK (streaming, same fake LLM, same request bodies), in the same run.

Each iteration: one PicoBot turn (model call -> calculator tool -> model call -> text), then the two
request bodies PicoBot sent are replayed verbatim with the SDK. Targets: p50 overhead <= 15 ms,
p99 overhead <= 50 ms.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from scripts.bench.common import (
    Bench, Result, log, main, p50_p99, read_trace, running_stack, timed_turn, trace_timeline,
)

NAME = "overhead"
MARK = "BENCH-OVERHEAD"
TOOL_RESPONSE = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}
TEXT_RESPONSE = {"content": "The answer is 2."}

TARGET_P50_MS = 15.0
TARGET_P99_MS = 50.0


class DirectClient:
    """The baseline: the same request bodies through the openai SDK, streamed and parsed minimally.

    Posted the way PicoBot posts them (the SDK's client and stream parsing, without the request
    transform of `chat.completions.create`, which only re-walks bodies that are JSON already), so
    the difference is PicoBot's own work and not a cheaper or dearer way to call the SDK.
    """

    def __init__(self, base_url: str):
        import openai
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        self.sdk = openai.OpenAI(base_url=base_url, api_key="sk-bench-direct", max_retries=0, timeout=30)
        self._types = (ChatCompletion, openai.Stream[ChatCompletionChunk])

    def call(self, body: dict[str, Any]) -> tuple[float, float]:
        """One streamed call; returns its (start, end) as time.time() stamps."""
        cast_to, stream_cls = self._types
        started = time.time()
        text: list[str] = []
        args: dict[int, str] = {}
        stream = self.sdk.post("/chat/completions", body=body, cast_to=cast_to, stream=True, stream_cls=stream_cls)
        for chunk in stream:
            for choice in chunk.choices[:1]:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                for call in delta.tool_calls or []:
                    args[call.index] = args.get(call.index, "") + (call.function.arguments or "")
        for raw in args.values():
            json.loads(raw)
        return started, time.time()


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--turns", type=int, default=200, help="measured turns (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="unmeasured turns first (default 20)")
    p.add_argument("--sessions", type=int, default=5, help="sessions the turns rotate over (default 5)")
    p.add_argument("--trace", action="store_true",
                   help="run web and worker with timers around the turn path and print the median timeline "
                        "of a turn (the timers add a little overhead of their own)")


def run(args: argparse.Namespace) -> Result:
    trace_dir = None
    if args.trace:
        import tempfile

        trace_dir = Path(tempfile.mkdtemp(prefix="picobot-bench-trace-"))
    with running_stack(NAME, keep=args.keep, trace_dir=trace_dir) as bench:
        res = measure(bench, args.turns, args.warmup, args.sessions)
        if trace_dir is not None:
            time.sleep(1.5)  # the traced processes flush every 0.5 s
            turns = [(s["sent"], s["completed"], [("client: sent", s["sent"]), ("client: accepted frame", s["accepted"]),
                      *[(f"fake LLM: model request {k + 1} arrives", t) for k, t in enumerate(s["requests"])],
                      ("client: turn_completed", s["completed"])]) for s in res.raw["stamps"]]
            res.details = "\ntrace of a turn (web/worker timers; fake LLM and client stamps):\n" + \
                trace_timeline(read_trace(trace_dir), turns)
            if not args.keep:
                shutil.rmtree(trace_dir, ignore_errors=True)
        return res


def measure(bench: Bench, turns: int, warmup: int, sessions: int) -> Result:
    llm = bench.llm
    direct = DirectClient(llm.openai_url)
    clients = [bench.client(f"bench-oh-{i}") for i in range(sessions)]
    rows: list[dict[str, float]] = []
    stamps: list[dict[str, Any]] = []
    log(f"overhead: {warmup} warm-up + {turns} measured turns over {sessions} session(s)")
    for i in range(warmup + turns):
        llm.reset()  # only this turn's two requests are recorded, and the rule starts at its first response
        llm.add_rule(MARK, TOOL_RESPONSE, TEXT_RESPONSE, repeat=True)
        t = timed_turn(clients[i % sessions], f"{MARK} #{i}: what is 1+1?")
        if t.frame.get("status") != "completed" or "2" not in (t.frame.get("final_text") or ""):
            raise RuntimeError(f"unexpected turn result: {t.frame}")
        reqs = [r for r in llm.requests() if r["path"].endswith("/chat/completions")]
        if len(reqs) != 2:
            raise RuntimeError(f"expected 2 model calls in the turn, the fake saw {len(reqs)}")
        (s1, e1), (s2, e2) = direct.call(reqs[0]["body"]), direct.call(reqs[1]["body"])
        if i < warmup:
            continue
        arrived = [r["time"] for r in llm.requests() if r["path"].endswith("/chat/completions")]
        if len(arrived) != 4:
            raise RuntimeError(f"expected 4 recorded model calls, the fake has {len(arrived)}")
        p1, p2, q1, q2 = arrived  # PicoBot's two requests, then the direct ones
        stamps.append({"sent": t.sent, "accepted": t.accepted, "completed": t.completed, "requests": [p1, p2]})
        ms = 1000
        rows.append({
            "picobot_ms": t.total_ms,
            "direct_ms": ((e1 - s1) + (e2 - s2)) * ms,
            "accept_ms": (t.accepted - t.sent) * ms,
            # phases, cut where the fake LLM sees each request arrive
            "a_picobot": (p1 - t.sent) * ms, "a_direct": (q1 - s1) * ms,
            "b_picobot": (p2 - p1) * ms, "b_direct": ((e1 - q1) + (q2 - s2)) * ms,
            "c_picobot": (t.completed - p2) * ms, "c_direct": (e2 - q2) * ms,
            "updates": t.updates,
        })
    for c in clients:
        c.close()
    res = report(rows, sessions)
    res.raw["stamps"] = stamps
    return res


def report(rows: list[dict[str, float]], sessions: int) -> Result:
    col = lambda k: [r[k] for r in rows]  # noqa: E731
    med = lambda k: statistics.median(col(k))  # noqa: E731
    pb50, pb99 = p50_p99(col("picobot_ms"))
    dr50, dr99 = p50_p99(col("direct_ms"))
    ov50, ov99 = pb50 - dr50, pb99 - dr99
    res = Result(NAME)
    res.add("p50 overhead", ov50, "ms", f"<= {TARGET_P50_MS:g}", ov50 <= TARGET_P50_MS,
            f"direct SDK p50 {dr50:.1f} ms", f"{pb50 / dr50:.1f}x direct")
    res.add("p99 overhead", ov99, "ms", f"<= {TARGET_P99_MS:g}", ov99 <= TARGET_P99_MS,
            f"direct SDK p99 {dr99:.1f} ms", f"{pb99 / dr99:.1f}x direct")
    res.add("p50 PicoBot turn (raw)", pb50, "ms")
    res.add("p99 PicoBot turn (raw)", pb99, "ms")
    res.add("p50 direct 2 calls (raw)", dr50, "ms")
    res.add("p99 direct 2 calls (raw)", dr99, "ms")
    # Where the time goes: phases cut where the fake LLM sees a model request arrive (medians)
    def phase(key: str, what: str) -> str:
        pb, dr = med(f"{key}_picobot"), med(f"{key}_direct")
        return f"  {what:44s} PicoBot {pb:6.1f}  direct {dr:6.1f}  overhead {pb - dr:6.1f} ms"

    res.notes += [
        f"{len(rows)} turns over {sessions} session(s); each turn = 2 model calls + 1 calculator call",
        "phases (medians; cut where the fake LLM sees each model request arrive):",
        phase("a", "send -> 1st model request arrives"),
        phase("b", "1st -> 2nd model request arrives"),
        phase("c", "2nd model request arrives -> turn_completed"),
        f"  send -> accepted frame {med('accept_ms'):.1f} ms; turn_updated frames per turn {med('updates'):.0f}",
        "(--trace prints the step-by-step timeline inside web and worker)",
    ]
    half = len(rows) // 2
    if half >= 10:
        first = statistics.median([r["picobot_ms"] - r["direct_ms"] for r in rows[:half]])
        last = statistics.median([r["picobot_ms"] - r["direct_ms"] for r in rows[half:]])
        res.notes.append(f"median per-turn overhead, first half {first:.1f} ms, second half {last:.1f} ms "
                         "(history grows as turns accumulate)")
    res.raw = {"rows": rows}
    return res


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
