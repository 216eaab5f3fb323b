"""Plugin hooks: what the stage hook calls of one turn cost, with no plugins and with three no-op ones.

One turn with one tool round calls the stage hooks 9 times: on_input, pre_action and post_action twice
(two model calls), before_toolcall and after_toolcall once, before_output, after_output. This runs
that sequence through a real PluginHost (the built-in capabilities registered, as in a worker) many
times in process and reports the p50 per turn. The same-run baseline is the same sequence of plain
Python calls to no-op functions. Budgets: <= 0.5 ms p50 with no plugins, <= 2 ms with three.
Third-party plugins run in the host's hook threads (timeouts), so the three-plugin case includes
those hand-offs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from scripts.bench.common import Result, log, main

NAME = "plugin_hooks"
TURNS = 2000
BUDGET_NONE_MS = 0.5
BUDGET_THREE_MS = 2.0


class NoOp:
    """A third-party plugin that implements every stage hook and does nothing."""

    def __init__(self) -> None:
        from picobot.plugins import hookimpl

        for name in ("on_input", "pre_action", "post_action", "before_toolcall", "after_toolcall",
                     "before_output", "after_output"):
            setattr(self, name, hookimpl(specname=name)(_noop))


def _noop(ctx: Any) -> None:
    return None


def one_turn(host: Any, ctx: Any, message: Any, call: Any, turn: Any) -> None:
    host.on_input(ctx, message)
    for _ in range(2):
        host.pre_action(ctx, [])
        host.post_action(ctx, None)
    host.before_toolcall(ctx, call)
    host.after_toolcall(ctx, call, "result")
    host.before_output(ctx, "answer")
    host.after_output(ctx, turn)


def baseline_turn(fns: list[Callable[..., None]]) -> None:
    for fn in fns:
        fn(None)


def p50_ms(run: Callable[[], None], turns: int) -> float:
    for _ in range(200):  # warm up
        run()
    samples = []
    for _ in range(turns):
        start = time.perf_counter_ns()
        run()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(samples)


def run(args: argparse.Namespace) -> Result:
    from picobot.app import build_plugins
    from picobot.config import Config
    from picobot.plugins.types import InputMessage, StageContext, ToolCallView, TurnView

    result = Result(NAME)
    ctx = StageContext("web:c:d", "web", "c", "owner", "t1")
    message, call = InputMessage("hello"), ToolCallView("c1", "calculator", {"expression": "1+1"})
    turn = TurnView("web:c:d", "t1", "web", "c", "owner", "default", "completed", "answer")
    with tempfile.TemporaryDirectory(prefix="picobot-bench-hooks-") as raw:
        config = Config(home=Path(raw))
        none = build_plugins(config, discover=False)
        three = build_plugins(config, discover=False)
        for i in range(3):
            three.register(f"noop{i}", NoOp(), source="file")
        fns = [_noop] * 9
        base = p50_ms(lambda: baseline_turn(fns), args.turns)
        bare = p50_ms(lambda: one_turn(none, ctx, message, call, turn), args.turns)
        full = p50_ms(lambda: one_turn(three, ctx, message, call, turn), args.turns)
        three.close()
        none.close()
    log(f"baseline {base * 1000:.1f} µs, no plugins {bare * 1000:.1f} µs, three no-op plugins {full * 1000:.1f} µs")
    result.add("stage hooks per turn, no plugins (p50)", round(bare * 1000, 1), "µs",
               target=f"<= {BUDGET_NONE_MS * 1000:g}", ok=bare <= BUDGET_NONE_MS,
               baseline=f"plain calls {base * 1000:.1f} µs", ratio=f"{bare / base:.1f}x")
    result.add("stage hooks per turn, three no-op plugins (p50)", round(full * 1000, 1), "µs",
               target=f"<= {BUDGET_THREE_MS * 1000:g}", ok=full <= BUDGET_THREE_MS,
               baseline=f"plain calls {base * 1000:.1f} µs", ratio=f"{full / base:.0f}x")
    result.raw.update({"baseline_ms": base, "none_ms": bare, "three_ms": full, "turns": args.turns})
    return result


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=TURNS, help=f"turns measured per case (default {TURNS})")


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, _args, doc=__doc__))
