"""Scale-out: turns per second with two worker hosts against one (target >= 1.8x).

A worker host is one Celery worker process with a PICOBOT_HOST_ID, a home and a workspace of its
own; both share one PostgreSQL schema and one Redis, with one web process and beat in front. A host's
capacity is its turn slots (`-c`, default 8): each model call takes --delay-ms (default 1 s), as a real
model does, so a host runs at most slots / delay turns a second whatever its CPU. This machine has
2 cores shared by every process of the run: a CPU-bound turn could not show two hosts doing twice the
work of one here, a slot-bound one shows what placement costs (a forwarded task, uneven chat counts).

Load: --chats (default 64) WebSocket clients, each its own chat, send a message, wait for its
turn_completed and send the next, all at once, for --warmup + --seconds; turns completed within the
measured window count. Baseline in the same run: the same load on one host. Chats of the two-host
run are pinned at their first turn (placement: to the host whose worker took it, or a clearly less
loaded one), and later turns of a chat go to its host's queue.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from scripts.bench.common import (
    BENCH_GATEWAY, CLK_TCK, FakeLLMProcess, Result, Stack, cpu_seconds, log, main, percentile, pg_schema,
    process_tree, self_cpu_seconds, timed_turn,
)
from scripts.bench.common import _machine_jiffies

NAME = "scaleout"
MARK = "BENCH-SCALE"
TARGET_RATIO = 1.8
HOSTS = ("alpha", "beta")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chats", type=int, default=64, help="chats sending at once (default 64)")
    p.add_argument("--slots", type=int, default=8, help="turn slots of each host's worker, -c (default 8)")
    p.add_argument("--delay-ms", type=int, default=1000, help="model call duration (default 1000)")
    p.add_argument("--warmup", type=float, default=6.0, help="seconds before the measured window (default 6)")
    p.add_argument("--seconds", type=float, default=20.0, help="measured window (default 20)")


@contextmanager
def hosts_stack(tmp: Path, llm: FakeLLMProcess, hosts: int, slots: int) -> Iterator[Stack]:
    """web + beat + one worker per host (own PICOBOT_HOST_ID, home and workspace), one PostgreSQL schema."""
    with pg_schema() as url:
        stack = Stack(tmp, llm.url, database_url=url, gateway=BENCH_GATEWAY)
        try:
            cfg = json.loads((stack.home / "config.json").read_text())
            cfg["memory"] = {"enabled": False}  # the turn path only
            homes = []
            for host in HOSTS[:hosts]:
                home = tmp / f"home-{host}"
                home.mkdir()
                (home / "config.json").write_text(json.dumps({**cfg, "tools": {"workspace": str(tmp / f"ws-{host}")}}))
                homes.append(home)
            shutil.copy(homes[0] / "config.json", stack.home / "config.json")  # web and beat read it too
            stack.start_web()
            for host, home in zip(HOSTS, homes):
                stack.start_worker(f"{host[0]}1", concurrency=slots,
                                   env={"PICOBOT_HOST_ID": host, "PICOBOT_HOME": str(home)})
            stack.start_beat()
            r = stack.redis()
            deadline = time.monotonic() + 30
            while not set(HOSTS[:hosts]) <= set(r.zrange("picobot:hosts", 0, -1)):
                if time.monotonic() > deadline:
                    raise RuntimeError("the worker hosts never beat")
                time.sleep(0.1)
            yield stack
        finally:
            stack.stop()


def _load(stack: Stack, chats: int, warmup: float, seconds: float, aux: list[int]) -> dict[str, Any]:
    """Closed loop: every chat sends its next message as soon as its last turn completed."""
    clients = [stack.client(f"scale-{i}") for i in range(chats)]
    done: list[tuple[float, float]] = []  # (sent, completed) of every turn
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = time.time() + 0.5
    window = (start + warmup, start + warmup + seconds)

    def loop(i: int) -> None:
        time.sleep(max(0.0, start - time.time()))
        n = 0
        try:
            while time.time() < window[1]:
                t = timed_turn(clients[i], f"{MARK} chat {i} turn {n}", timeout=120)
                if t.frame.get("status") != "completed":
                    raise RuntimeError(f"turn ended {t.frame.get('status')}: {t.frame.get('error')}")
                with lock:
                    done.append((t.sent, t.completed))
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    pids = [p for proc in stack.procs.values() for p in process_tree(proc.pid)]
    aux = aux + [stack.redis_proc.pid]  # the run's own helpers: not the machine's other load, nor the stack's
    cpu0, aux0, own0 = cpu_seconds(pids), cpu_seconds(aux), self_cpu_seconds()
    (busy0, _), t0 = _machine_jiffies(), time.monotonic()
    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(chats)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    cpu = cpu_seconds(pids) - cpu0
    busy = (_machine_jiffies()[0] - busy0) / CLK_TCK  # the machine's busy CPU seconds; less ours and the stack's:
    ours = cpu + (cpu_seconds(aux) - aux0) + (self_cpu_seconds() - own0)
    other = max(0.0, busy - ours) / ((time.monotonic() - t0) * (os.cpu_count() or 1))
    for c in clients:
        c.close()
    if errors:
        raise RuntimeError(f"{len(errors)} of {chats} chats failed; first: {errors[0]!r}")
    measured = [(s, c) for s, c in done if window[0] <= c < window[1]]
    return {"turns": len(measured), "tps": len(measured) / seconds, "all_turns": len(done), "cpu_s": cpu,
            "other_cpu": other,
            "latency_ms": [(c - s) * 1000 for s, c in measured]}


def _placement(stack: Stack) -> dict[str, int]:
    """How many chats each host holds (chat_hosts)."""
    from picobot.storage.db import Database
    from sqlalchemy import text

    db = Database(stack.database_url)
    try:
        with db.connect() as conn:
            rows = conn.execute(text("SELECT host, count(*) FROM chat_hosts GROUP BY host")).all()
        return {str(h): int(n) for h, n in rows}
    finally:
        db.dispose()


def measure(args: argparse.Namespace, hosts: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"picobot-bench-{NAME}-{hosts}-"))
    llm = FakeLLMProcess(tmp / "fake_llm.log")
    ok = False
    try:
        llm.add_rule(MARK, {"content": "ok, done.", "delay_ms": args.delay_ms}, repeat=True)
        with hosts_stack(tmp, llm, hosts, args.slots) as stack:
            log(f"{NAME}: {hosts} host(s) x {args.slots} slots, {args.chats} chats, "
                f"{args.warmup:.0f} s warm-up + {args.seconds:.0f} s measured")
            out = _load(stack, args.chats, args.warmup, args.seconds, [llm.pid])
            out["placement"] = _placement(stack) if hosts > 1 else {}
            log(f"{NAME}: {hosts} host(s): {out['tps']:.2f} turns/s (chats per host {out['placement'] or '-'})")
        ok = True
        return out
    finally:
        llm.stop()
        if ok and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"[bench] logs kept in {tmp}")


def run(args: argparse.Namespace) -> Result:
    if args.db != "postgres":
        log(f"{NAME}: two hosts share one database over the network: PostgreSQL (--db postgres is implied)")
    one = measure(args, 1)
    two = measure(args, 2)
    ideal_one = args.slots / (args.delay_ms / 1000)
    ratio = two["tps"] / one["tps"] if one["tps"] else 0.0
    res = Result(NAME)
    res.add("two hosts / one host", ratio, "x", f">= {TARGET_RATIO}", ratio >= TARGET_RATIO,
            f"one host {one['tps']:.2f} turns/s", f"{ratio:.2f}x")
    res.add("turns/s, one host", one["tps"], "turns/s", "", None, f"slot bound {ideal_one:.0f} turns/s",
            f"{one['tps'] / ideal_one:.2f} of it")
    res.add("turns/s, two hosts", two["tps"], "turns/s", "", None, f"slot bound {2 * ideal_one:.0f} turns/s",
            f"{two['tps'] / (2 * ideal_one):.2f} of it")
    for label, r in (("one host", one), ("two hosts", two)):
        res.add(f"turn latency p50, {label}", percentile(r["latency_ms"], 50), "ms")
        res.add(f"CPU per turn, {label} (web+workers+beat)", r["cpu_s"] * 1000 / max(1, r["all_turns"]), "ms/turn")
    res.notes.append(f"each host: one worker, -c {args.slots}; model call {args.delay_ms} ms; {args.chats} chats in a "
                     f"closed loop; {args.seconds:.0f} s measured after {args.warmup:.0f} s; PostgreSQL + one Redis")
    res.notes.append(f"chats per host in the two-host run: {two['placement']}")
    res.notes.append(f"other processes' share of the machine's CPU: one-host run {one['other_cpu']:.0%}, "
                     f"two-host run {two['other_cpu']:.0%}")
    res.raw = {"one": {k: v for k, v in one.items() if k != "latency_ms"},
               "two": {k: v for k, v in two.items() if k != "latency_ms"}, "pid": os.getpid()}
    return res


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
