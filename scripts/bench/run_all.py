"""Run the benchmarks (each in its own process, each with its own stack) and print a summary.

    .venv/bin/python -m scripts.bench.run_all [--only overhead,cpu] [--json results.json] [--db postgres]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.common import HEADER, ROOT, Result, metric_rows, table

BENCHES = ("overhead", "concurrency", "cpu", "memory", "fake_llm", "prompt_cost", "mcp_call", "chat_cli",
           "compaction", "subagent", "memory_search", "scheduler",
           "feishu", "plugin_hooks", "channels", "observability", "openai_api", "webhooks", "log_capture",
           "operator_pages", "fallback", "model_switch", "usage_report", "agent_files", "titles", "budget_check",
           "content_search", "browser", "approval_roundtrip", "startup")


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.bench.run_all", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHES)}")
    p.add_argument("--json", metavar="PATH", help="write all results as JSON here")
    p.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite",
                   help="database of the stacks (postgres: PICOBOT_TEST_PG_URL, a fresh schema)")
    args = p.parse_args()
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BENCHES)
    unknown = set(names) - set(BENCHES)
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")

    results: list[Result] = []
    failed: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="picobot-bench-all-") as tmp:
        for name in names:
            out = Path(tmp) / f"{name}.json"
            print(f"\n##### {name} #####", flush=True)
            rc = subprocess.call([sys.executable, "-m", f"scripts.bench.{name}", "--json", str(out), "--db", args.db],
                                 cwd=ROOT)
            if rc != 0 or not out.exists():
                failed.append(name)
                continue
            results.append(Result.from_json(json.loads(out.read_text())))

    print(f"\n===== summary ({time.monotonic() - started:.0f} s; {platform.python_implementation()} "
          f"{platform.python_version()}, {_cpus()} CPUs, database {args.db}) =====")
    rows = []
    for r in results:
        for row in metric_rows(r):
            if row[-1] != "-":  # the targeted figures only; each benchmark printed its details above
                rows.append([r.bench, *row])
    print(table(rows, ["bench", *HEADER]))
    loads = [f"{r.bench} {r.raw.get('machine', {}).get('other_cpu_share', 0):.0%}" for r in results]
    print(f"\nother processes' share of the machine's CPU during each: {', '.join(loads)}"
          + ("  ** disturbed: rerun on a quiet machine **"
             if any(r.raw.get("machine", {}).get("other_cpu_share", 0) > 0.05 for r in results) else ""))
    misses = [f"{r.bench}: {m.name}" for r in results for m in r.metrics if m.ok is False]
    if failed:
        print(f"\nFAILED to run: {', '.join(failed)}")
    print(f"\n{sum(1 for r in results for m in r.metrics if m.ok)} targets met, {len(misses)} missed"
          + (": " + "; ".join(misses) if misses else ""))
    if args.json:
        Path(args.json).write_text(json.dumps([r.to_json() for r in results], indent=2))
    return 1 if failed else 0


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    raise SystemExit(main())
