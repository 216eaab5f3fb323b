"""POST {webhook_path} (default /feishu/events): Feishu's event callbacks, handed to the webhook module.

Registered by `init_app` only for enabled Feishu channels in webhook mode. The path is open
to the pairing guard (web/auth.py): Feishu proves itself with the verification token and the
signature instead. Every answer on the path is JSON, errors too (404, 405, 413): Feishu
treats anything else as a failure and redelivers.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, Response, current_app, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from picobot.channels.feishu.config import FeishuConfig
from picobot.channels.feishu.webhook import MAX_BODY_BYTES, handle
from web.auth import is_webhook_path

PATHS = "picobot.webhook_paths"  # app.extensions key: paths the pairing guard leaves to their own checks


def init_app(app: Flask) -> None:
    rt = app.extensions["picobot"]
    for key, channel in rt.config.channels.items():
        if channel.type != "feishu" or not channel.enabled:
            continue
        cfg = FeishuConfig.from_channel(channel)
        if cfg.mode != "webhook":
            continue
        app.add_url_rule(cfg.webhook_path, endpoint=f"feishu_events_{key}", methods=["POST"],
                         view_func=_view(key, cfg))
        app.extensions.setdefault(PATHS, set()).add(cfg.webhook_path)
    if app.extensions.get(PATHS):
        for code in (404, 405, 413):
            app.register_error_handler(code, _json_error)


def _view(key: str, cfg: FeishuConfig) -> Any:
    def feishu_events() -> Response:
        if (request.content_length or 0) > MAX_BODY_BYTES:
            return _json(413, {"code": 413, "msg": f"the body is over {MAX_BODY_BYTES} bytes"})
        request.max_content_length = MAX_BODY_BYTES + 1  # our own cap here, not gateway.max_frame_bytes
        try:
            body = request.get_data(cache=False)
        except RequestEntityTooLarge:
            return _json(413, {"code": 413, "msg": f"the body is over {MAX_BODY_BYTES} bytes"})
        status, answer = handle(current_app.extensions["picobot"], cfg, request.headers, body, channel=key)
        return _json(status, answer)

    return feishu_events


def _json_error(error: HTTPException) -> Any:
    if not is_webhook_path(request.path):
        return error  # every other path keeps Flask's default answer
    code = error.code or 500
    return _json(code, {"code": code, "msg": error.name})


def _json(status: int, answer: dict[str, Any]) -> Response:
    resp = jsonify(answer)
    resp.status_code = status
    return resp
