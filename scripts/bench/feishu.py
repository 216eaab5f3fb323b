"""Feishu channel: webhook acknowledgement latency at a fixed event rate (vs a bare Flask JSON endpoint in the
same run), delivery lag (turn committed -> reply accepted by the fake Feishu), and RSS of web and worker
with Feishu enabled, plus a check that neither process imported lark_oapi.

Events are signed + encrypted by scripts/fake_feishu's EventSender (prepared before the timed phase), sent
open-loop at --rate per second for --seconds, each to its own p2p chat. The fake Feishu OpenAPI runs in this
process. After a warm-up (not counted; its figures go to a note), the acknowledgement is measured twice:
with the worker and beat paused (SIGSTOP: the web process on its own, as when the workers run on other
machines), then with one worker on the same cores answering every event. Between the two, the paused
backlog is answered: events answered per second by one worker. A `sitecustomize` on the stack's PYTHONPATH
writes each process's sys.modules to a file every second.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import sqlalchemy

from scripts.bench.common import (
    BENCH_GATEWAY, ROOT, FakeLLMProcess, Result, Stack, cpu_seconds, free_port, log, main, p50_p99, pg_schema,
    process_tree, rss_mb,
)
from scripts.fake_feishu import EventSender, FakeFeishu
from tests.stack import wait_for

NAME = "feishu"
PROBE = '''import os, sys, threading, time
_dir = os.environ.get("PICOBOT_BENCH_MODULES_DIR")
def _loop():
    while True:
        time.sleep(1)
        try:
            with open(os.path.join(_dir, "%d.txt" % os.getpid()), "w") as f:
                f.write(" ".join(sys.argv[:4]) + "\\n" + "\\n".join(sorted(sys.modules)))
        except Exception:
            pass
def _start():
    threading.Thread(target=_loop, daemon=True).start()
if _dir:
    _start()
    os.register_at_fork(after_in_child=_start)
'''


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", type=float, default=200, help="webhook events per second (default 200)")
    p.add_argument("--seconds", type=float, default=5, help="length of the timed phase (default 5)")
    p.add_argument("--lag-events", type=int, default=40, help="events of the light-load delivery-lag phase")
    p.add_argument("--worker-nice", type=int, default=None,
                   help="the worker's PICOBOT_WORKER_NICE (default: the product's, 10; 0 runs it at the web's priority)")
    p.add_argument("--renice", type=int, default=0,
                   help="run every process of the benchmark (this client, the bare app, web, worker, beat) at this "
                        "scheduling-group niceness (Linux autogroups; below 0 needs root): on a machine busy with "
                        "other work the stack then gets the CPU it would have on a quiet one. The worker's "
                        "--worker-nice is added to it. Default 0: off")


def blast(url: str, wires: list[tuple[bytes, dict[str, str]]], rate: float) -> tuple[list[float], int]:
    """Post the prepared bodies open-loop at `rate`/s; return (latencies ms of 200 answers, failures)."""
    lat: list[float] = []
    failures = [0]
    lock = threading.Lock()
    client = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=256, max_keepalive_connections=256))

    def one(body: bytes, headers: dict[str, str]) -> None:
        t0 = time.perf_counter()
        try:
            ok = client.post(url, content=body, headers=headers).status_code == 200
        except httpx.HTTPError:
            ok = False
        ms = (time.perf_counter() - t0) * 1000
        with lock:
            if ok:
                lat.append(ms)
            else:
                failures[0] += 1

    start = time.perf_counter()
    with ThreadPoolExecutor(128) as ex:
        for i, (body, headers) in enumerate(wires):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            ex.submit(one, body, headers)
    client.close()
    return lat, failures[0]


def prepare(sender: EventSender, n: int, text: str) -> tuple[list[str], list[tuple[bytes, dict[str, str]]]]:
    ids, wires = [], []
    for i in range(n):
        ev = sender.message(chat_id=f"oc_bench_{uuid.uuid4().hex[:10]}", text=f"{text} {i}", sender_open_id="ou_bench")
        ids.append(ev["event"]["message"]["message_id"])
        wires.append(sender.wire(ev))
    return ids, wires


def renice(pids: list[int], niceness: int) -> None:
    """Set the autogroup niceness of these processes' sessions (--renice); each started a session of its own."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/autogroup", "w") as group:
                group.write(str(max(-20, min(19, niceness))))
        except OSError as exc:
            log(f"feishu: --renice {niceness} of process {pid} failed ({exc})")


def bare_baseline(wires: list[tuple[bytes, dict[str, str]]], rate: float, tmp: Path, niceness: int = 0) -> list[float]:
    from picobot.cli.processes import web_argv

    port = free_port()
    argv = web_argv(None, bind=f"127.0.0.1:{port}")  # type: ignore[arg-type]  # config unused with bind
    argv[-1] = "scripts.bench.bare_webhook:create_app()"
    with open(tmp / "bare_webhook.log", "ab") as log_file:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(lambda: _ok(f"http://127.0.0.1:{port}/health"), 30, "the bare webhook app did not start")
            if niceness:
                renice([proc.pid], niceness)
            return blast(f"http://127.0.0.1:{port}/feishu/events", wires, rate)[0]
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=30)


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def lags(stack: Stack, fake: FakeFeishu, message_ids: list[str]) -> list[float]:
    """ms from each turn's commit (turns.finished_at) to the fake accepting its reply."""
    eng = sqlalchemy.create_engine(stack.database_url)
    with eng.connect() as c:
        rows = c.execute(sqlalchemy.text(
            "SELECT i.platform_message_id, t.finished_at FROM inbound i JOIN turns t ON t.id = i.turn_id "
            "WHERE i.channel = 'feishu' AND t.finished_at IS NOT NULL")).all()
    eng.dispose()
    finished = {r[0]: r[1] for r in rows}
    with fake.lock:
        accepted = {m["reply_to"]: m["time"] for m in fake.sent if m["reply_to"]}
    return [(accepted[m] - finished[m]) * 1000 for m in message_ids if m in accepted and m in finished]


def _replied(fake: FakeFeishu, message_ids: list[str]) -> set[str]:
    with fake.lock:
        return set(message_ids) & {m["reply_to"] for m in fake.sent}


def _await_replies(fake: FakeFeishu, message_ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(_replied(fake, message_ids)) < len(message_ids):
        time.sleep(0.2)


def _pause(pids: list[int], home: Path) -> None:
    """SIGSTOP the worker and beat, though not while one holds SQLite's write turn: a process stopped there
    would keep the web from writing anything (every ack of the phase would time out)."""
    locks = list(home.rglob("*-writer.lock"))
    for _ in range(100):
        _signal(pids, signal.SIGSTOP)
        if all(_lock_free(path) for path in locks):
            return
        _signal(pids, signal.SIGCONT)
        time.sleep(0.05)
    raise RuntimeError("the worker kept SQLite's write lock: could not pause it between two writes")


def _lock_free(path: Path) -> bool:
    import fcntl

    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def modules(probe_dir: Path, pids: list[int]) -> set[str]:
    out: set[str] = set()
    for pid in pids:
        path = probe_dir / f"{pid}.txt"
        if path.exists():
            out |= set(path.read_text().splitlines()[1:])
    return out


def run(args: argparse.Namespace) -> Result:
    if args.worker_nice is None:  # as deployed: picobot up, the Procfile and docker compose
        from picobot.cli.processes import DEFAULT_WORKER_NICE

        args.worker_nice = DEFAULT_WORKER_NICE
    tmp = Path(tempfile.mkdtemp(prefix="picobot-bench-feishu-"))
    probe_dir = tmp / "modules"
    probe_dir.mkdir()
    (tmp / "probe").mkdir()
    (tmp / "probe" / "sitecustomize.py").write_text(PROBE)
    fake = FakeFeishu(app_id="cli_bench", app_secret="secret_bench", rate_limit_qps=None).start()
    llm = FakeLLMProcess(tmp / "fake_llm.log")
    stack: Stack | None = None
    exits = contextlib.ExitStack()
    try:
        database_url = exits.enter_context(pg_schema()) if args.db == "postgres" else None
        n = int(args.rate * args.seconds)
        sender = EventSender("http://unused", "vtok", "ekey", app_id=fake.app_id, fake=fake)
        ids, wires = prepare(sender, n, "bench")
        log(f"feishu: baseline, bare Flask JSON endpoint, {n} events at {args.rate:g}/s")
        if args.renice:
            renice([os.getpid()], args.renice)
        bare = bare_baseline(wires, args.rate, tmp, args.renice)

        stack = Stack(tmp, llm.url, database_url=database_url, gateway=BENCH_GATEWAY)
        cfg = json.loads((stack.home / "config.json").read_text())
        cfg["channels"] = {"feishu": {"enabled": True, "app_id": fake.app_id, "app_secret": fake.app_secret,
                                      "domain": fake.base_url, "verification_token": "vtok", "encrypt_key": "ekey"}}
        (stack.home / "config.json").write_text(json.dumps(cfg, indent=2))
        stack.env.update(PICOBOT_BENCH_MODULES_DIR=str(probe_dir),
                         PYTHONPATH=os.pathsep.join([str(tmp / "probe"), str(ROOT)]))
        stack.start_web()
        # --worker-nice: as PICOBOT_WORKER_NICE runs it (a niced worker starts slowly on a busy machine)
        stack.start_worker("w1", concurrency=200, nice=args.worker_nice, timeout=180)
        stack.start_beat()
        url = f"{stack.http}/feishu/events"

        worker_tree = process_tree(stack.procs["w1"].pid) + process_tree(stack.procs["beat"].pid)
        web_tree = process_tree(stack.procs["web"].pid)
        if args.renice:
            renice([stack.procs["web"].pid, stack.procs["beat"].pid, stack.redis_proc.pid, llm.proc.pid], args.renice)
            renice([stack.procs["w1"].pid], args.renice + args.worker_nice)

        log(f"feishu: warm-up, {int(args.rate)} events at {args.rate:g}/s (not counted)")
        warm_ids, warm_wires = prepare(sender, int(args.rate), "warm")
        cold, _ = blast(url, warm_wires, args.rate)  # first requests: threads, pools and connections start
        _await_replies(fake, warm_ids, 120)

        log(f"feishu: PicoBot webhook alone (worker and beat paused), {n} events at {args.rate:g}/s")
        _pause(worker_tree, stack.home)
        try:
            cpu0 = cpu_seconds(web_tree)
            alone, alone_failures = blast(url, wires, args.rate)
            web_cpu_ms = (cpu_seconds(web_tree) - cpu0) * 1000 / max(1, n)
        finally:
            _signal(worker_tree, signal.SIGCONT)
        t0 = time.monotonic()
        _await_replies(fake, ids, 120 + n / 10)
        drain_rate = len(_replied(fake, ids)) / max(1e-9, time.monotonic() - t0)

        log(f"feishu: PicoBot webhook with the worker on the same cores, {n} events at {args.rate:g}/s")
        ids2, wires2 = prepare(sender, n, "shared")
        acks, failures = blast(url, wires2, args.rate)
        _await_replies(fake, ids2, 120 + n / 10)
        loaded_lag = lags(stack, fake, ids2)

        log(f"feishu: delivery lag at light load ({args.lag_events} events, 5/s)")
        light_ids, light_wires = prepare(sender, args.lag_events, "light")
        blast(url, light_wires, 5)
        _await_replies(fake, light_ids, 120)
        light_lag = lags(stack, fake, light_ids)
        time.sleep(1.5)  # one more sys.modules dump
        web_pids, worker_pids = process_tree(stack.procs["web"].pid), process_tree(stack.procs["w1"].pid)
        web_rss, worker_rss = rss_mb(web_pids), rss_mb(worker_pids)
        web_mods, worker_mods = modules(probe_dir, web_pids), modules(probe_dir, worker_pids)
        sender.close()
    finally:
        if stack is not None:
            stack.stop()
        llm.stop()
        fake.stop()
        exits.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"[bench] logs kept in {tmp}", file=sys.stderr)

    res = Result(NAME)
    (w50, w99), (a50, a99), (b50, b99) = p50_p99(alone), p50_p99(acks), p50_p99(bare)
    res.add(f"webhook ack p50 at {args.rate:g}/s, web alone", w50, "ms", "", None, f"bare Flask {b50:.1f} ms",
            f"{w50 / b50:.1f}x bare" if b50 else "")
    res.add(f"webhook ack p99 at {args.rate:g}/s, web alone", w99, "ms", "<= 50", w99 <= 50,
            f"bare Flask {b99:.1f} ms", f"{w99 / b99:.1f}x bare" if b99 else "")
    # the figure the target is about, against the same run's web alone (and bare Flask)
    res.add(f"webhook ack p50 at {args.rate:g}/s, worker on same cores", a50, "ms", "", None,
            f"web alone {w50:.1f} ms", f"{a50 / w50:.1f}x alone, {a50 / b50:.0f}x bare" if w50 and b50 else "")
    res.add(f"webhook ack p99 at {args.rate:g}/s, worker on same cores", a99, "ms", "<= 50", a99 <= 50,
            f"web alone {w99:.1f} ms", f"{a99 / w99:.1f}x alone, {a99 / b99:.0f}x bare" if w99 and b99 else "")
    res.add("web CPU per acknowledged event", web_cpu_ms, "ms")
    c50, c99 = p50_p99(cold)
    res.notes.append(f"cold start (the first {len(cold)} events after the web started, not in the table): "
                     f"ack p50 {c50:.1f} ms, p99 {c99:.1f} ms")
    res.add("events answered per second, one worker", drain_rate, "/s")
    for label, values in ((f"under {args.rate:g}/s", loaded_lag), ("light load", light_lag)):
        l50, l99 = p50_p99(values)
        res.add(f"delivery lag p50, {label}", l50, "ms")
        res.add(f"delivery lag p99, {label}", l99, "ms", "<= 100" if label == "light load" else "",
                l99 <= 100 if label == "light load" else None)
    res.add("web RSS (Feishu enabled)", web_rss, "MB")
    res.add("worker RSS (Feishu enabled)", worker_rss, "MB")
    lark_free = not any(m.startswith("lark_oapi") for m in web_mods | worker_mods)
    res.add("lark_oapi imported by web or worker", 0.0 if lark_free else 1.0, "", "0", lark_free and bool(web_mods)
            and bool(worker_mods))
    res.notes.append(f"scheduling: the web, beat and fakes at autogroup niceness {args.renice}, "
                     f"the worker at {args.renice + args.worker_nice} (PICOBOT_WORKER_NICE={args.worker_nice})")
    res.notes += [f"{len(alone)} + {len(acks)} of {n} + {n} events acknowledged with 200 "
                  f"({alone_failures} + {failures} failed); "
                  f"{len(loaded_lag)} replies matched to turns under load, {len(light_lag)} of {args.lag_events} light",
                  f"sys.modules seen: web {len(web_mods)} modules, worker {len(worker_mods)} "
                  f"(0 means the probe did not run: the lark_oapi check then counts as missed)"]
    res.raw = {"cold_ms": cold, "alone_ms": alone, "acks_ms": acks, "web_cpu_ms": web_cpu_ms, "drain_rate": drain_rate, "bare_ms": bare, "lag_loaded_ms": loaded_lag, "lag_light_ms": light_lag,
               "web_rss": web_rss, "worker_rss": worker_rss, "lark_free": lark_free}
    return res


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
