"""Schedule maths: cron in a time zone, DST gaps and repeats, leap days, intervals, `at` with offsets."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings, strategies as st

from picobot.scheduler.schedules import describe, next_due, parse_cron, zone

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Shanghai", "Australia/Lord_Howe", "Asia/Kolkata"]
EXPRESSIONS = ["* * * * *", "*/5 * * * *", "0 9 * * 1-5", "30 2 * * *", "0 */4 * * *", "15 1 * * sun",
               "0 0 29 2 *", "0 0 1,15 * 5", "45 23 31 * *", "0 12 * jan,jul *", "5-10/2 3 * * 7",
               "0 2 * * *", "59 1 * * *", "0 0 13 * fri"]


def at(text: str, tz: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=zone(tz)).timestamp()


def wall(t: float, tz: str) -> str:
    return datetime.fromtimestamp(t, zone(tz)).isoformat()


def cron(expr: str) -> dict:
    return {"type": "cron", "expression": expr}


def _matches(expr: str, t: float, tz: str) -> bool:
    """cron(5) matching, written out here independently of Cron.day_matches."""
    c = parse_cron(expr)
    fields = expr.split()
    d = datetime.fromtimestamp(t, zone(tz))
    dom, dow = d.day in c.days, d.isoweekday() % 7 in c.weekdays
    dom_star, dow_star = fields[2].startswith("*"), fields[4].startswith("*")
    if dom_star and dow_star:
        day = True
    elif dom_star or dow_star:
        day = dow if dom_star else dom
    else:
        day = dom or dow
    return d.minute in c.minutes and d.hour in c.hours and d.month in c.months and day


instants = st.floats(min_value=946684800, max_value=4102444800, allow_nan=False)  # 2000 … 2100


@settings(max_examples=300, deadline=None)
@given(expr=st.sampled_from(EXPRESSIONS), tz=st.sampled_from(ZONES), after=instants)
def test_cron_next_is_later_matching_and_idempotent(expr: str, tz: str, after: float) -> None:
    t = next_due(cron(expr), after, tz, 0)
    assert t is not None and t > after
    shifted = datetime.fromtimestamp(t - 1, zone(tz)).utcoffset() != datetime.fromtimestamp(t, zone(tz)).utcoffset()
    assert _matches(expr, t, tz) or shifted  # a wall time in a DST gap runs at the gap's end
    assert next_due(cron(expr), t - 0.001, tz, 0) == t
    # nothing matching lies between `after` and t: the minute before t (if after it) gives t again
    if t - 60 > after:
        assert next_due(cron(expr), t - 60, tz, 0) == t


@settings(max_examples=200, deadline=None)
@given(expr=st.sampled_from(["* * * * *", "*/7 * * * *", "0 * * * *"]), after=instants)
def test_cron_skips_nothing_in_utc(expr: str, after: float) -> None:
    t = next_due(cron(expr), after, "UTC", 0)
    start = math.floor(after / 60) * 60
    for m in range(int(start), int(t), 60):  # every minute in between that is after `after` does not match
        if m > after:
            assert not _matches(expr, m, "UTC")


@settings(max_examples=200, deadline=None)
@given(created=instants, seconds=st.integers(1, 10 ** 7), offset=st.floats(-1e6, 1e9))
def test_interval_steps_exact(created: float, seconds: int, offset: float) -> None:
    after = created + offset
    t = next_due({"type": "interval", "seconds": seconds}, after, "UTC", created)
    assert t > after and t >= created + seconds
    k = round((t - created) / seconds)
    assert t == created + k * seconds
    assert k == 1 or created + (k - 1) * seconds <= after
    assert next_due({"type": "interval", "seconds": seconds}, t - 0.001, "UTC", created) == t


def test_delay_and_at_are_one_shots() -> None:
    assert next_due({"type": "delay", "seconds": 60}, 1000, "UTC", 1000) == 1060
    assert next_due({"type": "delay", "seconds": 60}, 1060, "UTC", 1000) is None
    s = {"type": "at", "at": "2030-05-01T09:00:00+08:00"}
    assert next_due(s, 0, "Europe/Berlin", 0) == datetime(2030, 5, 1, 1, tzinfo=timezone.utc).timestamp()
    assert next_due(s, next_due(s, 0, "UTC", 0), "UTC", 0) is None
    naive = {"type": "at", "at": "2030-05-01T09:00:00"}  # no offset: read in the job's zone
    assert wall(next_due(naive, 0, "Asia/Shanghai", 0), "UTC") == "2030-05-01T01:00:00+00:00"


@pytest.mark.parametrize("tz,day,gap_end", [
    ("Europe/Berlin", "2026-03-29", "2026-03-29T03:00:00+02:00"),
    ("America/New_York", "2026-03-08", "2026-03-08T03:00:00-04:00"),
])
def test_spring_forward_gap_runs_at_the_end_of_the_gap(tz: str, day: str, gap_end: str) -> None:
    before = at(f"{day}T00:00", tz)
    t = next_due(cron("30 2 * * *"), before, tz, 0)
    assert wall(t, tz) == gap_end
    # every minute in the gap maps to the same instant: runs once, then the next day
    t2 = next_due(cron("*/15 2 * * *"), before, tz, 0)
    assert t2 == t and next_due(cron("*/15 2 * * *"), t2, tz, 0) > t + 3600 * 20
    assert wall(next_due(cron("30 2 * * *"), t, tz, 0), tz).endswith("T02:30:00" + gap_end[-6:])
    # the minutes around the gap are untouched
    assert wall(next_due(cron("59 1 * * *"), before, tz, 0), tz).startswith(f"{day}T01:59:00")


@pytest.mark.parametrize("tz,day,first,second", [
    ("Europe/Berlin", "2026-10-25", "+02:00", "+01:00"),
    ("America/New_York", "2026-11-01", "-04:00", "-05:00"),
])
def test_fall_back_repeat_runs_once_at_the_first_occurrence(tz: str, day: str, first: str, second: str) -> None:
    hour = "02" if tz == "Europe/Berlin" else "01"
    expr = f"30 {int(hour)} * * *"
    t = next_due(cron(expr), at(f"{day}T00:00", tz), tz, 0)
    assert wall(t, tz) == f"{day}T{hour}:30:00{first}"
    t2 = next_due(cron(expr), t, tz, 0)
    assert wall(t2, tz).split("T")[0] != day  # not again at the second occurrence
    # every-minute crons skip the repeated hour's second pass too (each wall time once)
    t3 = next_due(cron("*/30 * * * *"), t, tz, 0)
    assert t3 - t == 3600 * 1.5 and wall(t3, tz) == f"{day}T{int(hour) + 1:02d}:00:00{second}"


def test_leap_day_and_impossible_days() -> None:
    t = next_due(cron("0 0 29 2 *"), at("2026-03-01T00:00", "UTC"), "UTC", 0)
    assert wall(t, "UTC") == "2028-02-29T00:00:00+00:00"
    t = next_due(cron("0 0 29 2 *"), t, "UTC", 0)
    assert wall(t, "UTC") == "2032-02-29T00:00:00+00:00"
    assert wall(next_due(cron("0 0 29 2 *"), at("2096-03-01T00:00", "UTC"), "UTC", 0), "UTC").startswith("2104-02-29")
    assert next_due(cron("0 0 30 2 *"), 0, "UTC", 0) is None


def test_day_of_month_or_day_of_week() -> None:
    # both restricted: either matches (cron(5)); 2026-02-01 is a Sunday
    after = at("2026-02-01T12:00", "UTC")
    assert wall(next_due(cron("0 0 13 * 5"), after, "UTC", 0), "UTC") == "2026-02-06T00:00:00+00:00"
    assert wall(next_due(cron("0 0 13 * 1"), at("2026-02-10T12:00", "UTC"), "UTC", 0), "UTC") == "2026-02-13T00:00:00+00:00"
    # day-of-week starred: only the day of month counts
    assert wall(next_due(cron("0 0 13 * *"), after, "UTC", 0), "UTC") == "2026-02-13T00:00:00+00:00"
    # 0 and 7 are Sunday; names work
    assert next_due(cron("0 0 * * 0"), after, "UTC", 0) == next_due(cron("0 0 * * 7"), after, "UTC", 0) \
        == next_due(cron("0 0 * * SUN"), after, "UTC", 0)
    assert wall(next_due(cron("0 0 * * 0"), after, "UTC", 0), "UTC") == "2026-02-08T00:00:00+00:00"


def test_cron_in_the_jobs_zone() -> None:
    after = at("2026-06-01T00:00", "UTC")
    assert wall(next_due(cron("0 9 * * *"), after, "Asia/Shanghai", 0), "UTC") == "2026-06-01T01:00:00+00:00"
    assert wall(next_due(cron("0 9 * * *"), after, "America/New_York", 0), "UTC") == "2026-06-01T13:00:00+00:00"


def test_bad_cron_is_a_value_error() -> None:
    for bad in ["61 * * * *", "* * * *", "5-1 * * * *", "*/0 * * * *", "* * * foo *"]:
        with pytest.raises(ValueError):
            parse_cron(bad)


def test_describe() -> None:
    assert describe({"type": "interval", "seconds": 300}, "UTC") == "every 5 minutes"
    assert describe({"type": "interval", "seconds": 3600}, "UTC") == "every hour"
    assert describe({"type": "delay", "seconds": 90}, "UTC") == "once, 90 seconds after creation"
    assert describe(cron("0 9 * * 1-5"), "Asia/Shanghai") == "at 09:00 on weekdays (Asia/Shanghai)"
    assert describe(cron("*/5 * * * *"), "UTC") == "every 5 minutes (UTC)"
    assert describe(cron("0 */4 * * *"), "UTC") == "every 4 hours at minute 0 (UTC)"
    assert describe({"type": "at", "at": "2030-05-01T09:00:00+08:00"}, "Asia/Shanghai") == \
        "once at 2030-05-01 09:00 (Asia/Shanghai)"
