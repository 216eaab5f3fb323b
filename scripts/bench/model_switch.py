"""Model switch: what a dialog's `/model` choice adds to the start of each turn.

Each turn now looks up the dialog's stored choice among its agent's models (`Config.dialog_choice`,
which resolves the agent's `fallback` and `models` references) before resolving the agent, and
builds its provider chain from resolved references. Measured in-process on the config the worker
holds, in two shapes: the test stack's (one fallback entry, two more models, one profile) and a
large one (16 fallback entries and 64 `models` entries, half of them profiles). The same-run
baseline is the lookup a turn made before (`Config.agent(name)`). Target: at most 100 µs per turn
(a model call takes milliseconds to seconds).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from scripts.bench.common import Result, log, main

NAME = "model_switch"
TARGET_US = 100.0


def _config(fallbacks: int, extra: int) -> Any:
    from picobot.config.schema import Config

    models = {"default": {"model_id": "m-default"}}
    models.update({f"m{i}": {"model_id": f"m-{i}"} for i in range(max(fallbacks, extra))})
    profiles = {f"p{i}": {"provider": "other", "model": f"m{i}"} for i in range(0, extra, 2)}
    listed = [f"p{i}" if i % 2 == 0 else f"default:m{i}" for i in range(extra)]
    return Config.model_validate({
        "providers": {"default": {"base_url": "http://127.0.0.1:9/v1"}, "other": {"base_url": "http://127.0.0.1:9/v1"}},
        "models": models, "profiles": profiles,
        "agents": {"default": {"provider": "default", "model": "default",
                               "fallback": [f"other:m{i}" for i in range(fallbacks)], "models": listed}},
    })


def _per_call_us(fn: Callable[[], Any], n: int) -> float:
    """Median over 7 rounds of the mean time of one call in a round of n calls, in µs."""
    rounds = []
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(rounds)


def run(args: argparse.Namespace) -> Result:
    result = Result(NAME)
    for label, cfg, pick in (("test stack's config (1 fallback, 2 models)", _config(1, 2), ("default", "m1")),
                             ("large config (16 fallback, 64 models)", _config(16, 64), ("default", "m63"))):
        base = _per_call_us(lambda: cfg.agent("default"), args.n)
        chosen = _per_call_us(lambda: cfg.agent("default", cfg.dialog_choice("default", *pick)), args.n)
        chain = _per_call_us(lambda: cfg.fallback_choices("default"), args.n)
        total = chosen + chain
        log(f"{label}: agent() {base:.2f} µs, with the choice {chosen:.2f} µs, fallback refs {chain:.2f} µs")
        result.add(f"turn start with a chosen model, {label}", round(total, 2), "µs", target=f"<= {TARGET_US:g}",
                   ok=total <= TARGET_US, baseline=f"agent() alone {base:.2f} µs", ratio=f"{total / base:.1f}x")
        result.raw[label] = {"agent_us": base, "with_choice_us": chosen, "fallback_refs_us": chain}
    result.raw["n"] = args.n
    return result


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", type=int, default=2000, help="calls per round (default 2000)")


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, _args, doc=__doc__))
