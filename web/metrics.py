"""`GET /metrics`: Prometheus text format for the whole deployment, served by the gateway.

Open without a token to a scraper on this machine (web/auth.py `local_client`), otherwise a paired
device's Bearer token, like `/api`. 404 when `metrics.enabled` is false.
"""

from __future__ import annotations

from flask import Blueprint, Flask, Response, abort, current_app

from picobot.app import App as Runtime
from picobot.observability.gateway import GatewayCollector, exposition

PATH = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

bp = Blueprint("metrics", __name__)


def init_app(app: Flask) -> None:
    """Register /metrics when the metrics plugin runs in this process."""
    rt: Runtime = app.extensions["picobot"]
    if not rt.config.metrics.enabled:
        return
    hub = app.extensions.get("picobot.hub")
    app.extensions["picobot.metrics"] = GatewayCollector(
        rt.plugins.plugin("metrics").metrics, rt, rt.config.metrics.publish_interval_secs,
        hub.connections if hub is not None else None, f"web:{rt.worker_name}")
    app.register_blueprint(bp)


@bp.get(PATH)
def metrics() -> Response:
    collector = current_app.extensions.get("picobot.metrics")
    if collector is None:
        abort(404)
    return Response(exposition(collector), mimetype=None, content_type=CONTENT_TYPE,
                    headers={"Cache-Control": "no-store"})
