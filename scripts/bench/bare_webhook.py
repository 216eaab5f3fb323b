"""The Feishu benchmark's baseline: a bare Flask JSON endpoint, under the same gunicorn settings as `picobot web`.

POST /feishu/events parses the JSON body and answers {"msg": "ok"} — no decryption, no database, no queue.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, request


def create_app() -> Flask:
    app = Flask(__name__)

    @app.get("/health")
    def health() -> Any:
        return {"ok": True}

    @app.post("/feishu/events")
    def events() -> Any:
        request.get_json(force=True)
        return {"msg": "ok"}

    return app
