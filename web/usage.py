"""GET /api/usage: tokens and estimated cost from the usage ledger, grouped, with a per-day series.

?by=user,agent (repeatable; several dimensions group together) &since=30d &until=today &user= &agent=
&limit=100 -> {since, until, by, filters, total, groups, more, days}. The Usage page reads it; the
parsers are those of `picobot usage`, so both accept and refuse the same input (docs/API.md).
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify, request

from picobot.errors import InputRejected
from picobot.storage import usage_report as ur

bp = Blueprint("usage", __name__, url_prefix="/api/usage")
KNOWN = {"by", "since", "until", "user", "agent", "limit"}


def _error(text: str) -> Response:
    resp = jsonify({"error": "bad_request", "message": text})
    resp.status_code = 400
    return resp


@bp.get("")
def usage() -> Response:
    unknown = sorted(set(request.args) - KNOWN)
    if unknown:
        return _error(f"unknown parameter {unknown[0][:40]!r}; this endpoint takes {', '.join(sorted(KNOWN))}.")
    args = request.args
    try:
        by = ur.parse_by(args.getlist("by"))
        days = ur.parse_range(args.get("since"), args.get("until"))
        filters = ur.Filters(user=ur.parse_filter("user", args.get("user")),
                             agent=ur.parse_filter("agent", args.get("agent")))
        limit = ur.parse_limit(args.get("limit"))
    except InputRejected as exc:
        return _error(str(exc))
    with current_app.extensions["picobot"].db.connect() as conn:
        return jsonify(ur.report(conn, by, days, filters, limit, series=True))
