"""Soak: RSS of the web and the worker process over N turns (default 20,000), sampled every 1,000.

A process that keeps something per dialog, per socket or per turn without a bound grows with the
turns; what the caches hold is bounded (the worker's history cache: history_cache.MAX_SESSIONS
dialogs and MAX_CHARS characters). The load is --clients (default 32) WebSocket clients in a closed
loop against the fake LLM with no delay; each client moves to a new chat (a new socket and dialog)
every --turns-per-chat turns (default 25), so the run goes through far more dialogs and sockets than
the caches keep (20,000 / 25 = 800 dialogs against 200 cached) and every per-dialog structure is
exercised at its bound. Growth is read after the warm-up (--warmup turns, default 3,000: the caches
fill, the allocator settles): the end's RSS against the RSS at the warm-up's end, in MB and in MB per
1,000 turns over the last half (a leak keeps a slope there; a bound does not).
"""

from __future__ import annotations

import argparse
import threading
import time

from picobot.runtime import history_cache
from scripts.bench.common import Bench, Result, log, main, rss_mb, running_stack, table, timed_turn

NAME = "soak"
MARK = "BENCH-SOAK"
SAMPLE_EVERY = 1000


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--turns", type=int, default=20_000, help="turns in all (default 20,000)")
    p.add_argument("--clients", type=int, default=32, help="clients sending at once (default 32)")
    p.add_argument("--turns-per-chat", type=int, default=25, help="turns before a client moves to a new chat (25)")
    p.add_argument("--warmup", type=int, default=3000, help="turns before growth is measured (default 3,000)")
    p.add_argument("--worker-concurrency", type=int, default=32, help="worker threads (default 32)")


def run(args: argparse.Namespace) -> Result:
    with running_stack(NAME, worker_concurrency=args.worker_concurrency, keep=args.keep) as bench:
        return measure(bench, args)


def measure(bench: Bench, args: argparse.Namespace) -> Result:
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
        res.add(f"RSS {who} slope, last half", slope(i), "MB/1k turns")
    res.add("turns/s", end[0] / end[1], "turns/s")
    res.notes.append(f"{args.clients} clients in a closed loop, a new chat every {args.turns_per_chat} turns "
                     f"({chats} chats), fake LLM without delay; RSS of the process trees (web: gunicorn "
                     f"master + worker; worker: the Celery process)")
    res.notes.append(f"bounds: the worker's history cache keeps {history_cache.MAX_SESSIONS} dialogs and "
                     f"{history_cache.MAX_CHARS:,} characters of text at most")
    res.details = "\nRSS over the run:\n" + table(
        [[f"{t:,}", f"{secs:.0f}", f"{w:.1f}", f"{k:.1f}"] for t, secs, w, k in samples],
        ["turns", "seconds", "web MB", "worker MB"])
    res.raw = {"samples": samples}
    return res


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
