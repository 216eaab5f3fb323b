"""Inbound webhooks at the web edge: `POST /hooks/<name>`, `GET /hooks/runs/<id>`, `GET /api/hooks`.

Thin: every rule (signature, body, template, storage) lives in picobot/webhooks. The POST path
of each configured hook is open to the pairing guard (web/auth.py): the sender proves itself by
its signature. The run status and the Jobs page's list go through the guard like /api.
Every answer here is JSON, errors too.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from picobot.webhooks import runs
from picobot.webhooks.accept import HookError, accept, hook_config

PATHS = "picobot.webhook_paths"  # app.extensions key shared with web/plugin_routes.py (the platforms' webhooks)
RUN_ID_CHARS = 64
RECENT_RUNS = 50

bp = Blueprint("webhooks", __name__)


def init_app(app: Flask) -> None:
    rt = app.extensions["picobot"]
    for name in rt.config.hooks:
        app.extensions.setdefault(PATHS, set()).add(f"/hooks/{name}")
    app.register_blueprint(bp)


def _json(status: int, body: dict[str, Any]) -> Response:
    resp = jsonify(body)
    resp.status_code = status
    return resp


def _error(status: int, code: str, message: str) -> Response:
    return _json(status, {"error": code, "message": message})


@bp.route("/hooks/<name>", methods=["POST", "GET", "PUT", "PATCH", "DELETE"])
def receive(name: str) -> Response:
    rt = current_app.extensions["picobot"]
    if request.method != "POST":
        return _error(405, "method_not_allowed", "Send the webhook with POST.")
    try:
        hook = hook_config(rt, name)
        if (request.content_length or 0) > hook.max_body_bytes:
            raise HookError(413, "too_large", f"The body is over {hook.max_body_bytes} bytes.")
        request.max_content_length = hook.max_body_bytes + 1  # the hook's own cap, not gateway.max_frame_bytes
        try:
            body = request.get_data(cache=False)
        except RequestEntityTooLarge:
            raise HookError(413, "too_large", f"The body is over {hook.max_body_bytes} bytes.") from None
        accepted = accept(rt, name, request.headers, body)
    except HookError as exc:
        return _error(exc.status, exc.code, exc.message)
    resp = _json(202, {"run_id": accepted.run_id})
    if not accepted.created:
        resp.headers["Idempotent-Replayed"] = "true"  # the same answer as the first time; nothing new stored
    return resp


@bp.get("/hooks/runs/<run_id>")
def run_status(run_id: str) -> Response:
    if len(run_id) > RUN_ID_CHARS:
        return _error(404, "not_found", "No such webhook run.")
    with current_app.extensions["picobot"].db.connect() as conn:
        run = runs.get(conn, run_id)
    if run is None:
        return _error(404, "not_found", "No such webhook run.")
    return jsonify(run)


@bp.get("/api/hooks")
def list_hooks() -> Response:
    """The Jobs page's Webhooks section: each configured hook and the newest runs."""
    rt = current_app.extensions["picobot"]
    hooks = [{"name": name, "mode": h.mode, "agent": h.agent, "enabled": h.enabled,
              "deliver": None if h.deliver is None else h.deliver.model_dump(), "callback": bool(h.callback_url)}
             for name, h in sorted(rt.config.hooks.items())]
    with rt.db.connect() as conn:
        recent = runs.recent(conn, RECENT_RUNS)
    return jsonify({"hooks": hooks, "runs": recent})
