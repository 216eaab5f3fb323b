"""Agent files: what resolving a file agent costs per turn (a stat scan of `agents/`), and a re-read.

In process, over real files in a temp home holding 20 agent files. Cases: resolving the config agent
`default` (no scan: the same-run baseline), resolving a file agent when nothing changed (the scan every
turn's start pays), and resolving it after an edit (the whole folder re-read into a new generation).
Target: the unchanged-folder resolve under 1 ms — a turn's model call takes seconds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

from scripts.bench.common import Result, main

NAME = "agent_files"
FILES = 20
ROUNDS = 2000
TARGET_US = 1000.0


def _config(home: Path):  # type: ignore[no-untyped-def]
    from picobot.config.schema import Config

    return Config.model_validate({
        "providers": {"default": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"default": {"model_id": "m"}, "big": {"model_id": "m-big"}},
        "agents": {"default": {"provider": "default", "model": "default"}}, "home": home})


def _write(home: Path, i: int, version: int = 0) -> Path:
    path = home / "agents" / f"agent-{i:02d}.md"
    path.write_text(f"---\ndescription: agent {i}\nmodel: default:big\ntools: [read, bash, task]\n"
                    f"delegates: [reviewer]\n---\nInstructions of agent {i}, version {version}.\n" + "x" * 2000)
    return path


def _per_call_us(fn: Callable[[int], object], rounds: int) -> float:
    started = time.perf_counter()
    for i in range(rounds):
        fn(i)
    return round((time.perf_counter() - started) / rounds * 1e6, 1)


def run(args: argparse.Namespace) -> Result:
    result = Result(NAME)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "agents").mkdir()
        for i in range(FILES):
            _write(home, i)
        cfg = _config(home)
        cfg.agent("agent-01")  # the first reading
        baseline = _per_call_us(lambda _: cfg.agent("default"), ROUNDS)
        unchanged = _per_call_us(lambda _: cfg.agent("agent-01"), ROUNDS)
        edited = _write(home, 5)

        def after_edit(i: int) -> object:
            os.utime(edited, ns=(i + 1, i + 1))  # a new mtime: the next resolve re-reads the folder
            return cfg.agent("agent-01")

        reread = _per_call_us(after_edit, ROUNDS // 10)
        generation = cfg.agent_files().current().number
    result.add("resolve: config agent (baseline)", baseline, "us/call")
    result.add(f"resolve: file agent, {FILES} files unchanged", unchanged, "us/call", target=f"<= {TARGET_US:g}",
               ok=unchanged <= TARGET_US, baseline=f"config agent {baseline:g} us",
               ratio=f"{unchanged / baseline:.1f}x config agent")
    result.add(f"resolve: file agent after an edit ({FILES} files re-read)", reread, "us/call",
               baseline=f"unchanged {unchanged:g} us", ratio=f"{reread / unchanged:.1f}x unchanged")
    result.raw.update(files=FILES, rounds=ROUNDS, generations=generation)
    return result


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, doc=__doc__))
