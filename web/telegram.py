"""POST /telegram/<channel> (or `webhook_path`): Telegram's webhook, handed to the webhook module.

Registered by `init_app` only for enabled Telegram channels in webhook mode; each such process also
tells Telegram the URL and the secret once (setWebhook, and the command menu), in a background
thread so a slow Telegram never holds up the start. The path is open to the pairing guard
(web/auth.py): Telegram proves itself with the secret token header. Every answer on the path is
JSON, errors too (404, 405, 413).
"""

from __future__ import annotations

import threading
from typing import Any

from flask import Flask, Response, current_app, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from picobot.channels.telegram.config import TelegramConfig
from picobot.channels.telegram.webhook import MAX_BODY_BYTES, handle
from web.auth import is_webhook_path

PATHS = "picobot.webhook_paths"  # app.extensions key shared with web/feishu.py
OURS = "picobot.telegram_paths"


def init_app(app: Flask) -> None:
    rt = app.extensions["picobot"]
    for key, channel in rt.config.channels.items():
        if (channel.type or key) != "telegram" or not channel.enabled:
            continue
        cfg = TelegramConfig.from_channel(channel)
        if cfg.mode != "webhook":
            continue
        path = cfg.path_for(key)
        app.add_url_rule(path, endpoint=f"telegram_updates_{key}", methods=["POST"], view_func=_view(key, cfg))
        app.extensions.setdefault(PATHS, set()).add(path)
        app.extensions.setdefault(OURS, set()).add(path)
        threading.Thread(target=_register, args=(rt, cfg, key), name=f"telegram-setup-{key}", daemon=True).start()
    if app.extensions.get(OURS):
        for code in (404, 405, 413):
            app.register_error_handler(code, _json_error)


def _register(rt: Any, cfg: TelegramConfig, key: str) -> None:
    from picobot.channels.telegram.api import TelegramApi
    from picobot.channels.telegram.setup import register_commands, register_webhook

    api = TelegramApi(cfg.token, cfg.base_url, redis=rt.redis)
    try:
        if register_webhook(rt, cfg, api, key):
            register_commands(rt, cfg, api, key)
    finally:
        api.close()


def _view(key: str, cfg: TelegramConfig) -> Any:
    def telegram_updates() -> Response:
        if (request.content_length or 0) > MAX_BODY_BYTES:
            return _json(413, {"ok": False, "description": f"the body is over {MAX_BODY_BYTES} bytes"})
        request.max_content_length = MAX_BODY_BYTES + 1  # our own cap here, not gateway.max_frame_bytes
        try:
            body = request.get_data(cache=False)
        except RequestEntityTooLarge:
            return _json(413, {"ok": False, "description": f"the body is over {MAX_BODY_BYTES} bytes"})
        status, answer = handle(current_app.extensions["picobot"], cfg, request.headers, body, channel=key)
        return _json(status, answer)

    return telegram_updates


def _json_error(error: HTTPException) -> Any:
    ours = current_app.extensions.get(OURS, ())
    if any(request.path == p or request.path.startswith(p.rstrip("/") + "/") for p in ours):
        code = error.code or 500
        return _json(code, {"ok": False, "description": error.name})
    if is_webhook_path(request.path):  # another platform's webhook (Feishu) keeps its own shape
        from web.feishu import _json_error as feishu_json_error

        return feishu_json_error(error)
    return error


def _json(status: int, answer: dict[str, Any]) -> Response:
    resp = jsonify(answer)
    resp.status_code = status
    return resp
