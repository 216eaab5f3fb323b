"""/api/deliveries: the outbox to external channels, seen and retried by the owner (docs/CHANNELS.md).

GET /api/deliveries[?status=pending|sent|failed|deferred] -> counts by status per channel and the latest
50 rows; POST /api/deliveries/<id>/retry puts a failed row back to pending and wakes its lane.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from picobot.channels import outbound
from picobot.storage import outbox

bp = Blueprint("deliveries", __name__, url_prefix="/api/deliveries")

STATUSES = (outbox.PENDING, outbox.SENT, outbox.FAILED, outbox.DEFERRED)
LATEST = 50
TEXT_PREVIEW = 200


def _error(status: int, code: str, text: str) -> Response:
    resp = jsonify({"error": code, "message": text})
    resp.status_code = status
    return resp


def _row(r: Any) -> dict[str, Any]:
    payload = r.payload or {}
    return {"id": r.id, "channel": r.channel, "chat_id": r.chat_id, "kind": r.kind, "status": r.status,
            "attempts": r.attempts, "session_id": r.session_id, "turn_id": r.turn_id,
            "text": str(payload.get("text") or "")[:TEXT_PREVIEW], "reply_to": payload.get("reply_to"),
            "error": r.last_error, "error_code": r.error_code, "created_at": r.created_at, "sent_at": r.sent_at,
            "next_attempt_at": r.next_attempt_at, "result": r.result}


@bp.get("")
def list_deliveries() -> Response:
    status = request.args.get("status") or None
    if status is not None and status not in STATUSES:
        return _error(400, "bad_request", f"status must be one of {', '.join(STATUSES)}")
    rt = current_app.extensions["picobot"]
    with rt.db.connect() as conn:
        counts = outbox.counts(conn)
        rows = outbox.latest(conn, status, LATEST)
    return jsonify({"counts": counts, "deliveries": [_row(r) for r in rows]})


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
