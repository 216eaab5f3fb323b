"""GET /api/settings and PATCH /api/settings/<key>: plugin settings at run time (behind the pairing guard).

Thin: merging, validation, masking and the write live in picobot/runtime/settings_store.py. A PATCH body
is a JSON object of field -> value (null drops the run-time value); it is written whole or not at all.
"""

from __future__ import annotations

import logging

from flask import Blueprint, Response, current_app, jsonify, request

from picobot.errors import ConfigError
from picobot.runtime.settings_store import SettingsStore
from web.auth import current_device

log = logging.getLogger(__name__)

bp = Blueprint("settings_api", __name__, url_prefix="/api/settings")


def _store() -> SettingsStore:
    rt = current_app.extensions["picobot"]
    return SettingsStore(rt.config, rt.plugins, rt.db)


def _error(status: int, code: str, text: str) -> Response:
    resp = jsonify({"error": code, "message": text})
    resp.status_code = status
    return resp


@bp.get("")
def list_settings() -> Response:
    store = _store()
    return jsonify({"settings": [store.describe(spec.key) for spec in sorted(store.specs(), key=lambda s: s.key)]})


@bp.patch("/<key>")
def patch_settings(key: str) -> Response:
    store = _store()
    if key not in {spec.key for spec in store.specs()}:
        return _error(404, "not_found", f"No plugin registered settings under {key!r}.")
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or not body:
        return _error(400, "bad_request", "The body is a JSON object of setting -> value (null to unset).")
    values = {name: value for name, value in body.items() if value is not None}
    unset = [name for name, value in body.items() if value is None]
    device = current_device()
    try:
        store.update(key, values, unset, by=f"web:{device.id}" if device is not None else "web")
    except ConfigError as exc:
        return _error(400, "invalid", str(exc))
    log.info("plugin settings %s changed: %s", key, ", ".join(sorted(body)))
    return jsonify(store.describe(key))
