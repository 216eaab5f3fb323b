"""Fallback: how long a call takes to fall over to the next provider when the first refuses connections.

A fallback chain whose first provider points at a port where nothing listens and whose second is the
fake LLM (its own process). Each sample is one whole streamed call through the chain, from
`stream()` to the Completed event; the same-run baseline is the same call made directly on the second
provider. Two cases: no retries (backoff 0), and two retries with a fixed 50 ms backoff each (100 ms
configured). Target: the chain's p50 is at most 100 ms over baseline + configured backoff.
The breakers never open here (`breaker_failures` 0), so every sample really tries the dead provider.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from typing import Any, Callable

from scripts.bench.common import FakeLLMProcess, Result, free_port, log, main

NAME = "fallback"
TARGET_OVER_MS = 100.0
FIXED_DELAY = 0.05


def _providers(url: str, retries: int) -> tuple[Any, Any]:
    import redis

    from picobot.providers._common import RetryPolicy
    from picobot.providers.fallback import BreakerSettings, ChainEntry, CircuitBreakers, FallbackProvider
    from picobot.providers.openai_provider import OpenAIProvider

    class FixedDelay(RetryPolicy):
        def delay(self, retry: int, retry_after: float | None = None) -> float:
            return FIXED_DELAY  # no jitter: the configured backoff is known exactly

    dead = OpenAIProvider("bench-dead", base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="sk-bench",
                          timeout=10, retry_policy=FixedDelay(max_retries=retries))
    backup = OpenAIProvider("bench-backup", base_url=url, api_key="sk-bench", timeout=10, max_retries=0)
    breakers = CircuitBreakers(redis.Redis.from_url("redis://127.0.0.1:6379/0"),
                               lambda key: BreakerSettings(failures=0))
    chain = FallbackProvider([ChainEntry("dead:default", dead, "fake-model"),
                              ChainEntry("backup:default", backup, "fake-model")], breakers)
    return chain, backup


def _call(provider: Any) -> float:
    from picobot.domain.messages import ChatMessage
    from picobot.providers.base import ChatRequest, Completed

    request = ChatRequest(model="fake-model", messages=[ChatMessage(role="user", content="bench-fallback")])
    started = time.perf_counter()
    done = [e for e in provider.stream(request) if isinstance(e, Completed)]
    elapsed = (time.perf_counter() - started) * 1000
    assert done, "the call did not complete"
    return elapsed


def _p50(fn: Callable[[], float], n: int) -> float:
    for _ in range(5):
        fn()
    return statistics.median(fn() for _ in range(n))


def run(args: argparse.Namespace) -> Result:
    result = Result(NAME)
    logging.getLogger("picobot.providers").setLevel(logging.ERROR)  # one retry/fallback warning per sample
    llm = FakeLLMProcess()
    try:
        llm.add_rule("bench-fallback", {"content": "ok"}, repeat=True)
        for retries in (0, 2):
            chain, backup = _providers(llm.openai_url, retries)
            base = _p50(lambda: _call(backup), args.n)
            through = _p50(lambda: _call(chain), args.n)
            backoff = retries * FIXED_DELAY * 1000
            over = through - base - backoff
            log(f"retries {retries}: direct {base:.1f} ms, via chain {through:.1f} ms, backoff {backoff:.0f} ms")
            result.add(f"fall-over after connection refused, {retries} retries (p50, over backoff)", round(over, 1),
                       "ms", target=f"<= {TARGET_OVER_MS:g}", ok=over <= TARGET_OVER_MS,
                       baseline=f"direct call {base:.1f} ms + backoff {backoff:.0f} ms",
                       ratio=f"{through / (base + backoff):.2f}x")
            result.raw[f"retries_{retries}"] = {"direct_ms": base, "chain_ms": through, "backoff_ms": backoff}
    finally:
        llm.stop()
    result.raw["n"] = args.n
    return result


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", type=int, default=50, help="measured calls per case (default 50)")


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, _args, doc=__doc__))
