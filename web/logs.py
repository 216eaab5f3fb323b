"""GET /api/logs: recent log lines of every process (web, workers, beat, channel pollers), newest first.

The lines were redacted by each process before they reached Redis (picobot/logstream/capture.py);
they are redacted once more here against this process's secrets, in case a process logged one it
did not know of. See docs/API.md and docs/OPERATIONS.md.
"""

from __future__ import annotations

import logging

import redis
from flask import Blueprint, Response, current_app, jsonify, request

from picobot.app import App as Runtime
from picobot.logstream import LEVELS
from picobot.logstream.query import QueryError, parse_query, read
from picobot.security.redact import redact

log = logging.getLogger(__name__)

bp = Blueprint("logs", __name__, url_prefix="/api")


def _error(status: int, code: str, text: str, **extra: object) -> Response:
    resp = jsonify({"error": code, "message": text, **extra})
    resp.status_code = status
    return resp


@bp.get("/logs")
def logs() -> Response:
    rt: Runtime = current_app.extensions["picobot"]
    try:
        query = parse_query(request.args)
    except QueryError as exc:
        return _error(400, "bad_query", str(exc), param=exc.param)
    secrets = rt.secrets
    try:
        page = read(rt.redis, query, redact=lambda text: redact(text, secrets))
    except redis.RedisError as exc:
        log.warning("GET /api/logs: Redis is unreachable (%s)", type(exc).__name__)
        return _error(503, "redis_unavailable", "The log lines live in Redis, which does not answer; "
                      "each process still writes every line to its stderr.")
    capture = rt.config.logging.capture
    return jsonify({**page, "levels": list(LEVELS), "capture": {"enabled": capture.enabled, "level": capture.level,
                                                                "max_lines": capture.max_lines}})
