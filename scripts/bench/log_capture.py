"""Log capture: what copying each record to the Redis stream (picobot/logstream) adds to a logging call.

A logger with the production stderr handler (formatter + RedactingFilter, writing to /dev/null) is called
many times; then the same with the capture handler added, shipping to a real redis-server. The same-run
baseline is the first case. Also measured: how fast the shipper drains a burst into Redis, and that a
Redis that is down costs the caller nothing extra (lines are dropped and counted). Budget: <= 15 µs
added per call (p50), since a turn logs a handful of lines.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.bench.common import Result, log, main

NAME = "log_capture"
CALLS = 20_000
BUDGET_US = 15.0


def _logger(handlers: list[logging.Handler]) -> logging.Logger:
    logger = logging.getLogger(f"picobot.bench.capture.{id(handlers)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    for h in handlers:
        logger.addHandler(h)
    return logger


def _stderr_handler(secrets: set[str]) -> logging.Handler:
    from picobot.logs.setup import RedactingFilter

    handler = logging.StreamHandler(open("/dev/null", "w"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter(secrets))
    return handler


def _capture(url: str, secrets: set[str], **kw: Any) -> Any:
    from picobot.logs.setup import RedactingFilter
    from picobot.logstream.capture import CaptureHandler, CaptureSettings
    from picobot.logstream.process import ProcessLabel

    handler = CaptureHandler(url, CaptureSettings(**kw), ProcessLabel("bench", "bench@here", "here"))
    handler.addFilter(RedactingFilter(secrets))
    return handler


def per_call_us(logger: logging.Logger, calls: int) -> float:
    samples = []
    for i in range(calls):
        start = time.perf_counter_ns()
        logger.info("turn %s finished in %d ms for session %s", "t-1234", i, "web:abc:default")
        samples.append((time.perf_counter_ns() - start) / 1000)
        if i % 2000 == 1999:
            time.sleep(0.3)  # let the shipper drain, as between turns; the buffer never fills
    return statistics.median(samples)


def run(args: argparse.Namespace) -> Result:
    import redis

    from picobot.cli.embedded_redis import free_port, start_embedded
    from picobot.logstream import STREAM_KEY

    result = Result(NAME)
    secrets = {"sk-bench-" + "X" * 24, "another-secret-value"}
    with tempfile.TemporaryDirectory(prefix="picobot-bench-logs-") as raw:
        port = free_port()
        proc, url = start_embedded(Path(raw) / "redis", port)
        client = redis.Redis.from_url(url, decode_responses=True)
        try:
            base = per_call_us(_logger([_stderr_handler(secrets)]), args.calls)
            capture = _capture(url, secrets)
            with_capture = per_call_us(_logger([_stderr_handler(secrets), capture]), args.calls)

            client.delete(STREAM_KEY)
            burst = _logger([_capture(url, secrets, buffer_lines=args.calls + 1, max_lines=args.calls * 2)])
            start = time.perf_counter()
            for i in range(args.calls):
                burst.info("burst line %d", i)
            while client.xlen(STREAM_KEY) < args.calls and time.perf_counter() - start < 60:
                time.sleep(0.01)
            drain = args.calls / (time.perf_counter() - start)

            proc.terminate()
            proc.wait(timeout=10)
            down_handler = _capture(url, secrets)
            down = per_call_us(_logger([_stderr_handler(secrets), down_handler]), args.calls)
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)
    added = with_capture - base
    log(f"stderr only {base:.1f} µs, + capture {with_capture:.1f} µs, + capture with Redis down {down:.1f} µs, "
        f"burst drained at {drain:,.0f} lines/s")
    result.add("added to a logging call by the capture (p50)", round(added, 1), "µs", target=f"<= {BUDGET_US:g}",
               ok=added <= BUDGET_US, baseline=f"stderr only {base:.1f} µs", ratio=f"{with_capture / base:.2f}x")
    result.add("logging call, capture with Redis down (p50)", round(down, 1), "µs",
               baseline=f"stderr only {base:.1f} µs", ratio=f"{down / base:.2f}x")
    result.add("burst shipped into the stream", round(drain), "lines/s")
    result.raw.update({"base_us": base, "capture_us": with_capture, "down_us": down, "drain_lines_per_s": drain,
                       "calls": args.calls, "dropped_while_down": down_handler.dropped_total})
    return result


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=CALLS, help=f"logging calls per case (default {CALLS})")


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, _args, doc=__doc__))
