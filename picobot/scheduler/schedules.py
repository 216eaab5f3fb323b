"""Schedule maths, pure: when a job is due next (`next_due`) and how to say it in words (`describe`).

Four schedule types (the job JSON's `schedule` object): `delay` (once, `seconds` after creation),
`interval` (every `seconds`, counted from creation), `at` (once, an ISO 8601 instant; without an
offset it is read in the job's time zone) and `cron` (5 fields, evaluated in the job's time zone).

DST, deterministic: a wall time that does not exist (spring-forward gap) runs at the first instant
after the gap (02:30 on a Berlin spring-forward day runs at 03:00 CEST); a wall time that happens
twice (fall-back) runs once, at its first occurrence (fold=0).

Cron follows cron(5): lists, ranges, steps (`a/n` means `a-max/n`), month and day names, 0 and 7
for Sunday, and when both day-of-month and day-of-week are restricted (neither starts with `*`)
a day matching EITHER runs; that grammar is picobot.domain.cron, shared with the config schema.
The search skips by field (months, then days, then hours and minutes), never scanning minute by
minute.
"""

from __future__ import annotations

import math
from datetime import date, datetime, time as dtime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo

from picobot.domain.cron import DAYS as _DAYS, MONTHS as _MONTHS, Cron, parse_cron

_SEARCH_DAYS = 366 * 30  # a cron that matches no day in 30 years never runs


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def local_instant(wall: datetime, tz: ZoneInfo) -> float:
    """The instant of a naive wall time in `tz`, by the DST rules above."""
    first = wall.replace(tzinfo=tz, fold=0)
    t0 = first.timestamp()
    back = datetime.fromtimestamp(t0, tz).replace(tzinfo=None)
    if back == wall:
        return t0  # exists (fold=0 is the first of two occurrences)
    # in a gap: fold=1 reads it with the offset after the transition (earlier instant), fold=0 before
    lo, hi = wall.replace(tzinfo=tz, fold=1).timestamp(), t0
    lo, hi = min(lo, hi), max(lo, hi)
    off_lo = datetime.fromtimestamp(lo, tz).utcoffset()
    while hi - lo > 1:  # bisect to the transition, to the second
        mid = math.floor((lo + hi) / 2)
        if datetime.fromtimestamp(mid, tz).utcoffset() == off_lo:
            lo = mid
        else:
            hi = mid
    return float(hi)


def parse_at(value: str | datetime, tz: str) -> float:
    """An `at` value (ISO 8601, optional offset; naive means wall time in `tz`) as an instant."""
    dt = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).strip())
    if dt.tzinfo is None:
        return local_instant(dt, zone(tz))
    return dt.timestamp()


def cron_next(cron: Cron, after: float, tz: ZoneInfo) -> float | None:
    """The first instant > after whose wall time in tz matches the cron (DST rules above)."""
    start = datetime.fromtimestamp(math.floor(after), tz).replace(tzinfo=None, second=0, microsecond=0)
    day, first_day = start.date(), True
    last = day + timedelta(days=_SEARCH_DAYS)
    while day <= last:
        if day.month not in cron.months:
            y, m = day.year, day.month
            while True:  # jump to the 1st of the next allowed month
                y, m = (y + 1, 1) if m == 12 else (y, m + 1)
                if m in cron.months:
                    break
            day, first_day = date(y, m, 1), False
            continue
        if cron.day_matches(day):
            for h in cron.hours:
                if first_day and h < start.hour:
                    continue
                for mi in cron.minutes:
                    if first_day and h == start.hour and mi < start.minute:
                        continue
                    t = local_instant(datetime.combine(day, dtime(h, mi)), tz)
                    if t > after:
                        return t
        day, first_day = day + timedelta(days=1), False
    return None


def next_due(schedule: dict, after: float, tz: str, created_at: float) -> float | None:
    """The first due time strictly after `after`; None when a one-shot is used up (or a cron never matches)."""
    kind = schedule.get("type")
    if kind == "delay":
        t = created_at + float(schedule["seconds"])
        return t if t > after else None
    if kind == "interval":
        step = float(schedule["seconds"])
        k = max(1, math.floor((after - created_at) / step) + 1)
        while created_at + k * step <= after:  # float rounding
            k += 1
        while k > 1 and created_at + (k - 1) * step > after:
            k -= 1
        return created_at + k * step
    if kind == "at":
        t = parse_at(schedule["at"], tz)
        return t if t > after else None
    if kind == "cron":
        return cron_next(parse_cron(schedule["expression"]), after, zone(tz))
    raise ValueError(f"unknown schedule type {kind!r}")


def _amount(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{unit}" if n == 1 else f"{n} {unit}s"
    shown = int(seconds) if float(seconds).is_integer() else seconds
    return "second" if shown == 1 else f"{shown} seconds"


def _names(values: set[int] | frozenset[int], names: tuple[str, ...], offset: int) -> str:
    return ", ".join(names[v - offset].capitalize() for v in sorted(values))


def _describe_cron(expr: str) -> str:
    cron = parse_cron(expr)
    f = cron.expression.split()
    if f[1:] == ["*"] * 4 and f[0].startswith("*/") and len(cron.minutes) > 1:
        return "every minute" if f[0] == "*/1" else f"every {f[0][2:]} minutes"
    if f == ["*"] * 5:
        return "every minute"
    if len(cron.minutes) == 1 and len(cron.hours) == 1:
        when = f"at {cron.hours[0]:02d}:{cron.minutes[0]:02d}"
    elif len(cron.minutes) == 1 and f[1] == "*":
        when = f"at minute {cron.minutes[0]} of every hour"
    elif len(cron.minutes) == 1 and f[1].startswith("*/"):
        when = f"every {f[1][2:]} hours at minute {cron.minutes[0]}"
    else:
        return f"cron '{cron.expression}'"
    days = ""
    if not cron.dow_star and cron.weekdays == frozenset(range(1, 6)) and cron.dom_star:
        days = " on weekdays"
    elif not cron.dow_star and cron.dom_star:
        days = " on " + _names(cron.weekdays, _DAYS, 0)
    elif not cron.dom_star and cron.dow_star:
        days = " on day " + ", ".join(str(d) for d in sorted(cron.days)) + " of the month"
    elif not cron.dom_star:
        days = (" on day " + ", ".join(str(d) for d in sorted(cron.days)) + " of the month or on "
                + _names(cron.weekdays, _DAYS, 0))
    if f[3] != "*":
        days += " in " + _names(cron.months, _MONTHS, 1)
    if not days and when.startswith("at ") and ":" in when:
        days = " every day"
    return when + days


def describe(schedule: dict, tz: str) -> str:
    """The schedule in words: "every 5 minutes", "at 09:00 on weekdays (Asia/Shanghai)", …"""
    kind = schedule.get("type")
    if kind == "delay":
        return f"once, {_amount(float(schedule['seconds']))} after creation"
    if kind == "interval":
        return f"every {_amount(float(schedule['seconds']))}"
    if kind == "at":
        t = parse_at(schedule["at"], tz)
        return f"once at {datetime.fromtimestamp(t, zone(tz)).strftime('%Y-%m-%d %H:%M')} ({tz})"
    if kind == "cron":
        return f"{_describe_cron(schedule['expression'])} ({tz})"
    return f"unknown schedule {kind!r}"


def utc_iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).isoformat()
