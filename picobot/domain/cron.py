"""The cron grammar, one implementation: 5 fields (minute hour day-of-month month day-of-week).

As in cron(5): lists, ranges, steps (`a/n` means `a-max/n`), month and day names (any case),
0 and 7 for Sunday. `check_cron` validates an expression (the config schema's validator);
`parse_cron` gives its parsed form, the sets of values each field allows, which the scheduler's
schedule maths (picobot.scheduler.schedules) search. Errors are ValueError saying what is wrong.
"""

from __future__ import annotations

from datetime import date
from functools import lru_cache

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, {m: i for i, m in enumerate(MONTHS, 1)}),
    ("day-of-week", 0, 7, {d: i for i, d in enumerate(DAYS)}),  # 0 and 7 are both Sunday
)


def _value(part: str, field: str, low: int, high: int, names: dict[str, int]) -> int:
    value = int(part) if part.isascii() and part.isdigit() else names.get(part.lower())
    if value is None or not low <= value <= high:
        raise ValueError(f"{part!r} is not valid in the {field} field ({low}-{high})")
    return value


def _item(item: str, field: str, low: int, high: int, names: dict[str, int]) -> range:
    """The values one comma-separated item of a field allows."""
    base, slash, step = item.partition("/")
    if slash and not (step.isascii() and step.isdigit() and int(step) > 0):
        raise ValueError(f"bad step {step!r} in the {field} field")
    every = int(step) if slash else 1
    if base == "*":
        return range(low, high + 1, every)
    a, dash, b = base.partition("-")
    start = _value(a, field, low, high, names)
    end = _value(b, field, low, high, names) if dash else (high if slash else start)
    if start > end:
        raise ValueError(f"range {base!r} runs backwards in the {field} field")
    return range(start, end + 1, every)


def _fields(expression: str) -> list[str]:
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(
            "a cron expression has 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)}"
        )
    return fields


def _field_values(text: str, i: int) -> set[int]:
    field, low, high, names = _FIELDS[i]
    out: set[int] = set()
    for item in text.split(","):
        out.update(_item(item, field, low, high, names))
    return out


class Cron:
    """A parsed 5-field cron expression."""

    __slots__ = ("expression", "minutes", "hours", "days", "months", "weekdays", "dom_star", "dow_star")

    def __init__(self, expression: str):
        fields = _fields(expression)
        self.expression = " ".join(fields)
        sets = [_field_values(text, i) for i, text in enumerate(fields)]
        self.minutes, self.hours = sorted(sets[0]), sorted(sets[1])
        self.days, self.months = frozenset(sets[2]), frozenset(sets[3])
        self.weekdays = frozenset(d % 7 for d in sets[4])  # 7 is Sunday too
        self.dom_star, self.dow_star = fields[2].startswith("*"), fields[4].startswith("*")

    def day_matches(self, d: date) -> bool:
        """Whether the day is allowed; when both day fields are restricted, a day matching EITHER is."""
        dom = d.day in self.days
        dow = (d.weekday() + 1) % 7 in self.weekdays
        if self.dom_star and self.dow_star:
            return True
        if self.dom_star:
            return dow
        if self.dow_star:
            return dom
        return dom or dow


@lru_cache(maxsize=4096)
def parse_cron(expression: str) -> Cron:
    """A parsed cron expression (cached); ValueError when it is not valid."""
    return Cron(expression)


def check_cron(expression: str) -> str:
    """Validate a 5-field cron expression; return it with whitespace normalised."""
    return parse_cron(expression).expression
