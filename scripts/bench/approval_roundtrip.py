"""Approvals: the round trip of a paused tool call, through a real stack (web, one worker, fake LLM process).

A turn asks `bash` for `rm -rf <folder>` (a folder made for it in the workspace), which the built-in
rule pauses (`tools.approval.mode: ask`). The client answers `/approve` the moment the
`approval_requested` frame arrives, like a person who never hesitates. Measured:

1. The round trip: `approval_requested` received -> `/approve` sent and written (SQL, then the Redis
   push) -> the waiting tool thread wakes -> the tool runs -> its result shows in a `turn_updated`
   frame. p50/p95.
2. The whole turn with the approval against the same turn whose command no rule catches (`rm -r`,
   same folder work), alternated in one run: what asking adds beyond the person's own time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from scripts.bench.common import BENCH_GATEWAY, FakeLLMProcess, Result, log, main, percentile
from tests.stack import Stack, WsClient, base_config

NAME = "approval_roundtrip"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--turns", type=int, default=30, help="measured turns per side (default 30)")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured turns per side first (default 3)")


@contextmanager
def _stack() -> Iterator[tuple[Stack, FakeLLMProcess]]:
    tmp = Path(tempfile.mkdtemp(prefix="picobot-bench-approval-"))
    llm = FakeLLMProcess(tmp / "fake_llm.log")
    stack = None
    try:
        cfg = base_config(llm.url, 0)
        cfg["gateway"].update(BENCH_GATEWAY)
        cfg["tools"] = {"approval": {"mode": "ask", "timeout_secs": 60}}
        stack = Stack(tmp, llm.url, config=cfg)
        cfg["gateway"]["port"] = stack.port
        (stack.home / "config.json").write_text(json.dumps(cfg))
        stack.start_web()
        stack.start_worker("w1", concurrency=8)
        yield stack, llm
    finally:
        if stack is not None:
            stack.stop()
        llm.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _tool_done(frame: dict[str, Any]) -> bool:
    return frame["type"] == "turn_updated" and any(
        b.get("type") == "tool" and b.get("status") in ("done", "error") for b in frame.get("blocks", []))


def _next(client: WsClient, start: int, pred: Any) -> dict[str, Any]:
    """The first frame from `start` on that matches, received already or still to come."""
    for frame in client.frames[start:]:
        if pred(frame):
            return frame
    return client.recv_until(pred)


def _turn(stack: Stack, llm: FakeLLMProcess, client: WsClient, flags: str) -> tuple[float, float | None]:
    """(whole turn ms, round trip ms or None when nothing was asked)."""
    tag = uuid.uuid4().hex[:10]
    folder = stack.home.parent / "home-workspace" / f"bench-{tag}"
    folder.mkdir(parents=True)
    llm.add_rule(f"work-{tag}", {"tool_calls": [{"name": "bash", "arguments": {"command": f"rm {flags} {folder.name}"}}]},
                 {"content": f"done {tag}"})
    start = len(client.frames)
    t0 = time.perf_counter()
    acc = client.say(f"work-{tag}")
    trip = None
    frame = _next(client, start, lambda f: f["type"] in ("approval_requested", "turn_completed") or _tool_done(f))
    if frame["type"] == "approval_requested":
        asked = time.perf_counter()  # (the frame may have come with the `accepted` one: then this is later)
        start = len(client.frames)
        client.send({"type": "command", "command": f"/approve {frame['approval_id']}", "id": "a-" + tag})
        _next(client, start, _tool_done)
        trip = (time.perf_counter() - asked) * 1000
    client.wait_completed(acc["seq"])
    whole = (time.perf_counter() - t0) * 1000
    if folder.exists():
        raise RuntimeError(f"the tool did not run for {flags}")
    return whole, trip


def run(args: argparse.Namespace) -> Result:
    plain: list[float] = []
    asked: list[float] = []
    trips: list[float] = []
    with _stack() as (stack, llm):
        client = stack.client()
        for i in range(args.warmup + args.turns):
            p, _ = _turn(stack, llm, client, "-r")
            a, trip = _turn(stack, llm, client, "-rf")
            if i >= args.warmup and trip is not None:
                plain.append(p)
                asked.append(a)
                trips.append(trip)
        client.close()
    result = Result(NAME)
    p50, p95 = percentile(trips, 50), percentile(trips, 95)
    base50, asked50 = percentile(plain, 50), percentile(asked, 50)
    log(f"round trip p50 {p50:.1f} ms p95 {p95:.1f} ms; turn {base50:.1f} ms plain, {asked50:.1f} ms asked")
    result.add("approval round trip (request received -> /approve -> tool result shown), p50", round(p50, 1), "ms",
               baseline=f"the same turn with no rule matching {base50:.1f} ms (p50)",
               ratio=f"{p50 / base50:.2f}x that whole turn")
    result.add("approval round trip, p95", round(p95, 1), "ms")
    result.add("whole turn with an instant approval, p50", round(asked50, 1), "ms",
               baseline=f"not asked {base50:.1f} ms", ratio=f"{asked50 - base50:+.1f} ms")
    result.raw.update(plain_ms=plain, asked_ms=asked, roundtrip_ms=trips)
    result.notes.append("both sides run bash in the same sandbox on a folder of the workspace; the client "
                        "answers as soon as the request frame arrives")
    return result


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, doc=__doc__))
