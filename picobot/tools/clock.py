"""`get_time`: the current date and time in an IANA time zone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from picobot.errors import ToolError
from picobot.tools.base import Tool, ToolContext

# Machines without a tz database (e.g. Windows without the tzdata package) still know UTC.
_UTC_NAMES = {"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "Zulu", "Universal"}


class ClockTool(Tool):
    name = "get_time"
    description = (
        "Date, time, weekday and UTC offset now, in the timezone you name or the user's."
    )
    parameters = {
        "type": "object",
        "properties": {
            "timezone": {
                "type": "string",
                "description": "IANA zone, e.g. Asia/Tokyo. Default: the user's.",
            }
        },
        "required": [],
        "additionalProperties": False,
    }
    read_only = True

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        # `now` returns an aware datetime; injectable so tests can fix the clock.
        self._now = now or (lambda: datetime.now(timezone.utc))

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        zone_name = (args.get("timezone") or "").strip() or ctx.timezone or "UTC"
        zone = load_zone(zone_name)
        return describe_time(self._now().astimezone(zone), zone_name)


def load_zone(name: str) -> tzinfo:
    """The tzinfo for an IANA name; ToolError naming it if unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        if name in _UTC_NAMES:
            return timezone.utc
        raise ToolError(
            f"Unknown time zone {name!r}. Use an IANA name such as \"Europe/London\", "
            "\"America/Los_Angeles\" or \"UTC\"."
        ) from None


def describe_time(moment: datetime, zone_name: str) -> str:
    moment = moment.replace(microsecond=0)
    abbreviation = moment.tzname() or ""
    zone_text = zone_name if abbreviation in ("", zone_name) else f"{zone_name} ({abbreviation})"
    return "\n".join(
        [
            moment.isoformat(),
            f"Weekday: {moment.strftime('%A')}",
            f"UTC offset: {format_offset(moment.utcoffset() or timedelta(0))}",
            f"Time zone: {zone_text}",
        ]
    )


def format_offset(offset: timedelta) -> str:
    total = int(offset.total_seconds())
    sign = "-" if total < 0 else "+"
    hours, rest = divmod(abs(total), 3600)
    return f"UTC{sign}{hours:02d}:{rest // 60:02d}"
