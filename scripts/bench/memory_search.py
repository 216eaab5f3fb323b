"""Memory search: MemoryStore.search p50/p99 at 10,000 and 100,000 memories, mixed Chinese and English.

Worst case for one user: every memory belongs to the scope that is searched. Memories are
sentences over a vocabulary of Chinese words (segmented by jieba, as in production) and English
words; queries are one to three vocabulary words, some Chinese, some English, some both. Rows are
written with one executemany in one transaction (the FTS triggers or the GIN index keep up as in
production). Same-run baseline: a primary-key lookup of one memory (MemoryStore.get_by_id).
Also reported: a query that matches no word, which falls back to LIKE over the scope.
SQLite always; PostgreSQL too when PICOBOT_TEST_PG_URL answers (or --db postgres insists).
Target (SQLite, 100,000): p50 <= 5 ms, p99 <= 20 ms.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from scripts.bench.common import Result, log, main, p50_p99, pg_schema

NAME = "memory_search"
SIZES = (10_000, 100_000)
QUERIES = 300
SCOPE = "telegram:bench-user"
TARGET_P50_MS, TARGET_P99_MS = 5.0, 20.0
_ZH_CHARS = "茶乌龙咖啡北京上海大学工作项目会议周末旅行医生朋友家庭音乐电影猫狗早餐晚餐运动跑步游泳书籍学习编程数据服务器部署"


def vocabulary(rng: random.Random) -> tuple[list[str], list[str]]:
    zh = sorted({"".join(rng.sample(_ZH_CHARS, rng.choice((2, 2, 3)))) for _ in range(1500)})
    en = sorted({"".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9)))
                 for _ in range(3000)})
    return zh, en


def sentence(rng: random.Random, zh: list[str], en: list[str]) -> str:
    words = [rng.choice(zh) if rng.random() < 0.5 else rng.choice(en) for _ in range(rng.randint(6, 14))]
    return " ".join(words) if rng.random() < 0.5 else "".join(w if w[0] >= "\u4e00" else f" {w} " for w in words)


def fill(store: Any, start: int, count: int, rng: random.Random, zh: list[str], en: list[str]) -> float:
    """Insert memories start..start+count-1 in one transaction; returns seconds taken."""
    from sqlalchemy import insert

    from picobot.storage.segment import index_text
    from picobot.storage.models import MemoryRow

    now = time.time()
    rows = []
    for i in range(start, start + count):
        key, content = f"fact-{i}", sentence(rng, zh, en)
        rows.append({"scope": "user", "scope_key": SCOPE, "namespace": f"ns{i % 8}", "memory_key": key,
                     "content": content, "category": "knowledge" if i % 10 else "timeline",
                     "importance": rng.random(), "search_text": index_text(key, content), "source_type": "bench",
                     "created_at": now - rng.random() * 86400 * 365, "updated_at": now - rng.random() * 86400 * 90})
    started = time.perf_counter()
    with store.db.begin() as conn:
        conn.execute(insert(MemoryRow.__table__), rows)
    return time.perf_counter() - started


def timed(fn: Callable[[], Any], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def queries(rng: random.Random, zh: list[str], en: list[str]) -> list[str]:
    out = []
    for i in range(QUERIES):
        pick = [rng.choice(zh) if (i + j) % 2 else rng.choice(en) for j in range(rng.randint(1, 3))]
        out.append(" ".join(pick))
    return out


def measure(store: Any, qs: list[str], ids: list[int]) -> dict[str, Any]:
    for q in qs[:20]:  # warm the page cache and the statement cache
        store.search(SCOPE, q, limit=10)
    it = iter(qs * 2)
    search = timed(lambda: store.search(SCOPE, next(it), limit=10), len(qs))
    recall = timed(lambda: store.search(SCOPE, next(it), category="knowledge", limit=5, like_fallback=False), 100)
    id_it = iter(ids * 2)
    base = timed(lambda: store.get_by_id(next(id_it)), len(ids))
    miss = timed(lambda: store.search(SCOPE, "zzzzqqq", limit=10), 20)
    hits = sum(1 for q in qs[:50] if store.search(SCOPE, q, limit=10))
    return {"search": p50_p99(search), "recall": p50_p99(recall), "pk": p50_p99(base),
            "like": p50_p99(miss), "hit_share": hits / 50}


def bench_database(url: str, label: str, result: Result) -> None:
    from picobot.memory import MemoryStore
    from picobot.storage.segment import words
    from picobot.storage.db import Database

    rng = random.Random(8)
    zh, en = vocabulary(rng)
    words("预热")  # jieba loads once, outside what is timed
    db = Database(url)
    db.migrate()
    store = MemoryStore(db)
    done = 0
    try:
        for size in SIZES:
            took = fill(store, done, size - done, rng, zh, en)
            log(f"{label}: {size - done} memories written in {took:.1f} s")
            done = size
            qs = queries(rng, zh, en)
            ids = [rng.randint(1, size) for _ in range(QUERIES)]
            m = measure(store, qs, ids)
            result.raw[f"{label}_{size}"] = m
            _report(result, label, size, m)
    finally:
        db.dispose()


def _report(result: Result, label: str, size: int, m: dict[str, Any]) -> None:
    (p50, p99), (b50, _b99) = m["search"], m["pk"]
    targeted = label == "sqlite" and size == 100_000
    result.add(f"{label} {size:,}: search p50", round(p50, 2), "ms", target=f"<= {TARGET_P50_MS:g}" if targeted else "",
               ok=p50 <= TARGET_P50_MS if targeted else None, baseline=f"pk lookup {b50:.2f} ms",
               ratio=f"{p50 / b50:.1f}x")
    result.add(f"{label} {size:,}: search p99", round(p99, 2), "ms", target=f"<= {TARGET_P99_MS:g}" if targeted else "",
               ok=p99 <= TARGET_P99_MS if targeted else None)
    result.add(f"{label} {size:,}: recall query p50 / p99", round(m["recall"][0], 2), "ms",
               baseline=f"p99 {m['recall'][1]:.2f} ms")
    result.add(f"{label} {size:,}: no word matches (LIKE) p50", round(m["like"][0], 2), "ms")


def run(args: argparse.Namespace) -> Result:
    from tests.conftest import pg_available

    result = Result(NAME)
    with tempfile.TemporaryDirectory(prefix="picobot-bench-memsearch-") as raw, ExitStack() as stack:
        bench_database(f"sqlite:///{Path(raw) / 'memories.db'}", "sqlite", result)
        if pg_available():
            bench_database(stack.enter_context(pg_schema()), "postgres", result)
        else:
            result.notes.append("PostgreSQL not reachable at PICOBOT_TEST_PG_URL: only SQLite measured")
            if args.db == "postgres":
                raise SystemExit("--db postgres: PostgreSQL is not reachable at PICOBOT_TEST_PG_URL")
    result.notes.append(f"all memories in the one scope searched (the worst case); {QUERIES} queries of 1-3 "
                        "words, limit 10; recall = category knowledge, limit 5, no LIKE fallback")
    return result


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, doc=__doc__))
