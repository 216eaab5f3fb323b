"""CPU per turn: CPU milliseconds of the web (gunicorn master + worker) and the Celery worker process
trees per simple turn (one model call, no tools), from /proc/<pid>/stat utime+stime, minus their idle
CPU over the same wall time (measured just before). Target <= 10 ms/turn.

Baselines in the same run: the fake LLM's CPU for the same model calls, and the benchmark client's
own CPU (websocket-client) for the same turns. Turns are measured twice: one after another (each
process wakes from idle for every step) and with several sessions in flight (processes stay busy).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

from scripts.bench import profile
from scripts.bench.common import (
    Bench, Result, cpu_seconds, log, main, process_tree, running_stack, self_cpu_seconds, timed_turn,
)

NAME = "cpu"
MARK = "BENCH-CPU"
TARGET_MS = 10.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--turns", type=int, default=200, help="turns per measurement (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="unmeasured turns first (default 20)")
    p.add_argument("--sessions", type=int, default=20,
                   help="sessions each run rotates over (default 20: ~11 turns, ~22 messages each by the end)")
    p.add_argument("--parallel", type=int, default=8, help="turns in flight in the loaded run (default 8)")
    p.add_argument("--idle-secs", type=float, default=10.0, help="idle window for the idle CPU rate")
    p.add_argument("--profile", metavar="DIR",
                   help="record the web and the worker with py-spy (--gil) during the sequential run into DIR "
                        "and print where their CPU went (scripts/bench/profile.py); the figures then include "
                        "py-spy's own disturbance")


def run(args: argparse.Namespace) -> Result:
    with running_stack(NAME, keep=args.keep) as bench:
        return measure(bench, args)


class Meter:
    """CPU seconds of each process group, read together."""

    def __init__(self, bench: Bench):
        self.groups = {
            "web": lambda: bench.web_pids(),
            "worker": lambda: bench.worker_pids(),
            "fake_llm": lambda: process_tree(bench.llm.pid),
            "redis": lambda: [bench.stack.redis_proc.pid],
        }

    def read(self) -> dict[str, float]:
        out = {name: cpu_seconds(pids()) for name, pids in self.groups.items()}
        out["client"] = self_cpu_seconds()
        return out


def _delta(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: b[k] - a[k] for k in a}


def _sequential(bench: Bench, clients: list, n: int, start: int) -> None:
    for i in range(n):
        t = timed_turn(clients[i % len(clients)], f"{MARK} #{start + i} hello")
        if t.frame.get("status") != "completed":
            raise RuntimeError(f"turn failed: {t.frame}")


def _parallel(bench: Bench, clients: list, n: int, start: int, inflight: int) -> None:
    """n turns, `inflight` at a time; loop k uses clients k, k+inflight, ... in turn."""
    per = [n // inflight + (1 if i < n % inflight else 0) for i in range(inflight)]
    errors: list[BaseException] = []

    def loop(k: int) -> None:
        mine = clients[k::inflight]
        try:
            for j in range(per[k]):
                t = timed_turn(mine[j % len(mine)], f"{MARK} p{start}-{k}-{j} hello")
                if t.frame.get("status") != "completed":
                    raise RuntimeError(f"turn failed: {t.frame}")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(inflight)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise RuntimeError(f"{len(errors)} parallel loops failed: {errors[0]!r}")


def _direct_sdk_cpu(bench: Bench, calls: int = 30) -> tuple[float, int]:
    """CPU ms of the openai SDK alone making the last model calls PicoBot made (same request bodies),
    in this process; and the number of messages in those requests."""
    from scripts.bench.overhead import DirectClient

    bodies = [r["body"] for r in bench.llm.requests() if r["path"].endswith("/chat/completions")][-calls:]
    direct = DirectClient(bench.llm.openai_url)
    for body in bodies[:5]:
        direct.call(body)  # warm-up
    started = self_cpu_seconds()
    for body in bodies:
        direct.call(body)
    return (self_cpu_seconds() - started) / len(bodies) * 1000, statistics.median(len(b["messages"]) for b in bodies)


def measure(bench: Bench, args: argparse.Namespace) -> Result:
    bench.llm.add_rule(MARK, {"content": "Hello! How can I help?"}, repeat=True)
    meter = Meter(bench)
    seq_clients = [bench.client(f"bench-cpu-{i}") for i in range(args.sessions)]
    par_clients = [bench.client(f"bench-cpu-p{i}") for i in range(max(args.sessions, args.parallel))]
    log(f"cpu: {args.warmup} warm-up turns")
    _sequential(bench, seq_clients, args.warmup, 0)
    _parallel(bench, par_clients, args.warmup, 0, args.parallel)
    time.sleep(1.0)

    log(f"cpu: idle for {args.idle_secs:g} s")
    a, t0 = meter.read(), time.monotonic()
    time.sleep(args.idle_secs)
    idle, idle_wall = _delta(a, meter.read()), time.monotonic() - t0
    idle_rate = {k: v / idle_wall for k, v in idle.items()}

    runs: dict[str, dict[str, float]] = {}
    for label, clients in (("sequential", seq_clients), ("parallel", par_clients)):
        log(f"cpu: {args.turns} turns, {label}")
        recorders = _start_profile(bench, args.profile) if label == "sequential" and args.profile else []
        a, t0 = meter.read(), time.monotonic()
        if label == "sequential":
            _sequential(bench, clients, args.turns, 10_000)
            for rec in recorders:
                rec.stop()
        else:
            _parallel(bench, clients, args.turns, 10_000, args.parallel)
        used, wall = _delta(a, meter.read()), time.monotonic() - t0
        per_turn = {k: max(0.0, used[k] - (0 if k == "client" else idle_rate[k] * wall)) / args.turns * 1000
                    for k in used}
        per_turn["wall_s"] = wall
        runs[label] = per_turn
    for c in seq_clients + par_clients:
        c.close()
    sdk_ms, history = _direct_sdk_cpu(bench)

    res = Result(NAME)
    for label, r in runs.items():
        total = r["web"] + r["worker"]
        res.add(f"web+worker CPU/turn, {label}", total, "ms/turn", f"<= {TARGET_MS:g}",
                total <= TARGET_MS if label == "sequential" else None,
                f"fake LLM {r['fake_llm']:.1f}, client {r['client']:.1f} ms/turn",
                f"{total / r['fake_llm']:.1f}x fake LLM, {total / r['client']:.1f}x client")
        res.add(f"  web, {label}", r["web"], "ms/turn")
        res.add(f"  worker, {label}", r["worker"], "ms/turn")
        res.add(f"  redis, {label}", r["redis"], "ms/turn")
    res.add("direct SDK CPU per model call (same bodies)", sdk_ms, "ms/call", "", None,
            f"requests of ~{history:.0f} messages", "")
    res.notes += [
        f"idle CPU rate subtracted (ms per wall second): web {idle_rate['web'] * 1000:.2f}, "
        f"worker {idle_rate['worker'] * 1000:.2f}, fake LLM {idle_rate['fake_llm'] * 1000:.2f}, "
        f"redis {idle_rate['redis'] * 1000:.2f} (measured over {idle_wall:.0f} s)",
        f"sequential: {args.turns} turns one after another over {args.sessions} sessions in "
        f"{runs['sequential']['wall_s']:.1f} s; parallel: {args.turns} turns, {args.parallel} in flight, over "
        f"{len(par_clients)} other sessions in {runs['parallel']['wall_s']:.1f} s",
        f"the worker's figure includes the openai SDK's own CPU for the call (the 'direct SDK' row, ~{sdk_ms:.1f} ms "
        "here: the same bodies posted with the SDK as it comes, a typed chunk model per event and no "
        "connection reuse; PicoBot's provider skips both, so its share is smaller)",
        "the target applies to the sequential figure; the parallel one shows the cost under load",
    ]
    res.raw = {"idle_rate": idle_rate, "runs": runs}
    if args.profile:
        res.details = "\nwhere the sequential run's CPU went (py-spy --gil samples):\n" + "\n".join(
            profile.summary(Path(args.profile) / f"{role}.txt") for role in ("web", "worker"))
    return res


def _start_profile(bench: Bench, out_dir: str) -> list[profile.Recorder]:
    exe = profile.available()
    if exe is None:
        raise SystemExit("--profile needs py-spy (pip install py-spy; it is in the test extras)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    recorders = [profile.Recorder(exe, bench.web_pid, out / "web.txt"),
                 profile.Recorder(exe, bench.worker_pid, out / "worker.txt")]
    time.sleep(1.0)  # py-spy attaches
    return recorders


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
