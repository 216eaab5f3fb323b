"""Operator pages: what one read of the Deliveries and Sub-agent runs pages costs on a big database.

The web app is built as `picobot web` builds it (create_app, the pairing guard, a private Redis) on
SQLite (or PostgreSQL), filled with 100,000 outbox rows (5 channels, 400 chats; mostly sent, some failed, pending and
deferred; one reply in ten 2 KB long) and 20,000 sub-agent runs (5,000 turns of a run with two children and a grandchild, 500
sessions). Each figure is the p50/p99 of requests through Flask's test client, so the HTTP server is
left out and the query, the masking and the JSON are what is measured. Same-run baseline:
`GET /api/me` (the pairing guard and a JSON answer, no query of its own).
Targets (SQLite): each page read p50 <= 50 ms. `--db postgres` runs it on a fresh PostgreSQL schema.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from scripts.bench.common import Result, log, main, p50_p99, pg_schema

NAME = "operator_pages"
DELIVERIES = 100_000
TURNS = 5_000
SESSIONS = 500
REQUESTS = 150
TARGET_P50_MS = 50.0
CHANNELS = ("feishu", "telegram", "wechat", "lark2", "rare")


def fill_outbox(db: Any, rng: random.Random) -> None:
    from sqlalchemy import insert

    from picobot.storage.models import OutboxRow

    now = time.time()
    rows = []
    for i in range(DELIVERIES):
        channel = "rare" if i % 5000 == 0 else CHANNELS[i % 4]
        roll = rng.random()
        status = "failed" if roll < 0.02 else "pending" if roll < 0.03 else "deferred" if roll < 0.035 else "sent"
        rows.append({"channel": channel, "chat_id": f"chat-{i % 400}", "kind": "reply",
                     "payload": {"text": f"reply number {i} " + "words " * (400 if i % 10 == 0 else 20)},
                     "idempotency_key": f"k{i}",
                     "status": status, "attempts": 1, "created_at": now - DELIVERIES + i, "updated_at": now,
                     "last_error": "the platform answered 400: chat not found" if status == "failed" else None,
                     "sent_at": now if status == "sent" else None})
    with db.begin() as conn:
        conn.execute(insert(OutboxRow.__table__), rows)


def fill_runs(db: Any, rng: random.Random) -> tuple[str, str]:
    """The runs; returns (a run id with a 100 KB result, a failed run's id)."""
    from sqlalchemy import insert

    from picobot.storage import sessions
    from picobot.storage.models import AgentRunRow

    with db.begin() as conn:
        sids = [sessions.current_or_create_id(conn, "web", f"bench-{i}") for i in range(SESSIONS)]
    now = time.time() - TURNS * 10
    rows: list[dict[str, Any]] = []
    definition = {"name": "general", "source": "builtin", "run": {"tools": ["read", "write", "task"], "provider": "default"}}

    def run(turn: str, sid: str, parent: str | None, depth: int, at: float, status: str, result: str | None) -> str:
        rid = uuid.uuid4().hex
        rows.append({"id": rid, "session_id": sid, "turn_id": turn, "parent_run_id": parent, "depth": depth,
                     "background": False, "subagent_type": "general", "definition": definition,
                     "description": f"task at depth {depth}", "prompt": "look into it " * 20, "sender_id": "owner",
                     "status": status, "result": result, "error": "the model provider failed" if status == "failed" else None,
                     "input_tokens": 1000, "output_tokens": 50, "worker": "w1", "created_at": at, "started_at": at,
                     "finished_at": at + 1})
        return rid

    for t in range(TURNS):
        turn, sid, at = uuid.uuid4().hex, sids[t % SESSIONS], now + t * 10
        root = run(turn, sid, None, 1, at, "completed", "done " * 40)
        run(turn, sid, root, 2, at + 1, "failed" if rng.random() < 0.05 else "completed", "child done " * 20)
        child = run(turn, sid, root, 2, at + 2, "completed", "child done " * 20)
        run(turn, sid, child, 3, at + 3, "completed", "grandchild done")
    big = run(uuid.uuid4().hex, sids[0], None, 1, now + TURNS * 10, "completed",
              ("a long result line with numbers 12345 and a url https://example.com/x?y=1\n" * 1400)[:100_000])
    failed = next(r["id"] for r in rows if r["status"] == "failed")
    with db.begin() as conn:
        conn.execute(insert(AgentRunRow.__table__), rows)
    return big, failed


def timed(get: Callable[[], Any], n: int = REQUESTS) -> list[float]:
    for _ in range(5):  # warm the statement cache and the page cache
        get()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = get()
        out.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, r.get_json()
    return out


def run(args: argparse.Namespace) -> Result:
    from picobot.cli.embedded_redis import start_embedded
    from picobot.config import Config
    from tests.stack import issue_token
    from web.app import create_app

    result = Result(NAME)
    rng = random.Random(18)
    with tempfile.TemporaryDirectory(prefix="picobot-bench-operator-") as raw, contextlib.ExitStack() as on_exit:
        database_url = on_exit.enter_context(pg_schema()) if args.db == "postgres" else ""
        redis_proc, redis_url = start_embedded(Path(raw) / "redis")
        try:
            config = Config.model_validate({"home": str(Path(raw) / "home"), "redis_url": redis_url,
                                            "database_url": database_url})
            app = create_app(config=config)
            rt = app.extensions["picobot"]
            started = time.perf_counter()
            fill_outbox(rt.db, rng)
            big, failed = fill_runs(rt.db, rng)
            log(f"{DELIVERIES:,} deliveries and {TURNS * 4:,} runs written in {time.perf_counter() - started:.1f} s")
            client = app.test_client()
            auth = {"Authorization": f"Bearer {issue_token(rt.config.database_url, 'bench')}"}
            middle = DELIVERIES // 2
            figures = {
                "baseline": "/api/me",
                "deliveries: first page": "/api/deliveries",
                "deliveries: failed of one channel": "/api/deliveries?status=failed&channel=telegram",
                "deliveries: a page deep in the list": f"/api/deliveries?before={middle}",
                "deliveries: a channel with 20 rows": "/api/deliveries?channel=rare",
                "runs: tree, first 20 turns": "/api/subagents/tree",
                "runs: tree, turns with a failed run": "/api/subagents/tree?status=failed",
                "runs: the flat list (50)": "/api/subagents?limit=50",
                "runs: one run with a 100 KB result": f"/api/subagents/{big}",
                "runs: one failed run": f"/api/subagents/{failed}",
            }
            measured = {name: p50_p99(timed(lambda p=path: client.get(p, headers=auth))) for name, path in figures.items()}
            result.raw["figures"] = measured
            rt.close()
        finally:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
    base = measured.pop("baseline")[0]
    for name, (p50, p99) in measured.items():
        targeted = not name.startswith("runs: the flat list")
        result.add(f"{name} p50", round(p50, 2), "ms", target=f"<= {TARGET_P50_MS:g}" if targeted else "",
                   ok=p50 <= TARGET_P50_MS if targeted else None, baseline=f"GET /api/me {base:.2f} ms",
                   ratio=f"{p50 / base:.1f}x")
        result.add(f"{name} p99", round(p99, 2), "ms")
    result.notes.append(f"{args.db}; {DELIVERIES:,} outbox rows, {TURNS * 4:,} runs in {TURNS:,} turns; "
                        f"{REQUESTS} requests per figure through Flask's test client (no HTTP server)")
    return result


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, doc=__doc__))
