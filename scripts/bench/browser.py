"""The browser tool: `navigate` to a local page (Chromium renders it, JavaScript runs, the text comes back
through the network guard's route and proxy) against a plain httpx GET of the same page, alternating in one
run; and the memory an open browser context costs (the summed RSS and PSS of the Chromium processes with
one dialog's context open, then with N).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from scripts.bench.common import Result, log, main, p50_p99, percentile, process_tree, pss_mb, rss_mb

NAME = "browser"
PAGE = (b"<html><head><title>Bench</title></head><body><h1 id=h>static</h1>"
        + b"<p>" + b"A paragraph of ordinary text for the page. " * 40 + b"</p>"
        + b"<script>document.getElementById('h').textContent = 'rendered';</script></body></html>")


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:
        pass


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--navigations", type=int, default=100, help="navigations per side (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="unmeasured navigations per side first (default 10)")
    p.add_argument("--contexts", type=int, default=5, help="open contexts for the memory figure (default 5)")


def run(args: argparse.Namespace) -> Result:
    import httpx

    from picobot.browser.engine import BrowserEngine, chromium_path
    from picobot.browser.tool import BrowserTool
    from picobot.config.schema import BrowserConfig
    from picobot.security.netpolicy import NetworkPolicy
    from picobot.tools.base import ToolContext

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    with tempfile.TemporaryDirectory(prefix="picobot-bench-browser-") as tmp:
        engine = BrowserEngine(BrowserConfig(), NetworkPolicy.from_allow(["127.0.0.1/32"]), Path(tmp))
        tool = BrowserTool(engine)
        try:
            def ctx(i: int) -> ToolContext:
                return ToolContext(f"bench:c:{i}", "bench", "c", "u", "t", Path(tmp) / "ws")

            def ours() -> str:
                return str(tool.execute({"action": "navigate", "url": url}, ctx(0)))

            with httpx.Client() as client:
                def plain() -> str:
                    return client.get(url).text

                for _ in range(args.warmup):
                    ours(), plain()
                a, b = [], []
                log(f"measuring {args.navigations} navigations per side, alternating")
                for _ in range(args.navigations):
                    a.append(_timed(ours, "rendered"))
                    b.append(_timed(plain, "static"))
            one = _chromium_memory()
            for i in range(1, args.contexts):
                tool.execute({"action": "navigate", "url": url}, ctx(i))
            many = _chromium_memory()
            executable = chromium_path(None)
        finally:
            engine.close()
            server.shutdown()
    return _result(args, a, b, one, many, executable)


def _timed(fn: Any, expected: str) -> float:
    started = time.perf_counter()
    out = fn()
    elapsed = (time.perf_counter() - started) * 1000
    if expected not in out:
        raise RuntimeError(f"unexpected page {out[:120]!r}")
    return elapsed


def _chromium_memory() -> tuple[float, float | None]:
    """Summed RSS and PSS (MB) of this process's Chromium processes (the browser and its renderers)."""
    time.sleep(1.0)  # let the renderers settle after the last page
    pids = [p for p in process_tree(os.getpid()) if p != os.getpid() and "chrom" in _comm(p)]
    return rss_mb(pids), pss_mb(pids)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip().lower()
    except OSError:
        return ""


def _result(args: argparse.Namespace, ours: list[float], plain: list[float], one: tuple[float, float | None],
            many: tuple[float, float | None], executable: str) -> Result:
    o50, o95 = percentile(ours, 50), percentile(ours, 95)
    p50, p95 = percentile(plain, 50), percentile(plain, 95)
    res = Result(NAME)
    res.add("navigate to a local page, p50", o50, "ms", baseline=f"httpx GET p50 {p50:.2f} ms",
            ratio=f"{o50 / p50:.1f}x httpx GET")
    res.add("navigate to a local page, p95", o95, "ms", baseline=f"httpx GET p95 {p95:.2f} ms",
            ratio=f"{o95 / p95:.1f}x httpx GET")
    n = args.contexts
    rss_per = (many[0] - one[0]) / (n - 1) if n > 1 else 0.0
    res.add("RSS per open context", rss_per, "MB", baseline=f"Chromium with 1 context {one[0]:.0f} MB RSS",
            ratio=f"{n} contexts: {many[0]:.0f} MB")
    if one[1] is not None and many[1] is not None:
        res.add("  PSS per open context", (many[1] - one[1]) / max(1, n - 1), "MB",
                baseline=f"Chromium with 1 context {one[1]:.0f} MB PSS")
    _, o99 = p50_p99(ours)
    res.add("  navigate, p99", o99, "ms")
    res.notes.append(f"{args.navigations} navigations per side after {args.warmup} warm-up ones, alternating, one "
                     f"dialog's context reused; Chromium: {executable}, headless, through the guard's route and proxy")
    res.notes.append("RSS sums each process's resident pages, so pages shared between Chromium's processes count "
                     "more than once; PSS splits them")
    res.raw = {"navigate_ms": ours, "httpx_ms": plain, "rss_one_mb": one[0], "rss_many_mb": many[0],
               "pss_one_mb": one[1], "pss_many_mb": many[1], "contexts": n}
    return res


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, add_args, __doc__))
