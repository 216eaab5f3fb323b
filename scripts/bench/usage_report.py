"""Usage reports: what `/usage` and one `GET /api/usage` read cost as the usage ledger grows.

Two ledgers with the same shape over the same 365 UTC days (2,000 users, 5 agents, 6 models, 50 jobs,
one call in ten a sub-agent's): a small one (the same-run baseline) and one 30 times bigger. Each figure
is the p50 of the storage functions the surfaces call, on one connection, so the query is measured and
the HTTP server and the socket are left out. Targets: `/usage`'s reads (a dialog's and a user's totals)
stay flat as the ledger grows (p50 <= 10 ms on the big one); one Usage-page request (a 30-day grouping,
its total and its per-day series) p50 <= 250 ms on the big one.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from contextlib import ExitStack
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Callable

from scripts.bench.common import DB_CHOICE, Result, log, main, pg_schema

NAME = "usage_report"
TODAY = date(2026, 12, 3)
USERS = 2000
TARGET_USAGE_MS = 10.0
TARGET_PAGE_MS = 250.0


def _rows(n: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    models = [("openai", "gpt-4o"), ("openai", "gpt-4o-mini"), ("anthropic", "claude-sonnet"),
              ("anthropic", "claude-haiku"), ("local", "qwen"), ("openai", "o3")]
    out = []
    for _ in range(n):
        u = rnd.randrange(USERS)
        provider, model = rnd.choice(models)
        job = f"job.{rnd.randrange(50)}" if rnd.random() < 0.05 else None
        out.append({"created_at": time.time(), "day": (TODAY - timedelta(days=rnd.randrange(365))).isoformat(),
                    "kind": "subagent" if rnd.random() < 0.1 else "turn", "session_id": f"web:u{u}:d{u % 7}",
                    "turn_id": None, "run_id": None, "job_id": job, "channel": "web", "user": f"web:u{u}",
                    "agent": f"agent{u % 5}", "provider": provider, "model": model,
                    "input_tokens": rnd.randrange(100, 20000), "output_tokens": rnd.randrange(10, 2000),
                    "cached_input_tokens": rnd.randrange(0, 5000), "cost_usd": rnd.random() / 50})
    return out


def _fill(url: str, n: int) -> Any:
    from sqlalchemy import insert

    from picobot.storage.db import Database
    from picobot.storage.models import UsageRow

    db = Database(url)
    db.migrate()
    for start in range(0, n, 20000):
        with db.begin() as conn:
            conn.execute(insert(UsageRow), _rows(min(20000, n - start), seed=start))
    if db.is_sqlite:
        with db.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
    else:
        with db.engine.connect() as conn:
            conn.exec_driver_sql("COMMIT")
            conn.exec_driver_sql("ANALYZE usage_records")
    return db


def _p50(fn: Callable[[], Any], n: int) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _cases(conn: Any) -> dict[str, Callable[[], Any]]:
    from picobot.storage import usage_report as ur

    today = TODAY.isoformat()
    month = ur.parse_range("30d", None, today)

    def usage_command() -> None:
        ur.for_session(conn, "web:u17:d3")
        ur.for_user(conn, "web:u17", today)

    def page_request(by: str) -> Callable[[], Any]:
        return lambda: ur.report(conn, [by], month, limit=50, series=True)

    return {"/usage (a dialog's and a user's totals)": usage_command,
            "GET /api/usage?by=user&since=30d": page_request("user"),
            "GET /api/usage?by=model&since=30d": page_request("model"),
            "GET /api/usage?by=day&since=365d": lambda: ur.report(conn, ["day"], ur.parse_range("365d", None, today),
                                                                  limit=400, series=True)}


def run(args: argparse.Namespace) -> Result:
    result = Result(NAME)
    sizes = {"small": args.rows // 30, "big": args.rows}
    figures: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        for label, n in sizes.items():
            if DB_CHOICE["db"] == "postgres":
                url = stack.enter_context(pg_schema())
            else:
                url = f"sqlite:///{Path(stack.enter_context(tempfile.TemporaryDirectory())) / 'bench.db'}"
            log(f"filling the {label} ledger: {n:,} rows")
            db = _fill(url, n)
            try:
                with db.connect() as conn:
                    figures[label] = {name: _p50(fn, args.n) for name, fn in _cases(conn).items()}
            finally:
                db.dispose()
    for name, big in figures["big"].items():
        small = figures["small"][name]
        target = TARGET_USAGE_MS if name.startswith("/usage") else TARGET_PAGE_MS if "30d" in name else None
        result.add(f"{name}, {sizes['big']:,} rows (p50)", round(big, 2), "ms",
                   target=f"<= {target:g}" if target else "", ok=(big <= target) if target else None,
                   baseline=f"{sizes['small']:,} rows: {small:.2f} ms", ratio=f"{big / small:.1f}x")
    result.raw = {"figures_ms": figures, "rows": sizes, "n": args.n}
    return result


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=300_000, help="rows in the big ledger (default 300,000)")
    parser.add_argument("-n", type=int, default=30, help="measured reads per figure (default 30)")


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, _args, doc=__doc__))
