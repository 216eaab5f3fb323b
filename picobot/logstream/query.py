"""Reading the log stream back: newest first, filtered by level, process, logger and text.

The filters are parsed from untrusted query parameters (`parse_query`) and the entries from a
stream anyone with Redis access can write to (`decode`), so both accept any input and turn what
does not fit into a clear error or a skipped field, never an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from picobot.logstream import LEVELS, STREAM_KEY

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
MAX_SCANNED = 20_000  # entries looked at per request; past that the answer says where to go on
CHUNK = 500
MAX_Q_CHARS = 200
_STREAM_ID = re.compile(r"\d{1,20}-\d{1,20}")
_NAME = re.compile(r"[\w.@:\-]{1,128}")
_RANK = {name: i for i, name in enumerate(LEVELS)}


class QueryError(ValueError):
    """A bad filter: `param` names the query parameter, the message says what it accepts."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class LogQuery:
    level: str | None = None  # this level and above
    q: str = ""  # case-insensitive text in the message or the logger name
    process: str | None = None  # the role (web, worker, beat, ...) or a node name (w1@host)
    logger: str | None = None  # this logger and its children (picobot.gateway -> picobot.gateway.intake)
    limit: int = DEFAULT_LIMIT
    before: str | None = None  # a stream id: only older entries (the `next_before` of the last page)

    def matches(self, entry: Mapping[str, Any]) -> bool:
        if self.level is not None and _RANK.get(entry["level"], len(LEVELS)) < _RANK[self.level]:
            return False
        if self.process is not None and self.process not in (entry["process"], entry["name"]):
            return False
        if self.logger is not None and not (entry["logger"] == self.logger
                                            or entry["logger"].startswith(self.logger + ".")):
            return False
        return not self.q or self.q in entry["message"].casefold() or self.q in entry["logger"].casefold()


def _text(args: Mapping[str, str], name: str) -> str:
    value = args.get(name)
    return value.strip() if isinstance(value, str) else ""


def parse_query(args: Mapping[str, str]) -> LogQuery:
    """The filters of GET /api/logs; QueryError for anything out of shape."""
    level = _text(args, "level").upper() or None
    if level is not None and level not in _RANK:
        raise QueryError("level", f"level must be one of {', '.join(LEVELS)}.")
    q = _text(args, "q")
    if len(q) > MAX_Q_CHARS:
        raise QueryError("q", f"q is at most {MAX_Q_CHARS} characters.")
    names = {}
    for param in ("process", "logger"):
        value = _text(args, param) or None
        if value is not None and not _NAME.fullmatch(value):
            raise QueryError(param, f"{param} is a name of letters, digits and . _ @ : - (at most 128).")
        names[param] = value
    raw_limit = _text(args, "limit") or str(DEFAULT_LIMIT)
    if not raw_limit.isascii() or not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_LIMIT:
        raise QueryError("limit", f"limit must be a whole number from 1 to {MAX_LIMIT}.")
    before = _text(args, "before") or None
    if before is not None and not (before.isascii() and _STREAM_ID.fullmatch(before)
                                   and all(int(part) < 2**64 for part in before.split("-"))):
        raise QueryError("before", "before must be a stream id such as 1733150000000-0 (a page's next_before).")
    return LogQuery(level, q.casefold(), names["process"], names["logger"], int(raw_limit), before)


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) < 1e12 else None  # no NaN, no absurd times


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10 else None


def decode(entry_id: str, fields: Mapping[str, Any], max_chars: int = 20_000) -> dict[str, Any]:
    """One stream entry as the API shows it; missing or odd fields become null or ""."""
    def s(name: str, cap: int = 200) -> str:
        value = fields.get(name)
        return value[:cap] if isinstance(value, str) else ""

    level = s("level", 16).upper()
    return {"id": entry_id, "ts": _float(fields.get("ts")), "level": level if level in _RANK else (level or "INFO"),
            "logger": s("logger"), "process": s("process", 32), "name": s("name", 128), "host": s("host", 128),
            "pid": _int(fields.get("pid")), "message": s("msg", max_chars), "truncated": fields.get("truncated") == "1"}


def _older(entry_id: str) -> str:
    """The exclusive upper bound just below `entry_id` (XREVRANGE's "(" needs Redis 6.2; this works everywhere)."""
    ms, _, seq = entry_id.partition("-")
    if int(seq) > 0:
        return f"{ms}-{int(seq) - 1}"
    return f"{int(ms) - 1}-18446744073709551615" if int(ms) > 0 else ""


def read(redis: Any, query: LogQuery, redact: Callable[[str], str] | None = None) -> dict[str, Any]:
    """{"lines": newest first, "next_before": where the next older page starts (None at the stream's
    start), "scanned": entries looked at}. A filter that matches little stops at MAX_SCANNED."""
    lines: list[dict[str, Any]] = []
    upper = "+" if query.before is None else _older(query.before)
    scanned, last_id = 0, None
    while upper and len(lines) < query.limit and scanned < MAX_SCANNED:
        chunk = redis.xrevrange(STREAM_KEY, max=upper, min="-", count=CHUNK)
        for entry_id, fields in chunk:
            scanned, last_id = scanned + 1, entry_id
            line = decode(entry_id, fields)
            if query.matches(line):
                if redact is not None:
                    line["message"] = redact(line["message"])
                lines.append(line)
                if len(lines) >= query.limit:
                    break
        if len(chunk) < CHUNK and (not chunk or last_id == chunk[-1][0]):
            return {"lines": lines, "next_before": None, "scanned": scanned}  # the whole stream was read
        if last_id is None:  # no entry at all: returned above
            break
        upper = _older(last_id)
    return {"lines": lines, "next_before": last_id if upper else None, "scanned": scanned}
