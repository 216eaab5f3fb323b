"""Usage reports: the `usage_records` ledger read back as totals (tokens, calls, estimated cost).

Every report is one GROUP BY over a range of UTC days ("YYYY-MM-DD" strings compare in date
order, so a range is `day BETWEEN since AND until` on `ix_usage_day`, or on `ix_usage_user_day`
with a user filter). `/usage`, `picobot usage` and `GET /api/usage` all read through here; the
range and dimension parsers are shared so the three accept and refuse the same input.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any, Sequence

from sqlalchemy import Connection, func, select

from picobot.errors import InputRejected
from picobot.storage.models import UsageRow

# a dimension name -> the columns it groups by ("model" is provider and model, shown "provider:model")
DIMENSIONS: dict[str, tuple[Any, ...]] = {
    "user": (UsageRow.user,), "agent": (UsageRow.agent,), "model": (UsageRow.provider, UsageRow.model),
    "job": (UsageRow.job_id,), "day": (UsageRow.day,), "kind": (UsageRow.kind,),
    "session": (UsageRow.session_id,), "channel": (UsageRow.channel,),
}
MAX_DAYS = 3660  # a range (and the per-day series) spans ten years at most
MAX_LIMIT = 10000
DEFAULT_LIMIT = 100
MAX_FILTER_CHARS = 512
_RELATIVE = re.compile(r"([0-9]{1,5})d")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")

_SUMS = (
    func.count().label("calls"),
    func.coalesce(func.sum(UsageRow.input_tokens), 0).label("input_tokens"),
    func.coalesce(func.sum(UsageRow.output_tokens), 0).label("output_tokens"),
    func.coalesce(func.sum(UsageRow.cached_input_tokens), 0).label("cached_input_tokens"),
    func.coalesce(func.sum(UsageRow.cost_usd), 0.0).label("cost_usd"),
)


@dataclass(frozen=True)
class Totals:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float = 0.0

    @classmethod
    def of(cls, row: Any) -> "Totals":
        return cls(int(row.calls or 0), int(row.input_tokens or 0), int(row.output_tokens or 0),
                   int(row.cached_input_tokens or 0), round(float(row.cost_usd or 0.0), 6))

    def __add__(self, other: "Totals") -> "Totals":
        return Totals(self.calls + other.calls, self.input_tokens + other.input_tokens,
                      self.output_tokens + other.output_tokens, self.cached_input_tokens + other.cached_input_tokens,
                      round(self.cost_usd + other.cost_usd, 6))

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"tokens": self.tokens}


@dataclass(frozen=True)
class Filters:
    user: str | None = None
    agent: str | None = None

    def clauses(self) -> list[Any]:
        out = []
        if self.user is not None:
            out.append(UsageRow.user == self.user)
        if self.agent is not None:
            out.append(UsageRow.agent == self.agent)
        return out

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class DayRange:
    since: str
    until: str

    def days(self) -> list[str]:
        first, last = date.fromisoformat(self.since), date.fromisoformat(self.until)
        return [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]


def today_utc() -> str:
    return datetime.now(timezone.utc).date().isoformat()


# --- parsing (shared by the command line and the HTTP API) ----------------------------------------


def parse_day(name: str, text: str, today: str) -> str:
    """A day argument: "YYYY-MM-DD", "today", or "<N>d" (the last N days, today included)."""
    value = text.strip() if isinstance(text, str) else text
    if value == "today":
        return today
    if isinstance(value, str) and (m := _RELATIVE.fullmatch(value)):
        n = int(m.group(1))
        if not 1 <= n <= MAX_DAYS:
            raise InputRejected("bad_request", f"{name}: {value} must count 1 to {MAX_DAYS} days.")
        return (date.fromisoformat(today) - timedelta(days=n - 1)).isoformat()
    if isinstance(value, str) and _DATE.fullmatch(value):
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise InputRejected("bad_request", f"{name} must be a date (YYYY-MM-DD), 'today' or a number of days "
                                       f"such as 7d or 30d; got {_shown(text)}.")


def parse_range(since: str | None, until: str | None, today: str | None = None, default_since: str = "30d",
                names: tuple[str, str] = ("since", "until")) -> DayRange:
    """The inclusive range of UTC days two arguments name; `until` defaults to today.

    `names` are the arguments' names in errors ("--since" on the command line).
    """
    today = today or today_utc()
    first = parse_day(names[0], since if since not in (None, "") else default_since, today)
    last = parse_day(names[1], until, today) if until not in (None, "") else today
    if first > last:
        raise InputRejected("bad_request", f"{names[0]} ({first}) is after {names[1]} ({last}).")
    if (date.fromisoformat(last) - date.fromisoformat(first)).days >= MAX_DAYS:
        raise InputRejected("bad_request", f"{names[0]} to {names[1]} spans more than {MAX_DAYS} days.")
    return DayRange(first, last)


def parse_by(values: Sequence[str] | str | None, name: str = "by") -> list[str]:
    """Dimensions from repeated and/or comma-separated values, in order, each once; blanks are skipped."""
    items = [values] if isinstance(values, str) else list(values or [])
    out: list[str] = []
    for item in items:
        for part in str(item).split(","):
            dim = part.strip().lower()
            if dim == "":  # `?by=` from an empty form field, or a trailing comma
                continue
            if dim not in DIMENSIONS:
                raise InputRejected("bad_request", f"{name}: {_shown(part)} is not one of {', '.join(DIMENSIONS)}.")
            if dim not in out:
                out.append(dim)
    return out


def parse_filter(name: str, value: str | None) -> str | None:
    """A --user / --agent value: exact match, printable text of sane length."""
    if value is None or value == "":
        return None
    if (len(value) > MAX_FILTER_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in value)
            or not _encodable(value)):
        raise InputRejected("bad_request", f"{name} must be 1-{MAX_FILTER_CHARS} printable characters "
                                           "(for a user: '<channel>:<sender_id>').")
    return value


def parse_limit(value: str | int | None, name: str = "limit") -> int:
    if value is None or value == "":
        return DEFAULT_LIMIT
    text = str(value)
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise InputRejected("bad_request", f"{name} must be a whole number from 1 to {MAX_LIMIT}; got {_shown(text)}.")
    return int(text)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (from argv or a JSON escape)
        return False
    return True


def _shown(value: Any) -> str:
    text = repr(value)
    return (text[:60] + "…") if len(text) > 60 else text


# --- queries --------------------------------------------------------------------------------------


def _in_range(r: DayRange, filters: Filters) -> list[Any]:
    return [UsageRow.day >= r.since, UsageRow.day <= r.until, *filters.clauses()]


def grouped(conn: Connection, by: Sequence[str], r: DayRange, filters: Filters = Filters(),
            limit: int = DEFAULT_LIMIT) -> tuple[list[dict[str, Any]], bool]:
    """Totals per distinct value of the `by` dimensions, and whether more groups than `limit` exist.

    Ordered by day when `day` leads, else by estimated cost then tokens, most first.
    """
    cols = [c for name in by for c in DIMENSIONS[name]]
    stmt = select(*cols, *_SUMS).where(*_in_range(r, filters)).group_by(*cols)
    spend = (func.coalesce(func.sum(UsageRow.cost_usd), 0.0).desc(),
             func.coalesce(func.sum(UsageRow.input_tokens + UsageRow.output_tokens), 0).desc())
    order = (UsageRow.day, *spend) if by and by[0] == "day" else spend
    rows = conn.execute(stmt.order_by(*order, *cols).limit(limit + 1)).all()
    return [{"key": _key(by, row), **Totals.of(row).to_dict()} for row in rows[:limit]], len(rows) > limit


def _key(by: Sequence[str], row: Any) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    values = iter(row)
    for name in by:
        parts = [next(values) for _ in DIMENSIONS[name]]
        out[name] = f"{parts[0]}:{parts[1]}" if name == "model" else parts[0]
    return out


def total(conn: Connection, r: DayRange, filters: Filters = Filters()) -> Totals:
    return Totals.of(conn.execute(select(*_SUMS).where(*_in_range(r, filters))).one())


def daily(conn: Connection, r: DayRange, filters: Filters = Filters()) -> list[dict[str, Any]]:
    """One entry per day of the range, days without calls as zeros (the chart's series)."""
    found = _per_day(conn, r, filters)
    return [{"day": d, **found.get(d, Totals()).to_dict()} for d in r.days()]


def _per_day(conn: Connection, r: DayRange, filters: Filters) -> dict[str, Totals]:
    stmt = select(UsageRow.day, *_SUMS).where(*_in_range(r, filters)).group_by(UsageRow.day)
    return {row.day: Totals.of(row) for row in conn.execute(stmt)}


def for_session(conn: Connection, session_id: str) -> Totals:
    """A dialog's totals, its sub-agents' and compactions' calls included (they carry the root's id)."""
    return Totals.of(conn.execute(select(*_SUMS).where(UsageRow.session_id == session_id)).one())


def for_user(conn: Connection, user: str, today: str | None = None) -> dict[str, Any]:
    """A user's totals today and this month (UTC): the month's days on `ix_usage_user_day`, added here."""
    today = today or today_utc()
    month = today[:7]
    stmt = (select(UsageRow.day, *_SUMS)
            .where(UsageRow.user == user, UsageRow.day >= f"{month}-01", UsageRow.day <= f"{month}-31")
            .group_by(UsageRow.day))
    days = {row.day: Totals.of(row) for row in conn.execute(stmt)}
    month_totals = sum(days.values(), Totals())
    return {"user": user, "today": {"day": today, **days.get(today, Totals()).to_dict()},
            "month": {"month": month, **month_totals.to_dict()}}


def report(conn: Connection, by: Sequence[str], r: DayRange, filters: Filters = Filters(),
           limit: int = DEFAULT_LIMIT, series: bool = False) -> dict[str, Any]:
    """The whole answer `picobot usage --json` and `GET /api/usage` give (`days` with `series`).

    The total is the sum of the per-day series: one scan of the range fewer than asking for it.
    """
    groups, more = grouped(conn, by, r, filters, limit) if by else ([], False)
    days = _per_day(conn, r, filters)
    out: dict[str, Any] = {"since": r.since, "until": r.until, "by": list(by), "filters": filters.to_dict(),
                           "total": sum(days.values(), Totals()).to_dict(), "groups": groups, "more": more}
    if series:
        out["days"] = [{"day": d, **days.get(d, Totals()).to_dict()} for d in r.days()]
    return out
