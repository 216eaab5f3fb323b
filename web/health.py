"""GET /health: ok or not for anyone; one JSON entry per dependency for those allowed to see it.

The details (worker names, model, error texts) help an attacker map the deployment, so a
client from elsewhere gets only the verdict, with the HTTP status a load balancer reads:
200 `{"status": "ok"}` or 503 `{"status": "degraded"}`. A paired device, a request from this
machine (not relayed by a proxy), or any client when pairing is off gets the full report,
HTTP 200 while the web process serves.
"""

from __future__ import annotations

import ipaddress

from flask import Blueprint, Response, current_app, jsonify, request

from picobot.runtime.health import check_health
from web.auth import pairing, request_token

bp = Blueprint("health", __name__)

# A request relayed by a proxy on this machine arrives from loopback but is not local.
PROXY_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")


@bp.get("/health")
def health() -> Response:
    report = check_health(current_app.extensions["picobot"])
    if not may_see_details():
        resp = jsonify({"status": report["status"]})
        resp.status_code = 200 if report["status"] == "ok" else 503
        return resp
    report["connections"] = current_app.extensions["picobot.hub"].connections()
    return jsonify(report)


def may_see_details() -> bool:
    if not current_app.extensions["picobot"].config.gateway.pairing_required:
        return True  # everything is open then, /api/health included
    if is_local():
        return True
    token, _ = request_token()
    return bool(token) and pairing().verify(token) is not None


def is_local() -> bool:
    try:
        ip = ipaddress.ip_address(request.remote_addr or "")
    except ValueError:
        return False
    loopback = (getattr(ip, "ipv4_mapped", None) or ip).is_loopback
    return loopback and not any(name in request.headers for name in PROXY_HEADERS)
