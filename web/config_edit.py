"""GET /api/config/editable and PATCH /api/config: the Config page's editor (docs/API.md).

Thin: the allowlist, the checks and the atomic write live in picobot/config/edit.py. Here a request
becomes `save_changes(...)` with the project's own loader and the plugins' config checks as the
validator, so a candidate is judged exactly as a process judges its config at start. Values go out
masked like `GET /api/config`; the edit is logged with its keys, never its values.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, current_app, g, jsonify, request

from picobot.app import App as Runtime, check_config
from picobot.config import CONFIG_FILE, Config, load_config
from picobot.config.edit import EditError, entries, file_version, parse_changes, read_raw, save_changes
from picobot.config.secrets import masked
from picobot.errors import ConfigError

log = logging.getLogger(__name__)

bp = Blueprint("config_edit", __name__, url_prefix="/api")

PROCESS_NAMES = {"web": "web (gateway)", "worker": "workers", "beat": "beat",
                 "channels": "channel pollers (picobot feishu / telegram / wechat)"}


def _rt() -> Runtime:
    return current_app.extensions["picobot"]


def _path(rt: Runtime) -> Path:
    """The file this install reads: the one it started with, else `<home>/config.json` (created on save)."""
    return Path(rt.config.config_path) if rt.config.config_path else Path(rt.config.home) / CONFIG_FILE


def _validate(rt: Runtime) -> Any:
    def validate(candidate: Path) -> Config:
        config = load_config(home=rt.config.home, path=candidate)
        check_config(config, rt.plugins)
        return config
    return validate


def _from_file(rt: Runtime, path: Path) -> tuple[Config | None, str | None]:
    """The config the file gives now (None and why when it does not load)."""
    try:
        return (load_config(home=rt.config.home, path=path) if path.is_file() else load_config(home=rt.config.home)), None
    except ConfigError as exc:
        return None, str(exc).replace("\n", " ")[:2000]


def _error(exc: EditError) -> Response:
    resp = jsonify({"error": exc.code, "message": str(exc),
                    "problems": [{"key": k, "reason": r} for k, r in exc.problems], **exc.extra})
    resp.status_code = exc.status
    return resp


def _etag(resp: Response, version: str) -> Response:
    resp.headers["ETag"] = f'"{version}"'
    resp.headers["Cache-Control"] = "no-store"
    return resp


def _if_match() -> str | None:
    header = request.headers.get("If-Match", "").strip()
    if not header:
        return None
    return header.removeprefix("W/").strip('"')[:64]


@bp.get("/config/editable")
def editable() -> Response:
    rt = _rt()
    path = _path(rt)
    version = file_version(path)  # read before the file: a save in between shows as a 409 later, never lost
    effective, problem = _from_file(rt, path)
    running = masked(rt.config)
    shown = masked(effective) if effective is not None else running
    body = {"source": str(path), "exists": path.is_file(), "version": version, "file_error": problem,
            "keys": entries(shown, running, read_raw(path)), "processes": PROCESS_NAMES,
            "note": "Nothing reloads config.json while it runs: a saved key takes effect when the processes "
                    "it names restart."}
    return _etag(jsonify(body), version)


@bp.patch("/config")
def edit() -> Response:
    rt = _rt()
    expected = _if_match()
    if expected is None:
        return _error(EditError(428, "version_required", "Send If-Match with the version (ETag) of "
                                "GET /api/config/editable, or If-Match: * to overwrite whatever is there."))
    path = _path(rt)
    effective, _ = _from_file(rt, path)
    names = {s: set(getattr(rt.config, s)) | set(getattr(effective, s) if effective else ()) for s in ("agents", "models", "channels")}
    try:
        changes = parse_changes(request.get_json(silent=True), names)
        result = save_changes(path, changes, expected, _validate(rt))
    except EditError as exc:
        return _error(exc)
    device = getattr(getattr(g, "device", None), "id", None)
    log.info("config: %s saved from the web UI (device %s): %s", path, device, ", ".join(result.saved))
    who = ", ".join(PROCESS_NAMES[p] for p in result.restart)
    return _etag(jsonify({"saved": result.saved, "version": result.version, "source": str(path),
                          "restart": result.restart,
                          "message": f"Saved to {path}. It takes effect when these restart: {who}."}), result.version)
