"""Concurrency: 100 sessions (100 /ws clients, different chat ids) send at once; each turn is one
model call that takes 2 s. Ideal throughput is 100 turns / 2 s = 50 turns/s; target >= 0.9 of it.

As many worker processes as `picobot up` runs here (`--workers`, default one per core; each
`-P threads -c 200`, all on one host). Baseline in the same run: the same 100 calls made at once
directly with the openai SDK (100 threads) against the same fake LLM.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from picobot.cli.processes import worker_count
from scripts.bench.common import (
    Bench, CpuSampler, FakeLLMProcess, Result, WsClient, log, main, percentile, process_tree, read_trace, running_stack, timed_turn,
    trace_summary,
)

NAME = "concurrency"
MARK = "BENCH-CONC"
TARGET_RATIO = 0.9
TICK_MS = 1000 // os.sysconf("SC_CLK_TCK")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sessions", type=int, default=100, help="concurrent sessions (default 100)")
    p.add_argument("--delay-ms", type=int, default=2000, help="model call duration (default 2000)")
    p.add_argument("--rounds", type=int, default=3, help="measured rounds after one warm-up round (default 3)")
    p.add_argument("--worker-concurrency", type=int, default=200, help="threads per worker process (default 200)")
    p.add_argument("--workers", type=int, default=worker_count(),
                   help=f"worker processes (default {worker_count()}: what `picobot up` runs on this machine, "
                        "$PICOBOT_WORKERS or one per core)")
    p.add_argument("--trace", action="store_true",
                   help="run web and worker with timers around the turn path and print, per step, how long it "
                        "took during the measured rounds (e.g. SQL BEGIN = waiting for SQLite's write lock)")


def run(args: argparse.Namespace) -> Result:
    trace_dir = Path(tempfile.mkdtemp(prefix="picobot-bench-trace-")) if args.trace else None
    with running_stack(NAME, worker_concurrency=args.worker_concurrency, keep=args.keep,
                       trace_dir=trace_dir, workers=args.workers) as bench:
        res = measure(bench, args.sessions, args.delay_ms, args.rounds)
        res.notes.append(f"{args.workers} worker process{'es' if args.workers > 1 else ''} "
                         f"x {args.worker_concurrency} threads")
        res.raw["workers"] = args.workers
        if trace_dir is not None:
            time.sleep(1.5)  # the traced processes flush every 0.5 s
            res.details = "\nsteps during the measured rounds (web/worker timers), by CPU:\n" + \
                trace_summary(read_trace(trace_dir), res.raw["windows"])
            if not args.keep:
                shutil.rmtree(trace_dir, ignore_errors=True)
        return res


def _round(clients: list[WsClient], label: str) -> tuple[float, list[float], float, float, float]:
    """All clients send at once.

    Returns (seconds from first send to last completion, per-turn ms, first send time, last accepted
    time, last completion time)."""
    barrier = threading.Barrier(len(clients))
    sent: list[float] = [0.0] * len(clients)
    accepted: list[float] = [0.0] * len(clients)
    done: list[float] = [0.0] * len(clients)
    errors: list[BaseException] = []

    def one(i: int, c: WsClient) -> None:
        try:
            barrier.wait(timeout=60)
            t = timed_turn(c, f"{MARK} {label} #{i}", timeout=120)
            if t.frame.get("status") != "completed":
                raise RuntimeError(f"turn ended {t.frame.get('status')}: {t.frame.get('error')}")
            sent[i], accepted[i], done[i] = t.sent, t.accepted, t.completed
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, c), daemon=True) for i, c in enumerate(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(clients)} turns failed; first: {errors[0]!r}")
    return (max(done) - min(sent), [(d - s) * 1000 for s, d in zip(sent, done)], min(sent), max(accepted),
            max(done))


def _direct_round(base_url: str, n: int) -> tuple[float, float]:
    """n concurrent streamed calls straight to the fake; (seconds from first start to last end, first start)."""
    import openai

    sdk = openai.OpenAI(base_url=base_url, api_key="sk-bench-direct", max_retries=0, timeout=60)
    barrier = threading.Barrier(n)
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        barrier.wait(timeout=60)
        started = time.time()
        for _ in sdk.chat.completions.create(model="fake-model", stream=True,
                                             messages=[{"role": "user", "content": f"{MARK} direct #{i}"}]):
            pass
        with lock:
            spans.append((started, time.time()))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    sdk.close()
    if len(spans) != n:
        raise RuntimeError(f"only {len(spans)} of {n} direct calls finished")
    return max(e for _, e in spans) - min(s for s, _ in spans), min(s for s, _ in spans)


def _process_groups(bench: Bench) -> dict[str, list[int]]:
    """The processes whose CPU the rounds share the cores with, by role."""
    groups = {"workers": bench.worker_pids(), "web": bench.web_pids(), "fake LLM": [bench.llm.pid],
              "Redis": [bench.stack.redis_proc.pid], "benchmark (the clients)": [os.getpid()]}
    if "beat" in bench.stack.procs:
        groups["beat"] = process_tree(bench.stack.procs["beat"].pid)
    return groups


def _call_times(llm: FakeLLMProcess) -> list[float]:
    """When each model call of the round reached the fake LLM, in order."""
    return sorted(q["time"] for q in llm.requests() if q["path"].endswith("/chat/completions"))


def _before_last_call(sampler: CpuSampler, start: float, calls: list[float]) -> dict[str, float]:
    """Each group's CPU, the machine's, and the window from `start` to the last model call's arrival."""
    by_group, machine = sampler.between(start, calls[-1])
    return {**by_group, "machine": machine, "window": calls[-1] - start}


def measure(bench: Bench, sessions: int, delay_ms: int, rounds: int) -> Result:
    llm = bench.llm
    rule = {"content": "ok, done.", "delay_ms": delay_ms}
    llm.add_rule(MARK, rule, repeat=True)
    log(f"concurrency: opening {sessions} sockets")
    clients = [bench.client(f"bench-cc-{i}") for i in range(sessions)]
    ideal = sessions / (delay_ms / 1000)
    log("concurrency: warm-up round")
    _round(clients, "warm-up")
    elapsed: list[float] = []
    latencies: list[float] = []
    phases: list[dict[str, float]] = []
    windows: list[tuple[float, float]] = []
    before_calls: list[dict[str, float]] = []
    for r in range(rounds):
        llm.reset()  # record only this round's model calls
        llm.add_rule(MARK, rule, repeat=True)
        with CpuSampler(_process_groups(bench)) as sampler:
            secs, lat, first_sent, last_accepted, last_done = _round(clients, f"r{r}")
        calls = _call_times(llm)
        # the CPU every process spent until the last model call went out: what that call waited for
        before_calls.append(_before_last_call(sampler, first_sent, calls))
        phases.append({
            "all_accepted_s": last_accepted - first_sent,
            "first_call_s": calls[0] - first_sent,
            "all_calls_started_s": calls[-1] - first_sent,
            "last_call_end_to_last_done_s": last_done - (calls[-1] + delay_ms / 1000),
            "model_calls": len(calls),
        })
        windows.append((first_sent, last_done))
        elapsed.append(secs)
        latencies += lat
        log(f"concurrency: round {r + 1}: {sessions} turns in {secs:.2f} s = {sessions / secs:.1f} turns/s")
    direct: list[float] = []
    direct_before: list[dict[str, float]] = []
    for _ in range(2):
        llm.reset()
        llm.add_rule(MARK, rule, repeat=True)
        with CpuSampler(_process_groups(bench)) as sampler:
            secs, first_start = _direct_round(llm.openai_url, sessions)
        direct_before.append(_before_last_call(sampler, first_start, _call_times(llm)))
        direct.append(secs)
    for c in clients:
        c.close()

    secs = statistics.median(elapsed)
    tput = sessions / secs
    direct_tput = sessions / min(direct)
    res = Result(NAME)
    res.add("throughput vs ideal", tput / ideal, "x", f">= {TARGET_RATIO}", tput / ideal >= TARGET_RATIO,
            f"ideal {ideal:.0f} turns/s", f"{tput / ideal:.2f} of ideal")
    res.add("throughput (median round)", tput, "turns/s", "", None,
            f"direct SDK {direct_tput:.1f} calls/s", f"{tput / direct_tput:.2f} of direct")
    res.add("worst round", sessions / max(elapsed), "turns/s")
    res.add("turn latency p50", percentile(latencies, 50), "ms", "", None, f"model call {delay_ms} ms",
            f"+{percentile(latencies, 50) - delay_ms:.0f} ms")
    res.add("turn latency p99", percentile(latencies, 99), "ms", "", None, f"model call {delay_ms} ms",
            f"+{percentile(latencies, 99) - delay_ms:.0f} ms")
    res.notes.append(f"{sessions} sessions x {rounds} rounds (after 1 warm-up); round times "
                     + ", ".join(f"{e:.2f} s" for e in elapsed)
                     + "; direct SDK rounds " + ", ".join(f"{d:.2f} s" for d in direct))
    med = lambda k: statistics.median(p[k] for p in phases)  # noqa: E731
    res.notes += [
        "where the time goes (median round; t=0 is the first send; the fake LLM stamps each call's arrival):",
        f"  all {sessions} messages accepted by   {med('all_accepted_s'):6.2f} s",
        f"  first model call arrives at      {med('first_call_s'):6.2f} s",
        f"  last model call arrives at       {med('all_calls_started_s'):6.2f} s   (ideal: ~0)",
        f"  last turn_completed, after the last model call ended  {med('last_call_end_to_last_done_s'):6.2f} s",
    ]
    res.notes += _cpu_before_calls(before_calls, sessions, "PicoBot")
    res.notes += _cpu_before_calls(direct_before, sessions, "the direct SDK (the benchmark process makes the calls)")
    res.raw = {"elapsed": elapsed, "direct": direct, "latencies_ms": latencies, "phases": phases,
               "windows": windows, "cpu_before_last_call": before_calls}
    return res


def _cpu_before_calls(rounds: list[dict[str, float]], sessions: int, label: str) -> list[str]:
    """Where the CPU went from the first send until the last model call arrived (median round), and the
    earliest that call could have left had every process's CPU been spread over all cores."""
    cores = os.cpu_count() or 1
    med = lambda k: statistics.median(r[k] for r in rounds)  # noqa: E731
    groups = [k for k in rounds[0] if k not in ("machine", "window")]
    window, machine = med("window"), med("machine")
    lines = [f"{label}: CPU from the first send until the last model call arrived (median round, {window:.2f} s; "
             f"/proc counts in ticks of {TICK_MS} ms):"]
    for name in sorted(groups, key=med, reverse=True):
        if med(name) == 0:
            continue
        lines.append(f"  {name:26s} {med(name) * 1000:6.0f} ms  = {med(name) * 1000 / sessions:5.2f} ms a turn")
    lines.append(f"  the whole machine          {machine * 1000:6.0f} ms  = {machine / (window * cores) * 100:3.0f} % of "
                 f"its {cores} cores over that window; on all {cores} cores at once that CPU alone takes "
                 f"{machine / cores:.2f} s")
    return lines


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
