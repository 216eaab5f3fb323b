"""Soak: RSS of the web and the worker process over N turns (default 20,000), sampled every 1,000.

A process that keeps something per dialog, per socket or per turn without a bound grows with the
turns; what the caches hold is bounded (the worker's history cache: history_cache.MAX_SESSIONS
dialogs and MAX_CHARS characters). The load is --clients (default 32) WebSocket clients in a closed
loop against the fake LLM with no delay; each client moves to a new chat (a new socket and dialog)
every --turns-per-chat turns (default 25), so the run goes through far more dialogs and sockets than
the caches keep (20,000 / 25 = 800 dialogs against 200 cached) and every per-dialog structure is
exercised at its bound. The worker's bounds: the history cache (history_cache.MAX_SESSIONS dialogs,
MAX_CHARS characters), the event publisher's ended turns (publisher.FINISHED_WINDOW_SECS: at 50 turns/s
some 15,000 keys, filled after five minutes), Celery's last 1,000 succeeded task ids. Growth is read after the warm-up (--warmup turns, default 3,000: the caches
fill, the allocator settles): the end's RSS against the RSS at the warm-up's end, in MB and in MB per
1,000 turns over the last half (a leak keeps a slope there; a bound does not).

--tracemalloc starts tracemalloc in the worker at the warm-up's end and prints what was allocated after
it and is still held at the end, by line and by traceback (slower: for finding a leak).
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from picobot.runtime import history_cache, publisher
from scripts.bench.common import (
    BENCH_GATEWAY, ROOT, Bench, FakeLLMProcess, Result, Stack, log, main, rss_mb, running_stack, table, timed_turn,
)

NAME = "soak"
MARK = "BENCH-SOAK"
SAMPLE_EVERY = 1000


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--turns", type=int, default=20_000, help="turns in all (default 20,000)")
    p.add_argument("--clients", type=int, default=32, help="clients sending at once (default 32)")
    p.add_argument("--turns-per-chat", type=int, default=25, help="turns before a client moves to a new chat (25)")
    p.add_argument("--warmup", type=int, default=3000, help="turns before growth is measured (default 3,000)")
    p.add_argument("--worker-concurrency", type=int, default=32, help="worker threads (default 32)")
    p.add_argument("--tracemalloc", action="store_true", help="the worker under tracemalloc: what it still holds "
                   "of what it allocated after the warm-up")


def run(args: argparse.Namespace) -> Result:
    if args.tracemalloc:
        with _traced_stack(args) as (bench, snaps):
            res = measure(bench, args, snaps)
            res.details += "\n" + _compare(snaps)
            return res
    with running_stack(NAME, worker_concurrency=args.worker_concurrency, keep=args.keep) as bench:
        return measure(bench, args)


@contextmanager
def _traced_stack(args: argparse.Namespace) -> Iterator[tuple[Bench, Path]]:
    """web + beat + a worker started through `traced-worker` (below), which writes tracemalloc snapshots
    when asked (a file `want-N` in the snapshot folder)."""
    from picobot.cli.processes import worker_argv
    from tests.stack import wait_for

    tmp = Path(tempfile.mkdtemp(prefix="picobot-bench-soak-"))
    snaps = tmp / "snaps"
    snaps.mkdir()
    llm = FakeLLMProcess(tmp / "fake_llm.log")
    stack = Stack(tmp, llm.url, gateway=BENCH_GATEWAY)
    try:
        stack.start_web()
        log_file = open(stack.logs / "w1.log", "ab")
        stack._log_files.append(log_file)
        argv = worker_argv(concurrency=args.worker_concurrency, name="w1@%h")[3:]  # drop "python -m worker.celery_cli"
        env = dict(stack.env, PICOBOT_SOAK_SNAPS=str(snaps),
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), stack.env.get("PYTHONPATH")])))
        stack.procs["w1"] = subprocess.Popen([sys.executable, "-m", "scripts.bench.soak", "traced-worker", *argv],
                                             env=env, cwd=stack.cwd, stdout=log_file, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        wait_for(lambda: any(n.startswith("w1@") for n in stack.workers_alive()), 60, "worker w1 did not start")
        stack.start_beat()
        yield Bench(stack, llm, tmp), snaps
    finally:
        stack.stop()
        llm.stop()
        print(f"[bench] logs kept in {tmp}", file=sys.stderr)


def _snapshot(snaps: Path, name: str) -> None:
    (snaps / f"want-{name}").touch()
    deadline = time.monotonic() + 120
    while not (snaps / f"snap-{name}.pickle").exists() and time.monotonic() < deadline:
        time.sleep(0.2)


def _compare(snaps: Path) -> str:
    import tracemalloc

    def load(name: str) -> tracemalloc.Snapshot:
        with open(snaps / f"snap-{name}.pickle", "rb") as f:
            return pickle.load(f)

    a, b = load("warm"), load("end")
    out = ["worker: held at the end and allocated after the warm-up (tracemalloc), by line:"]
    out += [f"  {st}" for st in b.compare_to(a, "lineno")[:20]]
    out.append("the five largest, by traceback (PICOBOT_SOAK_FRAMES=12 for more than their line):")
    for st in b.compare_to(a, "traceback")[:5]:
        out.append(f"  {st.size_diff / 1024:+.1f} KiB in {st.count_diff:+d} blocks")
        out += [f"      {line}" for line in st.traceback.format()[-16:]]
    return "\n".join(out)


def _traced_worker(argv: list[str]) -> int:
    """python -m scripts.bench.soak traced-worker <celery arguments>: the worker, with tracemalloc started
    on the first snapshot asked for (the warm-up's end), so what is traced is what was allocated after it."""
    import gc
    import tracemalloc

    snaps = Path(os.environ["PICOBOT_SOAK_SNAPS"])

    def watch() -> None:
        while True:
            for want in snaps.glob("want-*"):
                name = want.name.removeprefix("want-")
                want.unlink()
                if not tracemalloc.is_tracing():
                    tracemalloc.start(int(os.environ.get("PICOBOT_SOAK_FRAMES", "1")))  # more: tracebacks, slower
                gc.collect()
                snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
                with open(snaps / f"snap-{name}.tmp", "wb") as f:
                    pickle.dump(snap, f)
                os.replace(snaps / f"snap-{name}.tmp", snaps / f"snap-{name}.pickle")
            time.sleep(0.3)

    threading.Thread(target=watch, name="soak-tracemalloc", daemon=True).start()
    from worker.celery_cli import main as celery_main  # what `picobot worker` runs

    return celery_main(argv)


def measure(bench: Bench, args: argparse.Namespace, snaps: Path | None = None) -> Result:
    bench.llm.add_rule(MARK, {"content": "ok, noted."}, repeat=True)
    total, lock = args.turns, threading.Lock()
    state = {"taken": 0, "done": 0, "chats": 0}
    samples: list[tuple[int, float, float, float]] = []  # (turns, seconds, web MB, worker MB)
    errors: list[BaseException] = []
    started = time.monotonic()

    def sample(done: int) -> None:
        web, worker = rss_mb(bench.web_pids()), rss_mb(bench.worker_pids())
        samples.append((done, time.monotonic() - started, web, worker))
        log(f"{NAME}: {done:>6} turns, {done / max(1e-9, time.monotonic() - started):5.1f} turns/s, "
            f"RSS web {web:6.1f} MB, worker {worker:6.1f} MB")

    def client(k: int) -> None:
        c, n = None, 0
        try:
            while True:
                with lock:
                    if state["taken"] >= total:
                        break
                    state["taken"] += 1
                if c is None or n >= args.turns_per_chat:
                    if c is not None:
                        c.close()
                    with lock:
                        state["chats"] += 1
                        chat = state["chats"]
                    c, n = bench.client(f"soak-{chat}"), 0
                t = timed_turn(c, f"{MARK} {k} {n}", timeout=120)
                if t.frame.get("status") != "completed":
                    raise RuntimeError(f"turn ended {t.frame.get('status')}: {t.frame.get('error')}")
                n += 1
                with lock:
                    state["done"] += 1
                    due = state["done"] % SAMPLE_EVERY == 0
                    done = state["done"]
                if due:
                    sample(done)
                    if snaps is not None and done == args.warmup:
                        _snapshot(snaps, "warm")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            if c is not None:
                c.close()

    sample(0)
    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(args.clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise RuntimeError(f"{len(errors)} of {args.clients} clients failed; first: {errors[0]!r}")
    time.sleep(2)  # the last turns' events drain
    if samples[-1][0] == state["done"]:
        samples.pop()
    sample(state["done"])
    if snaps is not None:
        _snapshot(snaps, "end")
    return _result(samples, args, state["chats"])


def _result(samples: list[tuple[int, float, float, float]], args: argparse.Namespace, chats: int) -> Result:
    res = Result(NAME)
    at_warm = min((s for s in samples if s[0] >= args.warmup), key=lambda s: s[0], default=samples[0])
    end = samples[-1]
    half = [s for s in samples if s[0] >= (at_warm[0] + end[0]) / 2] or [end]

    def slope(i: int) -> float:  # MB per 1,000 turns over the last half (least squares)
        xs, ys = [s[0] / 1000 for s in half], [s[i] for s in half]
        if len(xs) < 2:
            return 0.0
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        den = sum((x - mx) ** 2 for x in xs)
        return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0

    for i, who in ((2, "web"), (3, "worker")):
        res.add(f"RSS {who} after {end[0]:,} turns", end[i], "MB", "", None,
                f"{at_warm[i]:.1f} MB at {at_warm[0]:,} turns", f"+{end[i] - at_warm[i]:.1f} MB after warm-up")
        res.add(f"RSS {who} slope, last half", round(slope(i), 3), "MB/1k turns")
    res.add("turns/s", end[0] / end[1], "turns/s")
    res.notes.append(f"{args.clients} clients in a closed loop, a new chat every {args.turns_per_chat} turns "
                     f"({chats} chats), fake LLM without delay; RSS of the process trees (web: gunicorn "
                     f"master + worker; worker: the Celery process)")
    res.notes.append(f"bounds: the worker's history cache keeps {history_cache.MAX_SESSIONS} dialogs and "
                     f"{history_cache.MAX_CHARS:,} characters of text at most; its event publisher remembers the "
                     f"turns that ended in the last {publisher.FINISHED_WINDOW_SECS} s (turns/s x that many keys); "
                     f"Celery remembers its last 1,000 succeeded task ids")
    res.details = "\nRSS over the run:\n" + table(
        [[f"{t:,}", f"{secs:.0f}", f"{w:.1f}", f"{k:.1f}"] for t, secs, w, k in samples],
        ["turns", "seconds", "web MB", "worker MB"])
    res.raw = {"samples": samples}
    return res


if __name__ == "__main__" and sys.argv[1:2] == ["traced-worker"]:
    raise SystemExit(_traced_worker(sys.argv[2:]))
if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
