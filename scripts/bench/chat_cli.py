"""`picobot chat -m hello` against a running gateway: the wall time a user waits for one reply.

Starts a stack (web + one worker, the fake LLM), runs the command once unmeasured (it pairs the
terminal on first use), then N times, alternating with `python -c pass` (the interpreter's own
start-up, the same-run baseline) and with the same turn sent over an already open socket (what the
command would take if starting Python, importing and connecting cost nothing). Target: p50 <= 0.4 s.

`--compare DIR` also times the command from another copy of the source tree (DIR holds its `picobot`
package, e.g. from `git archive`), against the same stack in the same run: a before/after figure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from scripts.bench.common import Bench, Result, WsClient, log, main, percentile, running_stack, timed_turn

NAME = "chat_cli"
TARGET_S = 0.4


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--runs", type=int, default=15, help="measured runs of each (default 15)")
    p.add_argument("--compare", metavar="DIR", type=Path,
                   help="also time the command from the source tree in DIR (another revision's client)")


def run(args: argparse.Namespace) -> Result:
    with running_stack(NAME, worker_concurrency=20, beat=False) as bench:
        client = bench.client("bench-open-socket")
        try:
            samples = _measure(_sides(bench, client, args.compare), args.runs)
        finally:
            client.close()
    return _result(args, samples)


def _timed_run(bench: Bench, argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=bench.stack.cwd, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv[1:]} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return elapsed


def _sides(bench: Bench, client: WsClient, compare: Path | None) -> dict[str, Callable[[], float]]:
    """What is timed, by name: each a callable returning seconds."""
    chat = [sys.executable, "-m", "picobot", "chat", "-m", "hello", "--timeout", "60"]
    env = bench.stack.env
    sides: dict[str, Callable[[], float]] = {
        "chat": lambda: _timed_run(bench, chat, env),
        "bare": lambda: _timed_run(bench, [sys.executable, "-c", "pass"], env),
        "turn": lambda: timed_turn(client, "hello").total_ms / 1000,
    }
    if compare is not None:
        # First on the path, so its `picobot` wins over the installed one.
        other = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(compare.resolve()), env.get("PYTHONPATH")])))
        sides["compare"] = lambda: _timed_run(bench, chat, other)
    return sides


def _measure(sides: dict[str, Callable[[], float]], runs: int) -> dict[str, list[float]]:
    """Seconds per side; a run that fails is logged and left out, and counted under "failed"."""
    for timed in sides.values():
        timed()  # unmeasured: the first chat run pairs the terminal; all warm the disk cache
    samples: dict[str, list[float]] = {name: [] for name in sides}
    failed: list[float] = []
    log(f"measuring {runs} runs of each of {', '.join(sides)}, alternating")
    for _ in range(runs):  # alternating, so all see the same machine load
        for name, timed in sides.items():
            try:
                samples[name].append(timed())
            except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as exc:
                log(f"{name}: run failed, left out: {exc}")
                failed.append(1.0)
    samples["failed"] = failed
    return samples


def _result(args: argparse.Namespace, samples: dict[str, list[float]]) -> Result:
    chat, bare, turn = samples["chat"], samples["bare"], samples["turn"]
    c50, c90 = percentile(chat, 50), percentile(chat, 90)
    b50, t50 = percentile(bare, 50), percentile(turn, 50)
    res = Result(NAME)
    res.add("`picobot chat -m hello`, p50", c50 * 1000, "ms", f"<= {TARGET_S * 1000:g}", c50 <= TARGET_S,
            f"python -c pass p50 {b50 * 1000:.1f} ms", f"{c50 / b50:.1f}x python -c pass")
    res.add("`picobot chat -m hello`, p90", c90 * 1000, "ms")
    res.add("  python -c pass, p50", b50 * 1000, "ms")
    res.add("  python -c pass, p90", percentile(bare, 90) * 1000, "ms")
    res.add("  the same turn over an open socket, p50", t50 * 1000, "ms")
    res.add("  start-up + connect (chat p50 - open-socket turn p50)", (c50 - t50) * 1000, "ms")
    if "compare" in samples:
        o50, o90 = percentile(samples["compare"], 50), percentile(samples["compare"], 90)
        label = f"  --compare {args.compare.name}: chat -m hello"
        res.add(f"{label}, p50", o50 * 1000, "ms", ratio=f"{o50 / c50:.2f}x this tree")
        res.add(f"{label}, p90", o90 * 1000, "ms")
    if samples["failed"]:
        res.notes.append(f"{len(samples['failed'])} run(s) failed and are left out (see the log above)")
    res.notes.append(f"{args.runs} runs of each after one unmeasured run, alternating; the fake LLM answers at once, "
                     "so the figure is the command's own cost plus one short turn")
    res.raw = {f"{name}_s": values for name, values in samples.items()}
    return res


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
