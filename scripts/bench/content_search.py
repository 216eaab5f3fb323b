"""content_search over 10,000 files: p50/p95 of one search, against `grep -rn` over the same tree.

The tree (generated in a temporary folder, fixed seed): 10,000 files in 100 folders, text of mixed
sizes (200 bytes to 64 KB, a few of 1 MB, a few over the 2 MB limit) and 2 % binary files. Each search
is a different word pattern that matches in some files (so output is built too), run through the tool
as the agent runs it. Same-run baseline: `grep -rn -I -E` over the same tree (a subprocess, like the
tool's own answer it prints every matching line). The figure is what a search costs the agent; the
ratio says how far the pure-Python walk and regex are from grep's C.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from scripts.bench.common import Result, main, percentile

NAME = "content_search"
FILES = 10_000
FOLDERS = 100
SEARCHES = 15
_WORDS = [f"w{i:04d}" for i in range(5000)]


def make_tree(root: Path, rng: random.Random) -> int:
    """Write the files; returns their total size in bytes."""
    total = 0
    line_pool = [" ".join(rng.choices(_WORDS, k=10)) + "\n" for _ in range(4000)]
    for i in range(FILES):
        folder = root / f"d{i % FOLDERS:03d}"
        folder.mkdir(exist_ok=True)
        if i % 50 == 7:
            data = bytes(rng.getrandbits(8) for _ in range(2048)) + b"\x00" * 16
        else:
            size = 1_048_576 if i % 2000 == 3 else 2_200_000 if i % 5000 == 11 else int(rng.lognormvariate(8, 1.3))
            size = max(200, size)
            chunks, written = [], 0
            while written < size:
                line = rng.choice(line_pool)
                chunks.append(line)
                written += len(line)
            data = "".join(chunks).encode()
        (folder / f"f{i:05d}.txt").write_bytes(data)
        total += len(data)
    return total


def timed(fn, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for i in range(n):
        started = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - started) * 1000)
    return out


def run(args: argparse.Namespace) -> Result:
    from picobot.tools.base import ToolContext
    from picobot.tools.search import ContentSearchTool

    result = Result(NAME)
    rng = random.Random(20)
    patterns = [rf"\b{rng.choice(_WORDS)} {rng.choice(_WORDS)}\b" for _ in range(SEARCHES)]
    with tempfile.TemporaryDirectory(prefix="picobot-bench-search-") as raw:
        root = Path(raw) / "ws"
        root.mkdir()
        total = make_tree(root, rng)
        ctx = ToolContext("bench", "bench", "bench", "bench", "bench", root, settings={"search_timeout_secs": 120})
        tool = ContentSearchTool()
        tool.execute({"pattern": "warm-up-nothing"}, ctx)  # page cache warm for both
        ours = timed(lambda i: tool.execute({"pattern": patterns[i]}, ctx), SEARCHES)
        grep = shutil.which("grep")
        base = timed(lambda i: subprocess.run([grep, "-rn", "-I", "-E", patterns[i], "."],
                                              cwd=root, capture_output=True), SEARCHES) if grep else []
    p50, p95 = percentile(ours, 50), percentile(ours, 95)
    b50 = percentile(base, 50) if base else float("nan")
    result.add("search 10,000 files p50", round(p50, 1), "ms", baseline=f"grep -rn p50 {b50:.1f} ms" if base else "",
               ratio=f"{p50 / b50:.1f}x grep" if base else "")
    result.add("search 10,000 files p95", round(p95, 1), "ms",
               baseline=f"grep -rn p95 {percentile(base, 95):.1f} ms" if base else "")
    result.notes.append(f"{FILES:,} files, {total / 1e6:.0f} MB (2 % binary, 2 over the 2 MB limit), "
                        f"{SEARCHES} searches of two-word patterns; grep -rn -I -E over the same tree")
    result.raw.update(ours_ms=ours, grep_ms=base, bytes=total)
    return result


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, doc=__doc__))
