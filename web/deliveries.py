"""/api/deliveries: the outbox to external channels, seen and retried by the owner (docs/CHANNELS.md).

GET /api/deliveries[?status=&channel=&chat_id=&before=&limit=50] -> a page of rows, newest first
(`next_before` continues it), and on the first page the counts by status per channel;
POST /api/deliveries/<id>/retry puts a failed row back to pending and wakes its lane.
Texts and errors are masked (web/masking.py) before they go out.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from picobot.channels import outbound
from picobot.storage import outbox
from web.masking import shown, shown_tree

bp = Blueprint("deliveries", __name__, url_prefix="/api/deliveries")

STATUSES = (outbox.PENDING, outbox.SENT, outbox.FAILED, outbox.DEFERRED)
LATEST = 50
MAX_LIMIT = 200
TEXT_PREVIEW = 200
ERROR_CHARS = 2000
CHANNEL = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
CHAT_ID = re.compile(r"[^\x00-\x1f\x7f]{1,256}")
ID = re.compile(r"[0-9]{1,18}")


class BadParam(ValueError):
    """A query parameter that cannot be used: the message says which and what it takes."""


def _error(status: int, code: str, text: str) -> Response:
    resp = jsonify({"error": code, "message": text})
    resp.status_code = status
    return resp


def _row(r: Any) -> dict[str, Any]:
    payload = r.payload or {}
    return {"id": r.id, "channel": r.channel, "chat_id": r.chat_id, "kind": r.kind, "status": r.status,
            "attempts": r.attempts, "session_id": r.session_id, "turn_id": r.turn_id,
            "text": shown(payload.get("text") or "", TEXT_PREVIEW), "reply_to": payload.get("reply_to"),
            "error": shown(r.last_error, ERROR_CHARS), "error_code": r.error_code, "created_at": r.created_at,
            "sent_at": r.sent_at, "next_attempt_at": r.next_attempt_at, "updated_at": r.updated_at,
            "result": shown_tree(r.result)}


def _arg(name: str, pattern: re.Pattern[str], what: str) -> str | None:
    value = request.args.get(name)
    if value is None or value == "":
        return None
    if not pattern.fullmatch(value):
        raise BadParam(f"{name} must be {what}.")
    return value


def _filters() -> dict[str, Any]:
    status = request.args.get("status") or None
    if status is not None and status not in STATUSES:
        raise BadParam(f"status must be one of {', '.join(STATUSES)}.")
    before = _arg("before", ID, "a delivery id (a whole number), as next_before gave it")
    limit = _arg("limit", ID, f"a whole number from 1 to {MAX_LIMIT}")
    if limit is not None and not 1 <= int(limit) <= MAX_LIMIT:
        raise BadParam(f"limit must be a whole number from 1 to {MAX_LIMIT}.")
    return {"status": status,
            "channel": _arg("channel", CHANNEL, "a channel key: 1-64 letters, digits, '_', '.', ':' or '-'"),
            "chat_id": _arg("chat_id", CHAT_ID, "1-256 characters without control characters"),
            "before": int(before) if before is not None else None,
            "limit": int(limit) if limit is not None else LATEST}


@bp.get("")
def list_deliveries() -> Response:
    try:
        filters = _filters()
    except BadParam as exc:
        return _error(400, "bad_request", str(exc))
    rt = current_app.extensions["picobot"]
    first = filters["before"] is None
    with rt.db.connect() as conn:
        counts = outbox.counts(conn) if first else {}  # a scan of the whole table: once per listing, not per page
        rows = outbox.page(conn, **filters)
    more = len(rows) == filters["limit"]
    head = {"counts": counts, "channels": sorted(counts)} if first else {}
    return jsonify(head | {"deliveries": [_row(r) for r in rows], "next_before": rows[-1].id if more else None})


@bp.post("/<int:row_id>/retry")
def retry(row_id: int) -> Response:
    rt = current_app.extensions["picobot"]
    with rt.db.begin() as conn:
        row = outbox.retry(conn, row_id)
        status = None if row is not None else outbox.status_of(conn, row_id)
    if row is None:
        if status is None:
            return _error(404, "not_found", f"No delivery {row_id}.")
        return _error(409, "not_failed", f"Delivery {row_id} is {status}; only failed ones are retried.")
    outbound.wake(rt, row.channel, row.chat_id)
    return jsonify(_row(row))
