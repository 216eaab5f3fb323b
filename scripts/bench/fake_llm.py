"""The fake LLM under load: 200 concurrent requests that each take 500 ms.

Baseline in the same run: one such request alone. The ratio says how far concurrency stretches a
request; near 1x means the fake serves them in parallel (tests rely on that, never on the figure).
"""

from __future__ import annotations

import argparse
import threading
import time

import httpx

from scripts.bench.common import FakeLLMProcess, Result, main

NAME = "fake_llm"
DELAY_MS = 500


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--requests", type=int, default=200, help="concurrent requests (default 200)")


def _call(http: httpx.Client) -> int:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    return http.post("/v1/messages", json=body).status_code


def run(args: argparse.Namespace) -> Result:
    llm = FakeLLMProcess()
    try:
        llm.add_rule(None, {"delay_ms": DELAY_MS, "content": "slow"}, repeat=True)
        limits = httpx.Limits(max_connections=args.requests + 50, max_keepalive_connections=args.requests + 50)
        with httpx.Client(base_url=llm.url, limits=limits, timeout=60) as http:
            started = time.monotonic()
            _call(http)
            alone = time.monotonic() - started
            codes: list[int] = []
            threads = [threading.Thread(target=lambda: codes.append(_call(http))) for _ in range(args.requests)]
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            together = time.monotonic() - started
    finally:
        llm.stop()
    result = Result(NAME)
    result.add(f"{args.requests} concurrent requests, wall", together * 1000, "ms",
               baseline=f"one request alone {alone * 1000:.0f} ms", ratio=f"{together / alone:.2f}x")
    result.add("answered with 200", sum(1 for c in codes if c == 200), "", ok=codes == [200] * args.requests)
    return result


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
