"""GET /health: one JSON entry per dependency."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify

from picobot.runtime.health import check_health

bp = Blueprint("health", __name__)


@bp.get("/health")
def health():  # type: ignore[no-untyped-def]
    report = check_health(current_app.extensions["picobot"])
    report["connections"] = current_app.extensions["picobot.hub"].connections()
    # 200 while the web process itself serves; the body says what is degraded
    return jsonify(report)
