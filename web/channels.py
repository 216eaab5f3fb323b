"""/api/channels: the Channels page — every channel, its state, its deliveries; a WeChat QR login.

GET  /api/channels                   every configured channel (and the built-in web, cli_chat): type,
                                     enabled, state and detail (from the channels plugin's /health
                                     entries), delivery counts by status and the latest deliveries
GET  /api/channels/<key>/login       the web login of a WeChat channel: idle | waiting | done | failed,
                                     the QR (text) and its URL, what happened so far
POST /api/channels/<key>/login       start one (`{"force": true}` discards the saved login first)

A failed delivery is retried with POST /api/deliveries/<id>/retry. The login runs in this web process
(one gunicorn worker), in a thread, exactly as `picobot channels login <key>` does in a terminal.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from picobot.domain.scope import SOCKET_CHANNELS
from picobot.storage import outbox

bp = Blueprint("channels", __name__, url_prefix="/api/channels")

LATEST = 200  # deliveries read for the page; each channel shows its newest few
PER_CHANNEL = 10
TEXT_PREVIEW = 160


def _error(status: int, code: str, text: str) -> Response:
    resp = jsonify({"error": code, "message": text})
    resp.status_code = status
    return resp


def _states(rt: Any) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for entries in rt.plugins.call("picobot_health", ports=rt):
        if isinstance(entries, dict):
            found.update({k[len("channel:"):]: v for k, v in entries.items()
                          if k.startswith("channel:") and isinstance(v, dict)})
    return found


def _delivery(r: Any) -> dict[str, Any]:
    payload = r.payload or {}
    return {"id": r.id, "chat_id": r.chat_id, "kind": r.kind, "status": r.status, "attempts": r.attempts,
            "text": str(payload.get("text") or "")[:TEXT_PREVIEW], "error": r.last_error,
            "created_at": r.created_at, "sent_at": r.sent_at}


def _channel(key: str, cfg: Any, state: dict[str, Any] | None, counts: dict[str, int],
             rows: list[Any]) -> dict[str, Any]:
    type_name = (cfg.type or key) if cfg is not None else key
    enabled = True if cfg is None else bool(cfg.enabled)
    if key in SOCKET_CHANNELS:
        shown = {"state": "live", "detail": "replies go to connected clients directly", "ok": True}
    elif state is not None:
        shown = {"state": state.get("state") or ("ok" if state.get("ok") else "error"),
                 "detail": state.get("detail", ""), "ok": bool(state.get("ok"))}
    else:
        shown = {"state": "enabled" if enabled else "disabled", "detail": "", "ok": True}
    return {"key": key, "type": type_name, "enabled": enabled, **shown,
            "login": type_name == "wechat", "counts": counts,
            "deliveries": [_delivery(r) for r in rows if r.channel == key][:PER_CHANNEL]}


@bp.get("")
def list_channels() -> Response:
    rt = current_app.extensions["picobot"]
    with rt.db.connect() as conn:
        counts = outbox.counts(conn)
        rows = outbox.latest(conn, None, LATEST)
    states = _states(rt)
    keys = list(dict.fromkeys([*sorted(SOCKET_CHANNELS), *rt.config.channels]))
    return jsonify({"channels": [_channel(k, rt.config.channels.get(k), states.get(k), counts.get(k, {}), rows)
                                 for k in keys]})


class WebLogin:
    """One QR login in a thread; the page polls what it printed."""

    def __init__(self) -> None:
        self.state = "waiting"
        self.qr = ""
        self.url = ""
        self.lines: list[str] = []
        self.started = time.time()

    def out(self, text: str) -> None:
        if "█" in text:
            self.qr = text
        elif text.startswith("Scan with WeChat"):
            self.url = text.split(": ", 1)[-1]
        else:
            self.lines.append(text[:500])

    def view(self) -> dict[str, Any]:
        return {"state": self.state, "qr": self.qr, "url": self.url, "lines": self.lines[-20:],
                "started_at": self.started}


_LOGINS: dict[str, WebLogin] = {}
_LOCK = threading.Lock()


def _wechat(rt: Any, key: str) -> Any:
    cfg = rt.config.channels.get(key)
    if cfg is None or (cfg.type or key) != "wechat":
        return None
    return cfg


@bp.get("/<key>/login")
def login_state(key: str) -> Response:
    rt = current_app.extensions["picobot"]
    if _wechat(rt, key) is None:
        return _error(404, "not_found", f"No WeChat channel {key!r} is configured.")
    with _LOCK:
        login = _LOGINS.get(key)
    return jsonify(login.view() if login is not None else {"state": "idle"})


@bp.post("/<key>/login")
def start_login(key: str) -> Response:
    rt = current_app.extensions["picobot"]
    cfg = _wechat(rt, key)
    if cfg is None:
        return _error(404, "not_found", f"No WeChat channel {key!r} is configured.")
    body = request.get_json(silent=True)
    force = isinstance(body, dict) and body.get("force") is True
    with _LOCK:
        running = _LOGINS.get(key)
        if running is not None and running.state == "waiting":
            return jsonify(running.view())
        login = _LOGINS[key] = WebLogin()
    threading.Thread(target=_run_login, args=(rt.config, key, force, login), name=f"login-{key}", daemon=True).start()
    resp = jsonify(login.view())
    resp.status_code = 202
    return resp


def _run_login(config: Any, key: str, force: bool, login: WebLogin) -> None:
    from picobot.cli.wechat import web_login

    try:
        web_login(config, key, force, login.out)
        login.state = "done"
    except Exception as exc:  # shown on the page: the login failed, say why
        login.lines.append(str(exc)[:500] or type(exc).__name__)
        login.state = "failed"
