"""FakeLongConn: Feishu's long-connection endpoint and WebSocket, for the real lark-oapi ws.Client to connect to.

    fake = FakeFeishu().start()
    ws = FakeLongConn(fake).start()   # registers POST /callback/ws/endpoint on the fake, serves ws://127.0.0.1:PORT
    ws.wait_clients(1)                # clients connected now;  ws.connects = connections ever accepted
    frame_id = ws.push(event)         # a DATA frame (type "event") carrying the schema-2.0 JSON, to one client
    ws.wait_response(frame_id)        # the client's answer frame: {"code": 200, ...}
    ws.drop()                         # close every connection (the client should come back)
    ws.hang_endpoint = True           # the endpoint call never answers (until set back)
    ws.fail_endpoint = 2              # the next 2 endpoint calls answer HTTP 500
    ws.stop()

Frames are the SDK's own protobuf class (lark_oapi.ws.pb.pbbp2_pb2.Frame): pings are CONTROL frames
answered with a pong, events are DATA frames. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import uuid
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

ENDPOINT_PATH = "/callback/ws/endpoint"
CONTROL, DATA = 0, 1
CLIENT_CONFIG = {"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0, "PingInterval": 2}


def Frame(**fields: Any) -> Any:  # noqa: N802 - stands for the SDK's class
    """A new pbbp2 Frame. Imported on first use: `lark_oapi.ws.pb` runs the whole SDK's __init__ (about 2 s of
    CPU), which every process that merely imports this module (each pytest worker, collecting) would pay."""
    from lark_oapi.ws.pb.pbbp2_pb2 import Frame as frame_class

    return frame_class(**fields)


def _frame(method: int, headers: dict[str, str], payload: bytes = b"", service: int = 1) -> bytes:
    frame = Frame(SeqID=0, LogID=0, service=service, method=method, payload=payload)
    for key, value in headers.items():
        header = frame.headers.add()
        header.key, header.value = key, value
    return frame.SerializeToString()


class FakeLongConn:
    def __init__(self, fake: Any, client_config: dict[str, int] | None = None):
        self.fake = fake  # a started scripts.fake_feishu.server.FakeFeishu (the endpoint lives on it)
        self.client_config = client_config or dict(CLIENT_CONFIG)
        self.lock = threading.Lock()
        self.connects = 0
        self.pings = 0
        self.responses: dict[str, dict[str, Any]] = {}  # frame message_id -> the client's answer payload
        self.endpoint_calls = 0
        self.hang_endpoint = False
        self.fail_endpoint = 0  # the next N endpoint calls answer HTTP 500
        self._clients: list[ServerConnection] = []
        self._device_ids = itertools.count(1)
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._server: Any = None
        self.port = 0

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> "FakeLongConn":
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="fake-feishu-ws", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake long-connection server did not start")
        self.fake.add_route("POST", ENDPOINT_PATH, self._endpoint)
        return self

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def boot() -> None:
            self._server = await serve(self._serve, "127.0.0.1", 0, ping_interval=None)
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()

        self._loop.run_until_complete(boot())
        self._loop.run_forever()

    def stop(self) -> None:
        self.hang_endpoint = False

        async def shut() -> None:
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    # --- the HTTP endpoint (a route on FakeFeishu) ----------------------------------------------

    def _endpoint(self, query: dict[str, str], headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes]:
        with self.lock:
            self.endpoint_calls += 1
        while self.hang_endpoint:
            time.sleep(0.05)
        with self.lock:
            failing, self.fail_endpoint = self.fail_endpoint > 0, max(0, self.fail_endpoint - 1)
        if failing:
            return 500, {}, json.dumps({"code": 1, "msg": "system busy"}).encode()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        if body.get("AppID") != self.fake.app_id or body.get("AppSecret") != self.fake.app_secret:
            answer = {"code": 1000040343, "msg": "invalid app credentials", "data": None}
        else:
            url = f"ws://127.0.0.1:{self.port}/ws?device_id=dev{next(self._device_ids)}&service_id=1&ticket=t-secret"
            answer = {"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": self.client_config}}
        return 200, {}, json.dumps(answer).encode()

    # --- the WebSocket -------------------------------------------------------------------------

    async def _serve(self, conn: ServerConnection) -> None:
        with self.lock:
            self.connects += 1
            self._clients.append(conn)
        try:
            async for message in conn:
                if isinstance(message, bytes):
                    await self._on_frame(conn, message)
        except Exception:
            pass
        finally:
            with self.lock:
                if conn in self._clients:
                    self._clients.remove(conn)

    async def _on_frame(self, conn: ServerConnection, raw: bytes) -> None:
        frame = Frame()
        frame.ParseFromString(raw)
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == CONTROL and headers.get("type") == "ping":
            with self.lock:
                self.pings += 1
            await conn.send(_frame(CONTROL, {"type": "pong"}, json.dumps(self.client_config).encode(), frame.service))
        elif frame.method == DATA and "message_id" in headers:
            answer = json.loads(frame.payload or b"{}")
            with self.lock:
                self.responses[headers["message_id"]] = {"payload": answer, "headers": headers}

    # --- controls for tests --------------------------------------------------------------------

    @property
    def clients(self) -> int:
        with self.lock:
            return len(self._clients)

    def push(self, event: dict[str, Any], frame_id: str | None = None) -> str:
        """Send `event` as a DATA frame to the first connected client; the frame's message_id."""
        frame_id = frame_id or uuid.uuid4().hex
        headers = {"type": "event", "message_id": frame_id, "trace_id": uuid.uuid4().hex, "sum": "1", "seq": "0"}
        data = _frame(DATA, headers, json.dumps(event).encode())
        with self.lock:
            if not self._clients:
                raise RuntimeError("no client is connected")
            conn = self._clients[0]
        asyncio.run_coroutine_threadsafe(conn.send(data), self._loop).result(10)
        return frame_id

    def drop(self) -> int:
        """Close every connection from the server side; how many were closed."""
        with self.lock:
            conns = list(self._clients)

        async def close_all() -> None:
            for conn in conns:
                await conn.close(code=1001, reason="fake drop")

        asyncio.run_coroutine_threadsafe(close_all(), self._loop).result(10)
        return len(conns)

    def wait_clients(self, count: int, timeout: float = 30) -> None:
        self._wait(lambda: self.clients == count, timeout, f"{count} connected client(s)")

    def wait_response(self, frame_id: str, timeout: float = 30) -> dict[str, Any]:
        self._wait(lambda: frame_id in self.responses, timeout, f"an answer to frame {frame_id}")
        with self.lock:
            return self.responses[frame_id]

    def _wait(self, pred: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout} s for {what} (clients={self.clients}, connects={self.connects})")
            time.sleep(0.05)
