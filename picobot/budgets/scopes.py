"""Which budgets a model call falls under, each as a Counter (limits, Redis key, ledger sum), and when it resets."""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass
from typing import Any

from picobot.budgets.keys import BUDGET_PREFIX
from picobot.storage import usage
from picobot.budgets.counters import Counter

DAY_SECS = 86400
JOB_INPUT = "job:"  # a scheduled job's input id: "job:<job_id>:<due_at>"


@dataclass(frozen=True)
class Who:
    """Whom a call is charged to."""

    session_id: str
    turn_id: str
    user: str  # "<channel>:<sender_id>"
    job_id: str | None


def who(ctx: Any) -> Who:
    """From a hook's StageContext: the dialog (a sub-agent's parent's), the sender, the job whose input it answers."""
    job_id = None
    for pmid in getattr(ctx, "input_ids", ()) or ():
        if pmid.startswith(JOB_INPUT) and ":" in pmid[len(JOB_INPUT):]:
            job_id = pmid[len(JOB_INPUT):].rsplit(":", 1)[0]
            break
    # a call outside any turn and sender (a dialog's automatic title) is charged to no user
    user = f"{ctx.channel}:{ctx.sender_id}" if ctx.sender_id or ctx.turn_id else ""
    return Who(ctx.session_id, ctx.turn_id, user, job_id)


def counters(budgets: Any, db: Any, w: Who, now: float) -> list[Counter]:
    """The counters with a limit set that this call falls under."""
    day = usage.day_of(now)
    month = day[:7]
    until_tomorrow = _secs_to_next_day(now) + 3600
    found: list[Counter] = []

    def add(name: str, key: str, tokens: int | None, cost: float | None, ttl: int, scope: str,
            ledger_key: str = "", lo: str = "", hi: str = "", turn: str = "") -> None:
        if tokens is None and cost is None:
            return

        def seed() -> tuple[int, float]:
            with db.connect() as conn:
                return usage.totals(conn, scope, ledger_key, lo, hi, turn)

        found.append(Counter(name, BUDGET_PREFIX + key, tokens, cost, ttl, seed))

    s, u, j, g = budgets.session, budgets.user, budgets.job, budgets.global_
    if w.session_id:
        add("budgets.session", f"session:{w.session_id}", s.tokens, s.cost_usd, DAY_SECS, "session", w.session_id)
    add("budgets.user.daily", f"user:{w.user}:d:{day}", u.daily_tokens, u.daily_cost_usd, until_tomorrow,
        "user", w.user, day, day)
    add("budgets.user.monthly", f"user:{w.user}:m:{month}", u.monthly_tokens, u.monthly_cost_usd,
        _secs_to_next_month(now) + 3600, "user", w.user, f"{month}-01", f"{month}-31")
    if w.job_id is not None:
        add("budgets.job.run", f"run:{w.job_id}:{w.turn_id}", j.run_tokens, j.run_cost_usd, DAY_SECS, "run",
            w.job_id, turn=w.turn_id)
        add("budgets.job.daily", f"job:{w.job_id}:d:{day}", j.daily_tokens, j.daily_cost_usd, until_tomorrow,
            "job", w.job_id, day, day)
    add("budgets.global.daily", f"global:d:{day}", g.daily_tokens, g.daily_cost_usd, until_tomorrow,
        "global", "", day, day)
    return found


def limit_key(counter: Counter, unit: str) -> str:
    """The config key of the limit that refused: budgets.user.daily + tokens -> budgets.user.daily_tokens."""
    if counter.name == "budgets.session":
        return f"budgets.session.{unit}"
    return f"{counter.name}_{unit}"


def resets(counter: Counter, now: float) -> str:
    """When the counter starts from zero again, for the user."""
    if counter.name == "budgets.session":
        return "it does not reset: start a new dialog with /new"
    if counter.name == "budgets.job.run":
        return "it resets at the job's next run"
    if counter.name == "budgets.user.monthly":
        return f"it resets at {_month_start(now, 1)} 00:00 UTC"
    return f"it resets at {usage.day_of(now + _secs_to_next_day(now))} 00:00 UTC"


def _secs_to_next_day(now: float) -> int:
    return DAY_SECS - int(now) % DAY_SECS


def _month_start(now: float, ahead: int) -> str:
    t = time.gmtime(now)
    year, month = t.tm_year + (t.tm_mon - 1 + ahead) // 12, (t.tm_mon - 1 + ahead) % 12 + 1
    return f"{year:04d}-{month:02d}-01"


def _secs_to_next_month(now: float) -> int:
    nxt = calendar.timegm(time.strptime(_month_start(now, 1), "%Y-%m-%d"))
    return max(1, int(nxt - now))
