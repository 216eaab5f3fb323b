"""Titles: what the titles capability adds to every turn, and what a dialog list's previews cost.

1. Per turn: the titles plugin's `picobot_turn_finished` for a turn that is not its dialog's first
   answer (every turn but one per dialog), with a 200-message history. It decides from the turn's
   history alone: no query, no task. Same-run baseline: a plain call to a no-op function.
   Budget: <= 20 µs p50.
2. Per list: the previews (first user message) of 50 untitled dialogs of 20 messages each, as
   `/sessions` and `GET /api/sessions` read them — one grouped query — against the former one query
   per dialog, on a real SQLite database in a temp dir. Target: faster than the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from scripts.bench.common import Result, log, main

NAME = "titles"
TURNS = 5000
LISTS = 200
DIALOGS = 50
MESSAGES = 20
BUDGET_TURN_US = 20.0


def p50_us(run: Callable[[], Any], n: int) -> float:
    for _ in range(min(200, n)):  # warm up
        run()
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        run()
        samples.append((time.perf_counter_ns() - start) / 1e3)
    return statistics.median(samples)


def _noop(turn: Any, ports: Any) -> None:
    return None


def per_turn(turns: int) -> tuple[float, float]:
    from picobot.config import Config
    from picobot.domain.messages import ChatMessage
    from picobot.plugins.types import TurnView
    from picobot.titles.plugin import TitlesPlugin

    history = tuple(ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"message {i}") for i in range(200))
    turn = TurnView("web:c:d", "t1", "web", "c", "owner", "default", "completed", "answer", history=history)
    ports = SimpleNamespace(config=Config(), queue=None)  # the queue is never reached: not a first answer
    plugin = TitlesPlugin()
    base = p50_us(lambda: _noop(turn, ports), turns)
    hook = p50_us(lambda: plugin.picobot_turn_finished(turn, ports), turns)
    return base, hook


def _fill(db: Any) -> list[str]:
    from picobot.storage import sessions
    from picobot.storage.models import MessageRow

    ids = []
    with db.write() as s:
        for i in range(DIALOGS):
            row = sessions.create(s, "web", "bench", agent="default")
            ids.append(row.id)
            s.add_all([MessageRow(session_id=row.id, position=p, role="user" if p % 2 == 0 else "assistant",
                                  content=f"dialog {i} message {p} " + "text " * 40, created_at=time.time())
                       for p in range(MESSAGES)])
    return ids


def _one_per_dialog(s: Any, ids: list[str]) -> dict[str, str]:
    """The former way: one query per dialog (web/api.py's `_preview` before titles)."""
    from sqlalchemy import select

    from picobot.domain.messages import text_of
    from picobot.storage.models import MessageRow

    out = {}
    for sid in ids:
        first = s.scalars(select(MessageRow.content).where(MessageRow.session_id == sid, MessageRow.role == "user")
                          .order_by(MessageRow.position).limit(1)).first()
        out[sid] = " ".join(text_of(first).split())[:80] if first is not None else ""
    return out


def per_list(lists: int) -> tuple[float, float]:
    from picobot.storage import sessions
    from picobot.storage.db import Database

    with tempfile.TemporaryDirectory(prefix="picobot-bench-titles-") as raw:
        db = Database(f"sqlite:///{Path(raw) / 'bench.db'}")
        try:
            db.migrate()
            ids = _fill(db)
            with db.read() as s:
                assert _one_per_dialog(s, ids) == sessions.previews(s, ids)  # the same answer
                base = p50_us(lambda: _one_per_dialog(s, ids), lists)
                grouped = p50_us(lambda: sessions.previews(s, ids), lists)
        finally:
            db.dispose()
    return base, grouped


def run(args: argparse.Namespace) -> Result:
    result = Result(NAME)
    base, hook = per_turn(args.turns)
    log(f"per turn: baseline {base:.2f} µs, titles hook {hook:.2f} µs")
    result.add("titles hook per turn, not a first answer (p50)", round(hook, 2), "µs", target=f"<= {BUDGET_TURN_US:g}",
               ok=hook <= BUDGET_TURN_US, baseline=f"no-op call {base:.2f} µs", ratio=f"{hook / base:.1f}x")
    base_list, grouped = per_list(args.lists)
    log(f"previews of {DIALOGS} dialogs: one query per dialog {base_list / 1000:.2f} ms, grouped {grouped / 1000:.2f} ms")
    result.add(f"previews of {DIALOGS} dialogs, one grouped query (p50)", round(grouped / 1000, 2), "ms",
               target=f"< {base_list / 1000:.1f}", ok=grouped < base_list,
               baseline=f"one query per dialog {base_list / 1000:.2f} ms", ratio=f"{grouped / base_list:.2f}x")
    result.raw.update({"turn_baseline_us": base, "turn_hook_us": hook, "list_baseline_us": base_list,
                       "list_grouped_us": grouped, "turns": args.turns, "lists": args.lists})
    return result


def _args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=TURNS, help=f"hook calls measured (default {TURNS})")
    parser.add_argument("--lists", type=int, default=LISTS, help=f"lists of previews measured (default {LISTS})")


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, _args, doc=__doc__))
