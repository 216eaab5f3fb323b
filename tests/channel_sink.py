"""A tiny test channel: its adapter POSTs each delivery to a loopback HTTP sink run by the test.

Configured as `channels.sink = {"type": "tests.channel_sink:SinkAdapter", "enabled": true,
"sink_url": "http://127.0.0.1:PORT"}`. The sink answers from a per-chat script (e.g. 503, 429
with Retry-After, 400) and records every POST, so tests see order, duplicates and retries.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from picobot.channels.base import Capabilities, Delivery, DeliveryError
from picobot.gateway.inbound import InboundMessage
from tests.http_client import HTTP


class SinkAdapter:
    """deliver() -> POST {sink_url}/deliver; normalize() reads {"chat_id","sender_id","text","message_id"}
    (and first POSTs {sink_url}/read when the event has "lookup": true)."""

    capabilities = Capabilities(max_message_chars=4000, markdown=True)

    def __init__(self, name: str, config: Any, rt: Any) -> None:
        self.name = name
        self.url = str(getattr(config, "sink_url", "") or "")
        if not self.url.startswith("http://127.0.0.1:"):
            raise ValueError("channels.<sink>.sink_url must be a loopback http URL")

    def deliver(self, delivery: Delivery) -> dict | None:
        body = {"id": delivery.id, "channel": delivery.channel, "chat_id": delivery.chat_id, "kind": delivery.kind,
                "payload": delivery.payload, "key": delivery.idempotency_key, "attempts": delivery.attempts}
        try:
            r = HTTP.post(self.url + "/deliver", json=body, timeout=10)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"sink unreachable: {type(exc).__name__}", code="network") from exc
        if r.status_code == 200:
            return r.json()
        if r.status_code == 429:
            raise DeliveryError("sink rate limited", retry_after=float(r.headers.get("retry-after", "1")), code="429")
        raise DeliveryError(f"sink answered {r.status_code}: {r.text[:200]}", permanent=r.status_code < 500,
                            code=str(r.status_code))

    def normalize(self, event: dict) -> list[InboundMessage]:
        if event.get("ignore"):
            return []
        if event.get("lookup"):  # reading this event needs the platform (as Feishu's parents and mentions do)
            r = HTTP.post(self.url + "/read", json={"chat_id": event.get("chat_id")}, timeout=10)
            if r.status_code != 200:
                raise DeliveryError(f"sink answered {r.status_code} to a read", permanent=r.status_code < 500)
        return [InboundMessage(channel=self.name, chat_id=str(event["chat_id"]), sender_id=str(event["sender_id"]),
                               content=str(event["text"]), platform_message_id=str(event["message_id"]),
                               metadata={"reply_to": str(event["message_id"]), "chat_type": "p2p"})]

    def live(self) -> None:
        return None


class Sink:
    """The loopback HTTP server the adapter delivers to."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []  # every POST, failed ones too
        self.script: dict[str, list[tuple]] = {}  # chat_id -> answers to give first: (status, retry_after[, body])
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                body["path"] = self.path  # /deliver, or /read (an event that needs the platform)
                with sink.lock:
                    queue = sink.script.get(body["chat_id"]) or []
                    status, retry_after, *more = queue.pop(0) if queue else (200, None)
                    body["answer"] = status
                    sink.posts.append(body)
                    n = len(sink.posts)
                self.send_response(status)
                if retry_after is not None:
                    self.send_header("retry-after", str(retry_after))
                data = json.dumps({"message_ids": [f"sm_{n}"]} if status == 200
                                  else {"error": more[0] if more else status}).encode()
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def fail(self, chat_id: str, *answers: tuple) -> None:
        with self.lock:
            self.script.setdefault(chat_id, []).extend(answers)

    def delivered(self, chat_id: str | None = None) -> list[dict[str, Any]]:
        """The POSTs answered 200, in arrival order."""
        with self.lock:
            return [p for p in self.posts if p["answer"] == 200 and p["path"] == "/deliver"
                    and (chat_id is None or p["chat_id"] == chat_id)]

    def texts(self, chat_id: str) -> list[str]:
        return [p["payload"]["text"] for p in self.delivered(chat_id)]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sink_channel(sink: Sink, **more: Any) -> dict[str, Any]:
    """The `channels.sink` config entry for this sink."""
    return {"type": "tests.channel_sink:SinkAdapter", "enabled": True, "sink_url": sink.url, **more}
