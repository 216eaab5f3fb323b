"""Helpers for the webhook tests: a signed sender, a local callback receiver, the stack's config."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from picobot.webhooks.signature import sign
from tests.stack import base_config
from tests.http_client import HTTP

SECRET = "whsec-" + "T3STSECRET" * 3  # must never show up in logs, answers or the database


class CallbackSink:
    """An HTTP server on 127.0.0.1 that records POSTs and answers each with the next scripted status."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.statuses: dict[str, list[int]] = {}  # path -> statuses to answer, then 200
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                script = sink.statuses.get(self.path) or []
                status = script.pop(0) if script else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.received if r["path"] == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


TELEGRAM_TOKEN = "333333333:AAWebhookHooksBotTokenForTests_xyz"
TELEGRAM_CHAT = "4242"


def hooks_config(llm_url: str, port: int, sink: CallbackSink, telegram_url: str | None = None) -> dict[str, Any]:
    cfg = base_config(llm_url, port)
    cfg["tools"] = {"network": {"allow": ["127.0.0.1"]}}  # the callbacks go to the local sink
    common = {"secret": SECRET, "prompt": "Order {{ payload.order.id }} of {{ payload.items.0 }}: {{ payload.note }}"}
    cfg["hooks"] = {
        "orders": {**common, "callback_url": sink.url("/orders")},
        "chat": {**common, "mode": "agent_task", "deliver": {"channel": "cli_chat", "chat_id": "hook-chat"}},
        "flaky": {**common, "callback_url": sink.url("/flaky")},
        "private": {**common, "callback_url": "http://10.255.255.1:9/cb"},  # refused by the guard, never sent
        "small": {**common, "max_body_bytes": 512},
    }
    if telegram_url is not None:  # an external chat: the answer goes out through the outbox
        cfg["channels"] = {"telegram": {"enabled": True, "token": TELEGRAM_TOKEN, "base_url": telegram_url}}
        cfg["hooks"]["alerts"] = {**common, "mode": "agent_task",
                                  "deliver": {"channel": "telegram", "chat_id": TELEGRAM_CHAT}}
    return cfg


def signed(body: bytes, secret: str = SECRET, ts: int | None = None, **extra: str) -> dict[str, str]:
    ts = int(time.time()) if ts is None else ts
    return {"X-PicoBot-Timestamp": str(ts), "X-PicoBot-Signature": sign(secret, ts, body),
            "Content-Type": "application/json", **extra}


def post(base: str, name: str, payload: Any, **extra: str) -> httpx.Response:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return HTTP.post(f"{base}/hooks/{name}", content=body, headers=signed(body, **extra), timeout=30)


def count_runs(database_url: str) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM hook_runs")).scalar() or 0)
    finally:
        engine.dispose()


def model_calls_with(llm_url: str, marker: str) -> int:
    reqs = HTTP.get(llm_url + "/_fake/requests", timeout=10).json()["requests"]
    return sum(marker in json.dumps(r.get("body")) for r in reqs)
