"""MCP call overhead: one tool call over stdio through PicoBot's adapter (the tool registry's execute:
argument parsing and schema check, the hostile-argument check, the loop-thread hop, result text,
redaction) against the same call made directly with the mcp SDK's ClientSession on its own event
loop. Both talk to the same kind of server (scripts/mcp_demo.py, tool `echo`), measured alternately
in one run. Target: PicoBot adds <= 5 ms at p50.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from scripts.bench.common import ROOT, Result, log, main, p50_p99

NAME = "mcp_call"
TARGET_MS = 5.0
DEMO = str(ROOT / "scripts" / "mcp_demo.py")
ARGS = {"text": "hello from the benchmark " * 4}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--calls", type=int, default=300, help="calls per side (default 300)")
    p.add_argument("--warmup", type=int, default=30, help="unmeasured calls per side first (default 30)")


def run(args: argparse.Namespace) -> Result:
    direct = DirectClient()
    with tempfile.TemporaryDirectory(prefix="picobot-bench-mcp-") as tmp:
        registry, manager = _picobot_side(Path(tmp))
        try:
            ours, theirs = _measure(args, direct, registry, Path(tmp))
        finally:
            manager.close()
            direct.close()
    return _result(args, ours, theirs)


class DirectClient:
    """The baseline: the SDK's own stdio client and session, on an event loop thread of its own."""

    def __init__(self) -> None:
        import asyncio

        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        self._ready = threading.Event()
        self._done: Any = None
        self.session: Any = None
        self._future = asyncio.run_coroutine_threadsafe(self._hold(), self._loop)
        if not self._ready.wait(60):
            raise RuntimeError("the direct MCP client did not connect")

    async def _hold(self) -> None:
        import anyio
        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self._done = anyio.Event()
        params = StdioServerParameters(command=sys.executable, args=[DEMO])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            self.session = session
            self._ready.set()
            await self._done.wait()

    def call(self) -> str:
        import asyncio

        result = asyncio.run_coroutine_threadsafe(self.session.call_tool("echo", ARGS), self._loop).result(30)
        return result.content[0].text

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._done.set)
        self._future.result(15)
        self._loop.call_soon_threadsafe(self._loop.stop)


def _picobot_side(tmp: Path) -> tuple[Any, Any]:
    from picobot.config.schema import McpServerConfig
    from picobot.mcp import McpManager
    from picobot.tools.registry import ToolRegistry

    registry = ToolRegistry()
    manager = McpManager({"demo": McpServerConfig.model_validate({"command": sys.executable, "args": [DEMO]})},
                         registry, tmp).start()
    deadline = time.monotonic() + 60
    while manager.servers["demo"].status()["state"] != "connected":
        if time.monotonic() > deadline:
            raise RuntimeError(f"the MCP demo server did not connect: {manager.statuses()}")
        time.sleep(0.05)
    return registry, manager


def _measure(args: argparse.Namespace, direct: DirectClient, registry: Any, tmp: Path) -> tuple[list[float], list[float]]:
    from picobot.domain.messages import ToolCall
    from picobot.tools.base import ToolContext

    ctx = ToolContext("bench", "web", "bench", "bench", "turn", tmp, secrets=frozenset({"not-in-the-output"}))
    call = ToolCall("c1", "mcp_demo_echo", json.dumps(ARGS))
    expected = ARGS["text"]

    def ours() -> str:
        result = registry.execute(call, ctx, 20000)
        if result.is_error:
            raise RuntimeError(result.content)
        return result.content

    for _ in range(args.warmup):
        ours(), direct.call()
    a: list[float] = []
    b: list[float] = []
    log(f"measuring {args.calls} calls per side, alternating")
    for _ in range(args.calls):  # alternating, so both sides see the same machine load
        a.append(_timed(ours, expected))
        b.append(_timed(direct.call, expected))
    return a, b


def _timed(fn: Any, expected: str) -> float:
    started = time.perf_counter()
    out = fn()
    elapsed = (time.perf_counter() - started) * 1000
    if out != expected:
        raise RuntimeError(f"unexpected result {out[:80]!r}")
    return elapsed


def _result(args: argparse.Namespace, ours: list[float], theirs: list[float]) -> Result:
    o50, o99 = p50_p99(ours)
    t50, t99 = p50_p99(theirs)
    res = Result(NAME)
    res.add("added latency per MCP call, p50", o50 - t50, "ms", f"<= {TARGET_MS:g}", o50 - t50 <= TARGET_MS,
            f"direct SDK p50 {t50:.2f} ms", f"{o50 / t50:.2f}x direct SDK")
    res.add("  PicoBot call, p50", o50, "ms")
    res.add("  PicoBot call, p99", o99, "ms")
    res.add("  direct SDK call, p50", t50, "ms")
    res.add("  direct SDK call, p99", t99, "ms")
    res.add("added latency, p99", o99 - t99, "ms")
    res.notes.append(f"{args.calls} calls per side after {args.warmup} warm-up calls, alternating; both over stdio "
                     "to scripts/mcp_demo.py (tool echo), each client on its own event-loop thread")
    res.raw = {"picobot_ms": ours, "direct_ms": theirs}
    return res


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
