"""The fake LLM HTTP server: OpenAI + Anthropic wire protocols and the /_fake control API.

See scripts/fake_llm/__init__.py for the scripting reference.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from picobot.demo.llm import audio, wire_anthropic, wire_openai
from picobot.demo.llm.behaviour import Fault, build_reply

SECRET_HEADERS = ("authorization", "x-api-key")
MAX_RECORDED = 1000


@dataclass
class Rule:
    match: str | None
    responses: list[dict[str, Any]]
    repeat: bool = False
    position: int = 0


class Script:
    """Rules and recorded requests, shared by all handler threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._requests: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDED)

    def add_rule(self, match: str | None, responses: list[dict[str, Any]], repeat: bool = False) -> None:
        if not isinstance(responses, list) or not all(isinstance(r, dict) for r in responses):
            raise ValueError("responses must be a list of objects")
        with self._lock:
            self._rules.append(Rule(match, list(responses), repeat))

    def take(self, user_text: str) -> dict[str, Any] | None:
        """The next response of the first rule matching user_text (consuming it)."""
        with self._lock:
            for rule in self._rules:
                if rule.match and rule.match not in user_text:
                    continue
                if not rule.responses:
                    continue
                response = rule.responses[rule.position % len(rule.responses)]
                rule.position += 1
                if not rule.repeat and rule.position >= len(rule.responses):
                    self._rules.remove(rule)
                return response
        return None

    def rules(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"match": r.match, "responses": r.responses[r.position:] if not r.repeat else r.responses,
                     "repeat": r.repeat} for r in self._rules]

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._requests.append(entry)

    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        with self._lock:
            self._rules.clear()
            self._requests.clear()


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def recorded_headers(headers: Any) -> tuple[dict[str, str], dict[str, str | None]]:
    """Headers with secrets replaced, and the sha256 of each key sent (None when absent)."""
    shown: dict[str, str] = {}
    auth: dict[str, str | None] = {name: None for name in SECRET_HEADERS}
    for name, value in headers.items():
        lower = name.lower()
        if lower in SECRET_HEADERS:
            key = value[7:] if lower == "authorization" and value.lower().startswith("bearer ") else value
            auth[lower] = _sha256(key.strip())
            value = "<redacted>"
        shown[lower] = value
    return shown, auth


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], verbose: bool = False) -> None:
        super().__init__(address, Handler)
        self.script = Script()
        self.stopping = threading.Event()
        self.verbose = verbose


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 300  # idle keep-alive connections go away eventually
    server: FakeServer

    def setup(self) -> None:
        super().setup()
        # as real API servers do: small SSE chunks go out at once instead of waiting on Nagle's
        # algorithm for the client's delayed ACK (40 ms per stall on Linux)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    # --- routing ------------------------------------------------------------------

    def _path(self) -> str:
        return urlsplit(self.path).path.rstrip("/")

    def do_GET(self) -> None:
        path = self._path()
        if path == "/_fake/requests":
            self._send_json(200, {"requests": self.server.script.requests()})
        elif path == "/_fake/rules":
            self._send_json(200, {"rules": self.server.script.rules()})
        elif path.endswith("/models"):
            self._send_json(200, _models_body())
        elif path in ("", "/health"):
            self._send_json(200, {"ok": True})
        else:
            self._send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_DELETE(self) -> None:
        if self._path() == "/_fake/rules":
            self.server.script.reset()
            self._send_json(200, {"ok": True})
        else:
            self._send_json(404, {"error": {"message": "no route", "type": "not_found"}})

    def do_POST(self) -> None:
        path = self._path()
        if path.endswith("/audio/transcriptions"):
            self._serve_transcription(path, self._read_body())
            return
        body = self._read_json()
        if path.endswith("/audio/speech"):
            self._serve_speech(path, body)
        elif path == "/_fake/rules":
            self._add_rule(body)
        elif path == "/_fake/reset":
            self.server.script.reset()
            self._send_json(200, {"ok": True})
        elif path.endswith("/chat/completions"):
            self._serve_llm(wire_openai, path, body)
        elif path.endswith("/messages"):
            self._serve_llm(wire_anthropic, path, body)
        else:
            self._send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def _add_rule(self, body: Any) -> None:
        try:
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            self.server.script.add_rule(body.get("match"), body.get("responses") or [], bool(body.get("repeat")))
        except ValueError as err:
            self._send_json(400, {"error": {"message": str(err), "type": "invalid_request_error"}})
            return
        self._send_json(200, {"ok": True})

    # --- audio endpoints (picobot/demo/llm/audio.py) --------------------------------

    def _record_audio(self, path: str, body: Any) -> None:
        headers, auth = recorded_headers(self.headers)
        self.server.script.record({"time": time.time(), "protocol": "openai_audio", "path": path,
                                   "headers": headers, "auth": auth, "body": body,
                                   "peer": "%s:%s" % self.client_address[:2]})

    def _serve_transcription(self, path: str, raw: bytes) -> None:
        fields = audio.multipart(raw, self.headers.get("Content-Type") or "")
        upload = fields.get("file")
        shown = {k: (v if isinstance(v, str) else {"filename": v["filename"], "bytes": len(v["data"])})
                 for k, v in fields.items()}
        self._record_audio(path, shown)
        if not isinstance(upload, dict) or not upload["data"]:
            self._send_json(400, wire_openai.error_body(400, "file is required", "invalid_request_error"))
            return
        if not isinstance(fields.get("model"), str) or not fields["model"]:
            self._send_json(400, wire_openai.error_body(400, "model is required", "invalid_request_error"))
            return
        delay, text = audio.delay_of(audio.transcript_of(upload["data"]))
        if delay and self.server.stopping.wait(delay):
            return
        status = audio.failure_of(text)
        if status is not None:
            self._send_json(status, wire_openai.error_body(status, f"fake transcription failure {status}", None))
            return
        ctype, data = audio.transcription_body(text, str(fields.get("response_format") or "json"))
        self._send_bytes(200, ctype, data)

    def _serve_speech(self, path: str, body: Any) -> None:
        self._record_audio(path, body)
        if not isinstance(body, dict) or not isinstance(body.get("input"), str) or not body["input"]:
            self._send_json(400, wire_openai.error_body(400, "input is required", "invalid_request_error"))
            return
        if not isinstance(body.get("model"), str) or not isinstance(body.get("voice"), str):
            self._send_json(400, wire_openai.error_body(400, "model and voice are required", "invalid_request_error"))
            return
        ctype, data = audio.speech_body(body["input"], str(body.get("response_format") or "mp3"))
        self._send_bytes(200, ctype, data)

    def _send_bytes(self, status: int, ctype: str, data: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # --- LLM endpoints ------------------------------------------------------------

    def _serve_llm(self, wire: ModuleType, path: str, body: Any) -> None:
        headers, auth = recorded_headers(self.headers)
        self.server.script.record({"time": time.time(), "protocol": wire.NAME, "path": path,
                                   "headers": headers, "auth": auth, "body": body,
                                   "peer": "%s:%s" % self.client_address[:2]})
        problem = "request body must be a JSON object" if not isinstance(body, dict) else wire.validate(body)
        if problem:
            self._send_json(400, wire.error_body(400, problem, "invalid_request_error"))
            return
        view = wire.parse_request(body)
        spec = self.server.script.take(view.last_user_text) or {}
        fault = Fault.from_spec(spec)
        if fault.delay_ms and self.server.stopping.wait(fault.delay_ms / 1000):
            return
        if fault.error is not None:
            self._send_error(wire, fault.error)
        elif fault.context_length_error:
            status, error = wire.context_error()
            self._send_json(status, error)
        elif view.stream:
            self._send_stream(wire.stream_frames(build_reply(spec, view), view), fault, wire)
        elif fault.drop_after_chunks is not None:
            self._cut()
        else:
            self._send_json(200, wire.json_body(build_reply(spec, view), view))

    def _send_error(self, wire: ModuleType, error: dict[str, Any]) -> None:
        status = int(error.get("status") or 500)
        message = str(error.get("message") or f"fake error {status}")
        extra = {}
        if "retry_after" in error or status == 429:
            extra["Retry-After"] = str(error.get("retry_after", 0))
        self._send_json(status, wire.error_body(status, message, error.get("type")), extra)

    def _send_stream(self, frames: list[bytes], fault: Fault, wire: ModuleType) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        error_at = (fault.stream_error or {}).get("after_chunks")
        try:
            for sent, frame in enumerate(frames):
                if sent == fault.drop_after_chunks:
                    self._cut()
                    return
                if error_at is not None and sent == int(error_at):
                    error = fault.stream_error or {}
                    self._write_chunk(wire.stream_error_frame(str(error.get("message") or "Overloaded"), error.get("type")))
                    break
                if sent and fault.chunk_delay_ms and self.server.stopping.wait(fault.chunk_delay_ms / 1000):
                    self._cut()
                    return
                self._write_chunk(frame)
            if fault.linger_ms and self.server.stopping.wait(fault.linger_ms / 1000):
                self._cut()
                return
            self._write_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # --- HTTP helpers -------------------------------------------------------------

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _read_json(self) -> Any:
        raw = self._read_body()
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-request-id", "req_fake")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _cut(self) -> None:
        """End the connection mid-response, as a crashed upstream would."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _models_body() -> dict[str, Any]:
    # One shape both SDKs accept: OpenAI's list fields plus Anthropic's paging fields.
    models = [{"id": name, "object": "model", "created": 0, "owned_by": "fake-llm", "type": "model",
               "display_name": name, "created_at": "2025-01-01T00:00:00Z"} for name in ("fake-model", "fake-reasoner")]
    return {"object": "list", "data": models, "has_more": False, "first_id": models[0]["id"],
            "last_id": models[-1]["id"]}


class FakeLLM:
    """The fake server as a library: FakeLLM(port=0).start() → .url ... .stop()."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, verbose: bool = False) -> None:
        self._address = (host, port)
        self._verbose = verbose
        self._server: FakeServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> FakeLLM:
        self._server = FakeServer(self._address, self._verbose)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="fake-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._server = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._live().server_address[1]

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:PORT (Anthropic SDK base_url; OpenAI's is openai_url)."""
        host = self._live().server_address[0]  # str for a TCP server (bytes only for AF_UNIX)
        return f"http://{host if isinstance(host, str) else host.decode()}:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    def add_rule(self, match: str | None, responses: list[dict[str, Any]], repeat: bool = False) -> None:
        self._live().script.add_rule(match, responses, repeat)

    def reset(self) -> None:
        self._live().script.reset()

    def requests(self) -> list[dict[str, Any]]:
        return self._live().script.requests()

    def _live(self) -> FakeServer:
        if self._server is None:
            raise RuntimeError("FakeLLM is not started")
        return self._server
