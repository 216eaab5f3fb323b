"""The memory benchmark's baseline: a bare Flask + flask-sock app, run under the same gunicorn settings
as `picobot web` (gthread, 1 worker, 1,100 threads) — `scripts.bench.bare_app:create_app()`.

/ws sends a `ready` frame, then reads frames until the client goes (pings every 25 s, as PicoBot's).
"""

from __future__ import annotations

import json
from typing import Any

from flask import Flask
from flask_sock import ConnectionClosed, Sock


def create_app() -> Flask:
    app = Flask(__name__)
    app.config["SOCK_SERVER_OPTIONS"] = {"ping_interval": 25, "max_message_size": 16 * 1024 * 1024}
    sock = Sock(app)

    @app.get("/health")
    def health() -> Any:
        return {"ok": True}

    @sock.route("/ws")
    def ws(conn: Any) -> None:
        conn.send(json.dumps({"type": "ready"}))
        try:
            while True:
                conn.receive()
        except ConnectionClosed:
            pass

    return app
