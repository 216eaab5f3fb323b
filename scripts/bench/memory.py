"""Memory: RSS of the web process (gunicorn master + worker) and of the Celery worker process when idle,
and of the web with 1,000 open idle /ws sockets. Targets: web <= 150 MB idle, <= +200 MB for 1,000
sockets; worker <= 200 MB idle.

Baselines in the same run: a bare `python -c 'import time; time.sleep(60)'`, and a bare Flask +
flask-sock app (scripts/bench/bare_app.py) under the same gunicorn settings, idle and with the same
1,000 sockets. The sockets are held by a separate process (`--hold`), which answers the server's
pings, so the benchmark's own memory stays out of every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from scripts.bench.common import (
    ROOT, Bench, Result, free_port, log, main, process_tree, pss_mb, rss_mb, running_stack, thread_count,
    timed_turn,
)

NAME = "memory"
MARK = "BENCH-MEM"
TARGET_WEB_IDLE_MB = 150.0
TARGET_WEB_SOCKETS_MB = 200.0
TARGET_WORKER_IDLE_MB = 200.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sockets", type=int, default=1000, help="idle /ws sockets to open (default 1000)")
    p.add_argument("--warmup", type=int, default=20, help="turns run before the 'after use' idle reading")


def raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def settle(seconds: float = 2.0) -> None:
    time.sleep(seconds)


# --- the socket holder (a separate process) ----------------------------------------------------

class Holder:
    """`python -m scripts.bench.memory --hold N --url ...`: opens N sockets and keeps them open."""

    def __init__(self, url: str, n: int, prefix: str, token: str | None = None):
        argv = [sys.executable, "-m", "scripts.bench.memory", "--hold", str(n), "--url", url, "--prefix", prefix]
        env = dict(os.environ)
        if token:
            env["PICOBOT_BENCH_TOKEN"] = token  # not on the command line
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("ready"):
            self.close()
            raise RuntimeError(f"the socket holder failed: {line!r}")
        self.opened = int(line.split()[1])
        self.open_secs = float(line.split()[2])

    def alive(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("status\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1])

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.proc.kill()
            self.proc.wait()


def hold(argv: list[str]) -> int:
    import websocket

    p = argparse.ArgumentParser()
    p.add_argument("--hold", type=int, required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--prefix", default="bench-mem")
    p.add_argument("--threads", type=int, default=16)
    a = p.parse_args(argv)
    raise_nofile(a.hold + 256)
    token = os.environ.get("PICOBOT_BENCH_TOKEN")
    header = [f"Authorization: Bearer {token}"] if token else []

    def open_one(i: int) -> Any:
        ws = websocket.create_connection(f"{a.url}?chat_id={a.prefix}-{i}&channel=cli_chat", timeout=120,
                                         header=header)
        frame = json.loads(ws.recv())
        if frame.get("type") != "ready":
            raise RuntimeError(f"socket {i}: expected ready, got {frame}")
        return ws

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(a.threads) as ex:
            socks = list(ex.map(open_one, range(a.hold)))
    except Exception as exc:  # noqa: BLE001
        print(f"failed {type(exc).__name__}: {exc}", flush=True)
        return 1
    print(f"ready {len(socks)} {time.monotonic() - started:.2f}", flush=True)

    sel = selectors.DefaultSelector()
    for ws in socks:
        sel.register(ws.sock, selectors.EVENT_READ, ws)
    sel.register(sys.stdin, selectors.EVENT_READ, None)
    alive = len(socks)
    while True:
        for key, _ in sel.select(timeout=1.0):
            if key.data is None:  # a command from the benchmark, or EOF: close everything
                line = sys.stdin.readline()
                if line.strip() == "status":
                    print(f"alive {alive}", flush=True)
                    continue
                for ws in socks:
                    try:
                        ws.close(timeout=1)
                    except Exception:  # noqa: BLE001
                        pass
                return 0
            ws = key.data
            try:
                frame = ws.recv_frame()  # one frame: answer pings, drop the rest
                if frame.opcode == websocket.ABNF.OPCODE_PING:
                    ws.pong(frame.data)
                elif frame.opcode == websocket.ABNF.OPCODE_CLOSE:
                    raise ConnectionError("closed by server")
            except Exception:  # noqa: BLE001
                sel.unregister(ws.sock)
                alive -= 1


# --- baselines -------------------------------------------------------------------------------------

def bare_python_rss() -> float:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        settle(1.5)
        return rss_mb([proc.pid])
    finally:
        proc.kill()
        proc.wait()


def bare_app(sockets: int, tmp: Path) -> dict[str, float]:
    from picobot.cli.processes import web_argv

    port = free_port()
    argv = web_argv(None, bind=f"127.0.0.1:{port}")  # type: ignore[arg-type]  # config unused with bind
    argv[-1] = "scripts.bench.bare_app:create_app()"
    log_file = open(tmp / "bare_app.log", "ab")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the bare app did not start")
            time.sleep(0.1)
        settle()
        pids = process_tree(proc.pid)
        out = {"idle": rss_mb(pids), "idle_pss": pss_mb(pids) or 0.0}
        holder = Holder(f"ws://127.0.0.1:{port}/ws", sockets, "bare")
        try:
            settle(3)
            pids = process_tree(proc.pid)
            out.update(sockets=rss_mb(pids), sockets_pss=pss_mb(pids) or 0.0, threads=thread_count(pids),
                       alive=holder.alive(), open_secs=holder.open_secs)
        finally:
            holder.close()
        return out
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log_file.close()


# --- PicoBot -------------------------------------------------------------------------------------

def run(args: argparse.Namespace) -> Result:
    raise_nofile(args.sockets * 3 + 1024)  # the stack's processes inherit it
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="picobot-bench-memory-base-"))
    log("memory: baselines (bare python, bare flask-sock app)")
    try:
        bare_py = bare_python_rss()
        bare = bare_app(args.sockets, tmp)
    except BaseException:
        print(f"[bench] bare app log kept in {tmp}", file=sys.stderr)
        raise
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    with running_stack(NAME, keep=args.keep) as bench:
        return measure(bench, args, bare_py, bare)


def measure(bench: Bench, args: argparse.Namespace, bare_py: float, bare: dict[str, float]) -> Result:
    settle()
    web_fresh, worker_fresh = rss_mb(bench.web_pids()), rss_mb(bench.worker_pids())
    log(f"memory: {args.warmup} turns, then idle")
    bench.llm.add_rule(MARK, {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]},
                       {"content": "42."}, repeat=True)
    clients = [bench.client(f"bench-mem-w{i}") for i in range(5)]
    for i in range(args.warmup):
        timed_turn(clients[i % len(clients)], f"{MARK} #{i}: 6*7?")
    for c in clients:
        c.close()
    settle(3)
    web_pids, worker_pids = bench.web_pids(), bench.worker_pids()
    web_idle, worker_idle = rss_mb(web_pids), rss_mb(worker_pids)
    web_idle_pss, worker_idle_pss = pss_mb(web_pids) or 0.0, pss_mb(worker_pids) or 0.0
    web_worker_only = rss_mb(web_pids[1:])
    threads_idle = thread_count(web_pids)

    log(f"memory: opening {args.sockets} idle /ws sockets")
    holder = Holder(bench.stack.ws_url, args.sockets, "bench-mem", token=bench.stack.token)
    try:
        deadline = time.monotonic() + 30
        while bench.stack.health().get("connections", 0) < args.sockets and time.monotonic() < deadline:
            time.sleep(0.5)
        settle(3)
        web_pids = bench.web_pids()
        web_socks, web_socks_pss = rss_mb(web_pids), pss_mb(web_pids) or 0.0
        threads_socks = thread_count(web_pids)
        connections = bench.stack.health().get("connections", 0)
        alive = holder.alive()
        open_secs = holder.open_secs
    finally:
        holder.close()

    res = Result(NAME)
    delta, bare_delta = web_socks - web_idle, bare["sockets"] - bare["idle"]
    res.add("web idle RSS (master+worker)", web_idle, "MB", f"<= {TARGET_WEB_IDLE_MB:g}",
            web_idle <= TARGET_WEB_IDLE_MB, f"bare flask-sock {bare['idle']:.1f} MB",
            f"{web_idle / bare['idle']:.1f}x bare app")
    res.add(f"web +{args.sockets} idle sockets", delta, "MB", f"<= +{TARGET_WEB_SOCKETS_MB:g}",
            delta <= TARGET_WEB_SOCKETS_MB, f"bare flask-sock +{bare_delta:.1f} MB",
            f"{delta / bare_delta:.1f}x bare app")
    res.add("worker idle RSS", worker_idle, "MB", f"<= {TARGET_WORKER_IDLE_MB:g}", worker_idle <= TARGET_WORKER_IDLE_MB,
            f"bare python {bare_py:.1f} MB", f"{worker_idle / bare_py:.1f}x bare python")
    res.add("web idle RSS, fresh (before any turn)", web_fresh, "MB")
    res.add("worker idle RSS, fresh (before any turn)", worker_fresh, "MB")
    res.add(f"web RSS with {args.sockets} sockets", web_socks, "MB", "", None,
            f"bare flask-sock {bare['sockets']:.1f} MB", f"{web_socks / bare['sockets']:.1f}x bare app")
    res.add("web idle PSS (master+worker)", web_idle_pss, "MB", "", None, f"bare {bare['idle_pss']:.1f} MB")
    res.add("worker idle PSS", worker_idle_pss, "MB")
    res.add("bare python RSS", bare_py, "MB")
    res.notes += [
        f"web idle after {args.warmup} turns; gunicorn worker alone {web_worker_only:.1f} MB "
        f"(master {web_idle - web_worker_only:.1f} MB)",
        f"{args.sockets} sockets: opened in {open_secs:.1f} s; {alive} alive at reading, web hub counted "
        f"{connections}; web threads {threads_idle} idle -> {threads_socks} "
        f"(bare app: {bare['threads']:.0f} threads, {bare['alive']:.0f} alive, opened in {bare['open_secs']:.1f} s)",
        f"per socket: PicoBot {delta * 1024 / args.sockets:.0f} KB, bare flask-sock {bare_delta * 1024 / args.sockets:.0f} KB",
    ]
    res.raw = {"bare_python": bare_py, "bare_app": bare, "web": {"fresh": web_fresh, "idle": web_idle,
               "sockets": web_socks, "idle_pss": web_idle_pss, "sockets_pss": web_socks_pss},
               "worker": {"fresh": worker_fresh, "idle": worker_idle, "idle_pss": worker_idle_pss}}
    return res


if __name__ == "__main__":
    if "--hold" in sys.argv:
        raise SystemExit(hold(sys.argv[1:]))
    raise SystemExit(main(NAME, run, add_args, __doc__))
