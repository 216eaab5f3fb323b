"""The usage ledger (`usage_records`): one row per model call, and the sums budgets are seeded from.

Tokens of a row are its input plus its output tokens (cached input is part of the input). The
budgets capability writes a row after every model call and, when a Redis counter is missing (first
use, a flush, an expiry), rebuilds it from `totals` here: SQL is the authority on spend.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, func, insert, select

from picobot.storage.models import UsageRow

_u = UsageRow.__table__

_INSERT = insert(_u)
_SUMS = select(func.coalesce(func.sum(_u.c.input_tokens + _u.c.output_tokens), 0),
               func.coalesce(func.sum(_u.c.cost_usd), 0.0))
_IN_DAYS = (_u.c.day >= bindparam("lo"), _u.c.day <= bindparam("hi"))

# One statement per scope, built once: the counters are re-seeded on the hot path after a flush.
_TOTALS = {
    "session": _SUMS.where(_u.c.session_id == bindparam("key")),
    "user": _SUMS.where(_u.c.user == bindparam("key"), *_IN_DAYS),
    "job": _SUMS.where(_u.c.job_id == bindparam("key"), *_IN_DAYS),
    "run": _SUMS.where(_u.c.job_id == bindparam("key"), _u.c.turn_id == bindparam("turn")),
    "global": _SUMS.where(*_IN_DAYS),
}
SCOPES = tuple(_TOTALS)


@dataclass(frozen=True)
class Call:
    """One model call to record."""

    kind: str  # turn | subagent | compaction
    session_id: str | None
    turn_id: str | None
    run_id: str | None
    job_id: str | None
    channel: str
    user: str  # "<channel>:<sender_id>"
    agent: str
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_usd: float


def record(conn: Connection, call: Call, now: float | None = None) -> None:
    """Write one call's row (its UTC day from `now`)."""
    now = time.time() if now is None else now
    conn.execute(_INSERT, {
        "created_at": now, "day": day_of(now), "kind": call.kind[:32], "session_id": _cut(call.session_id, 512),
        "turn_id": _cut(call.turn_id, 64), "run_id": _cut(call.run_id, 64), "job_id": _cut(call.job_id, 128),
        "channel": call.channel[:64], "user": call.user[:320], "agent": call.agent[:64],
        "provider": call.provider[:64], "model": call.model[:256], "input_tokens": max(0, call.input_tokens),
        "output_tokens": max(0, call.output_tokens), "cached_input_tokens": max(0, call.cached_input_tokens),
        "cost_usd": max(0.0, call.cost_usd),
    })


def totals(conn: Connection, scope: str, key: str = "", first_day: str = "", last_day: str = "",
           turn_id: str = "") -> tuple[int, float]:
    """(tokens, cost_usd) spent in a scope: session | user | job | run (a job's turn) | global.

    Days are "YYYY-MM-DD", inclusive; `session` and `run` ignore them.
    """
    row = conn.execute(_TOTALS[scope], {"key": key, "lo": first_day, "hi": last_day, "turn": turn_id}).one()
    return int(row[0] or 0), float(row[1] or 0.0)


def day_of(epoch: float) -> str:
    """The UTC day of an epoch time, "YYYY-MM-DD"."""
    return time.strftime("%Y-%m-%d", time.gmtime(epoch))


def _cut(value: str | None, limit: int) -> str | None:
    return None if value is None else value[:limit]
