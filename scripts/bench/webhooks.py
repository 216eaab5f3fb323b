"""Inbound webhooks: acknowledgement latency of `POST /hooks/<name>` at a fixed rate, against the web
process alone, with `GET /health` at the same rate in the same run as the baseline.

Each webhook call is signed (HMAC-SHA256 over "<timestamp>." + body) and carries a unique body, prepared
before the timed phase; the 202 comes only after the run and its input are committed to SQL, so the figure
includes a database write transaction, the replay check in Redis and the turn enqueue. No worker runs:
the web process is measured on its own, as when the workers sit on other machines (the enqueued turns
wait in the broker). Requests are sent open-loop at --rate per second for --seconds after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from scripts.bench.common import BENCH_GATEWAY, FakeLLMProcess, Result, Stack, cpu_seconds, log, main, p50_p99, process_tree
from tests.stack import base_config

NAME = "webhooks"
SECRET = "bench-webhook-secret-0123456789"
TARGET_P99_MS = 50.0


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", type=float, default=200, help="requests per second (default 200)")
    p.add_argument("--seconds", type=float, default=5, help="length of each timed phase (default 5)")


Wire = tuple[str, str, bytes | None, dict[str, str]]  # method, url, body, headers


def blast(wires: list[Wire], rate: float, ok: int) -> tuple[list[float], int]:
    """Send the prepared requests open-loop at `rate`/s; (latencies ms of `ok` answers, other answers)."""
    lat: list[float] = []
    bad = [0]
    lock = threading.Lock()
    client = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=256, max_keepalive_connections=256))

    def one(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> None:
        t0 = time.perf_counter()
        try:
            good = client.request(method, url, content=body, headers=headers).status_code == ok
        except httpx.HTTPError:
            good = False
        ms = (time.perf_counter() - t0) * 1000
        with lock:
            if good:
                lat.append(ms)
            else:
                bad[0] += 1

    start = time.perf_counter()
    with ThreadPoolExecutor(128) as ex:
        for i, wire in enumerate(wires):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            ex.submit(one, *wire)
    client.close()
    return lat, bad[0]


def hook_wires(base: str, n: int) -> list[Wire]:
    from picobot.webhooks.signature import signed_headers

    out: list[Wire] = []
    for _ in range(n):
        body = json.dumps({"event": "order.paid", "order": {"id": uuid.uuid4().hex, "total": 12.5},
                           "items": ["tea", "cups"]}).encode()
        out.append(("POST", f"{base}/hooks/bench", body,
                    {"Content-Type": "application/json", **signed_headers(SECRET, body)}))
    return out


def run(args: argparse.Namespace) -> Result:
    tmp = Path(tempfile.mkdtemp(prefix="picobot-bench-webhooks-"))
    llm = FakeLLMProcess(tmp / "fake_llm.log")
    stack: Stack | None = None
    result = Result(NAME)
    try:
        stack = Stack(tmp, llm.url, gateway=BENCH_GATEWAY)
        cfg = base_config(llm.url, stack.port, **BENCH_GATEWAY)
        cfg["hooks"] = {"bench": {"secret": SECRET, "prompt": "Order {{ payload.order.id }} paid: {{ payload.items }}"}}
        (stack.home / "config.json").write_text(json.dumps(cfg, indent=2))
        stack.start_web()
        web_tree = process_tree(stack.procs["web"].pid)
        n = int(args.rate * args.seconds)
        health = [("GET", f"{stack.http}/health", None, {})] * n

        log(f"webhooks: warm-up, {int(args.rate)} of each at {args.rate:g}/s (not counted)")
        blast(health[: int(args.rate)], args.rate, 200)
        blast(hook_wires(stack.http, int(args.rate)), args.rate, 202)

        log(f"webhooks: baseline GET /health, {n} at {args.rate:g}/s")
        base_lat, base_bad = blast(health, args.rate, 200)
        wires = hook_wires(stack.http, n)
        log(f"webhooks: signed POST /hooks/bench, {n} at {args.rate:g}/s (web process alone)")
        cpu0 = cpu_seconds(web_tree)
        hook_lat, hook_bad = blast(wires, args.rate, 202)
        cpu_ms = (cpu_seconds(web_tree) - cpu0) * 1000 / max(1, n)

        b50, b99 = p50_p99(base_lat)
        h50, h99 = p50_p99(hook_lat)
        result.add("webhook ack p99", h99, "ms", target=f"<= {TARGET_P99_MS:g}", ok=h99 <= TARGET_P99_MS and not hook_bad,
                   baseline=f"GET /health p99 {b99:.1f} ms", ratio=f"{h99 / max(b99, 1e-9):.2f}x /health")
        result.add("webhook ack p50", h50, "ms", baseline=f"GET /health p50 {b50:.1f} ms",
                   ratio=f"{h50 / max(b50, 1e-9):.2f}x /health")
        result.add("web CPU per webhook", cpu_ms, "ms", baseline="", ratio="")
        result.notes.append(f"{n} signed webhook calls at {args.rate:g}/s: {len(hook_lat)} answered 202, {hook_bad} not; "
                            f"{len(base_lat)} /health answered 200, {base_bad} not")
        result.raw.update(rate=args.rate, seconds=args.seconds, hook_ms=hook_lat, health_ms=base_lat)
    finally:
        if stack is not None:
            stack.stop()
        llm.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return result


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
