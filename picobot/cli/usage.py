"""`picobot usage`: tokens and estimated cost from the usage ledger, grouped, as a table or JSON.

Reads SQL directly with this machine's config (whoever can read the config can read the spend).
Ranges are UTC days, inclusive: `--since 7d` is the last seven days, today included.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when the command runs: every command builds this parser
    from picobot.config import Config

EXIT_BAD_INPUT = 2
HEADERS = {"user": "USER", "agent": "AGENT", "model": "MODEL", "job": "JOB", "day": "DAY", "kind": "KIND",
           "session": "SESSION", "channel": "CHANNEL"}


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("usage", help="tokens and estimated cost by user, agent, model, job, day or kind")
    p.add_argument("--by", action="append", metavar="DIM",
                   help="group by user, agent, model, job, day, kind, session or channel; repeat or use a comma "
                        "list to group by several at once (default: day)")
    p.add_argument("--since", help="first UTC day: YYYY-MM-DD, today, or a number of days such as 7d (default 30d)")
    p.add_argument("--until", help="last UTC day, included: YYYY-MM-DD, today or Nd (default today)")
    p.add_argument("--user", help="only this user ('<channel>:<sender_id>')")
    p.add_argument("--agent", help="only this agent")
    p.add_argument("--limit", help="at most this many groups (default 100)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def run(config: Config, args: argparse.Namespace) -> int:
    from picobot.errors import InputRejected
    from picobot.storage import usage_report as ur
    from picobot.storage.db import Database

    try:
        by = ur.parse_by(args.by or ["day"], "--by")
        days = ur.parse_range(args.since, args.until, names=("--since", "--until"))
        filters = ur.Filters(user=ur.parse_filter("--user", args.user), agent=ur.parse_filter("--agent", args.agent))
        limit = ur.parse_limit(args.limit, "--limit")
    except InputRejected as exc:
        print(f"picobot usage: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    db = Database(config.database_url)
    try:
        db.migrate()  # a fresh home answers "no usage" rather than "no such table"
        with db.connect() as conn:
            result = ur.report(conn, by, days, filters, limit)
    finally:
        db.dispose()
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        for line in table(result):
            print(line.encode("utf-8", "backslashreplace").decode("utf-8"))
    return 0


def table(result: dict[str, Any]) -> list[str]:
    """The readable report: a header line, one row per group, a TOTAL row."""
    by = result["by"]
    scope = "".join(f", {k} {v}" for k, v in result["filters"].items())
    head = f"Usage {result['since']} to {result['until']} (UTC days{scope}); cost is estimated, in USD"
    if not result["total"]["calls"]:
        return [head, "no model calls recorded in this range"]
    rows = [[HEADERS[d] for d in by] + ["CALLS", "INPUT", "CACHED", "OUTPUT", "COST"]]
    rows += [[_cell(g["key"][d]) for d in by] + _numbers(g) for g in result["groups"]]
    rows.append(["TOTAL"] + [""] * (len(by) - 1) + _numbers(result["total"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    keys = len(by)
    out = [head]
    for r in rows:
        cells = [c.ljust(w) if i < keys else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        out.append("  ".join(cells).rstrip())
    if result["more"]:
        out.append(f"(only the first {len(result['groups'])} groups; --limit shows more; TOTAL counts them all)")
    return out


def _cell(value: Any) -> str:
    text = "-" if value in (None, "") else str(value)
    return " ".join(text.split())  # a stored name's newlines or tabs never break the table


def _numbers(t: dict[str, Any]) -> list[str]:
    return [f"{t['calls']:,}", f"{t['input_tokens']:,}", f"{t['cached_input_tokens']:,}", f"{t['output_tokens']:,}",
            f"${t['cost_usd']:.4f}"]
