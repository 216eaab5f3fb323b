"""/ws under hostile clients: poison frames, clients that never read, a failing database.

Every reply is read as strict JSON (no NaN/Infinity, valid UTF-8), and after each attack the
same socket must still answer a ping.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sqlite3
import time
import uuid
from typing import Any, Callable, Iterator

import pytest
import websocket
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.gateway.blocks import data_image_bytes, image_problem
from scripts.fake_llm import FakeLLM
from tests.conftest import add_rule
from tests.stack import Stack, wait_for
from web.frames import FrameError, parse_frame
from web.outbox import Outbox, OutboxLimits, WriteWaiter
from web.ws import REVERIFY_SECS

FRAME_LIMIT = 100_000
IMAGE_LIMIT = 3_000
QUEUE_BYTES = 1024 * 1024
STALL_SECS = 2


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    """A stack with small limits, so each one is reached with little traffic."""
    s = Stack(tmp_path_factory.mktemp("hostile"), fake_llm.url,
              gateway={"max_frame_bytes": FRAME_LIMIT, "max_image_bytes": IMAGE_LIMIT,
                       "ws_send_queue_bytes": QUEUE_BYTES, "ws_send_timeout_secs": STALL_SECS})
    try:
        s.start()
        yield s
    finally:
        s.stop()


def _no_constants(name: str) -> Any:
    raise AssertionError(f"the server sent {name}, which is not JSON")


class StrictClient:
    """A /ws client that fails on any reply a strict JSON parser (a browser's) would refuse."""

    opened: "list[StrictClient]" = []  # closed after each test: the device's socket limit counts them

    def __init__(self, stack: Stack, chat_id: str | None = None):
        self.ws = websocket.create_connection(
            f"{stack.ws_url}?chat_id={chat_id or 't-' + uuid.uuid4().hex[:10]}&channel=cli_chat",
            timeout=30, header=[f"Authorization: Bearer {stack.token}"])
        self.frames: list[dict[str, Any]] = []
        StrictClient.opened.append(self)
        self.ready = self.until(lambda f: f["type"] == "ready")

    def send(self, raw: str | dict[str, Any]) -> None:
        self.ws.send(raw if isinstance(raw, str) else json.dumps(raw))

    def recv(self, timeout: float = 20) -> dict[str, Any]:
        self.ws.settimeout(timeout)
        text = self.ws.recv()
        assert isinstance(text, str), text
        text.encode("utf-8")  # a lone surrogate cannot be sent as UTF-8: this raises
        frame = json.loads(text, parse_constant=_no_constants)
        assert isinstance(frame, dict) and isinstance(frame.get("type"), str), frame
        self.frames.append(frame)
        return frame

    def until(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching frame; got {[f.get('type') for f in self.frames[-10:]]}")
            frame = self.recv(left)
            if pred(frame):
                return frame

    def reply(self, raw: str | dict[str, Any]) -> dict[str, Any]:
        """Send a frame, return the first frame that is not a pushed turn event."""
        self.send(raw)
        return self.until(lambda f: f["type"] not in ("turn_updated", "turn_completed", "message"))

    def still_usable(self) -> None:
        ping_id = uuid.uuid4().hex
        self.send({"type": "ping", "id": ping_id})
        assert self.until(lambda f: f.get("id") == ping_id)["type"] == "pong"

    def close(self) -> None:
        self.ws.close()


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while StrictClient.opened:
        StrictClient.opened.pop().close()


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("number, why", [
    ("1e400", "is too large"),  # valid JSON, but it overflows to Infinity
    ("-1e400", "is too large"),
    ("9" * 5000, "has 5000 digits; the limit is 4300"),
])
def test_numbers_no_reply_could_carry_are_bad_json_that_says_why(number: str, why: str) -> None:
    with pytest.raises(FrameError) as info:
        parse_frame('{"type": "ping", "id": ' + number + "}")
    assert why in str(info.value) and "sys." not in str(info.value)  # words for a client, not for Python
    assert parse_frame('{"id": -' + "9" * 4300 + ", \"x\": 1.5e300}")["x"] == 1.5e300


@pytest.mark.parametrize("raw, code", [
    (_nested(1000), "bad_json"),  # 2 KB; json.loads alone raises RecursionError
    ('{"type": "ping", "id": ' + _nested(100) + "}", "bad_json"),
    ('{"type": "ping", "id": NaN}', "bad_json"),
    ('{"type": "ping", "id": Infinity}', "bad_json"),
    ('{"type": "history", "limit": -Infinity}', "bad_json"),
    ('{"type": "history", "limit": true}', "bad_frame"),
    ('{"type": "\\ud800"}', "unknown_type"),
    ('{"type": "ping", "id": "x", "extra": "\\udfff"}', None),
])
def test_poison_frames_get_a_documented_reply_and_the_socket_lives(stack: Stack, raw: str, code: str | None) -> None:
    c = StrictClient(stack)
    reply = c.reply(raw)
    if code is None:
        assert reply["type"] == "pong"
    else:
        assert reply["type"] == "error" and reply["code"] == code, reply
    c.still_usable()


def test_unencodable_ids_and_commands_are_repaired_not_echoed(stack: Stack) -> None:
    c = StrictClient(stack)
    pong = c.reply('{"type": "ping", "id": "a\\ud800b"}')
    assert pong == {"type": "pong", "id": "a\ufffdb"}
    err = c.reply('{"type": "dance", "id": {"k\\udc00": ["\\ud83d"]}}')
    assert err["code"] == "unknown_type" and err["id"] == {"k\ufffd": ["\ufffd"]}
    pair = c.reply('{"type": "ping", "id": "\\ud83d\\ude00"}')  # a valid pair is a real character
    assert pair["id"] == "\U0001F600"
    cmd = c.reply('{"type": "command", "command": "/\\ud800zap", "id": "c"}')
    assert cmd["type"] == "command" and cmd["code"] == "unknown_command" and cmd["id"] == "c"
    c.still_usable()


def test_max_frame_bytes_counts_utf8_bytes(stack: Stack) -> None:
    c = StrictClient(stack)
    wide = "é" * (FRAME_LIMIT // 2 + 10)  # fewer characters than the limit, more bytes
    err = c.reply(json.dumps({"type": "ping", "id": wide}, ensure_ascii=False))  # é is 2 bytes in UTF-8
    assert err["code"] == "frame_too_large" and str(FRAME_LIMIT) in err["error"]
    assert "id" not in err
    narrow = "e" * (FRAME_LIMIT // 2)
    assert c.reply({"type": "ping", "id": narrow})["type"] == "pong"
    c.still_usable()


@pytest.mark.parametrize("url", ["", "   ", "/images/cat.png", "cat.png", "javascript:alert(1)", "JaVaScRiPt:alert(1)",
                                 "ftp://example.com/cat.png", "file:///etc/passwd", "http://", "https:// spaced.example/x",
                                 "data:text/html;base64,PGgxPmhpPC9oMT4=", "data:image/png;base64,%%%%",
                                 "data:image/png,rawbytes", "data:image/png;base64,"])
def test_image_blocks_need_http_or_data_image_urls(stack: Stack, url: str) -> None:
    c = StrictClient(stack)
    blocks = [{"type": "text", "text": "look"}, {"type": "image_url", "url": url}]
    rej = c.reply({"type": "message", "content": blocks, "id": "img"})
    assert rej["type"] == "rejected" and rej["code"] == "bad_content", rej
    assert "image_url" in rej["error"] and (len(url) < 10 or url not in rej["error"])  # never echoed
    assert c.reply({"type": "history", "id": "h"})["messages"] == []
    c.still_usable()


def test_data_images_count_toward_their_own_limit(stack: Stack) -> None:
    c = StrictClient(stack)
    payload = base64.b64encode(b"\x89PNG" + b"\x00" * (IMAGE_LIMIT * 2)).decode()
    blocks = [{"type": "text", "text": "what is this"}, {"type": "image_url", "url": f"data:image/png;base64,{payload}"}]
    rej = c.reply({"type": "message", "content": blocks, "id": "big"})
    assert rej["type"] == "rejected" and rej["code"] == "too_large", rej
    assert "gateway.max_image_bytes" in rej["error"] and str(IMAGE_LIMIT) in rej["error"]
    assert c.reply({"type": "history", "id": "h"})["messages"] == []
    c.still_usable()


# --- a failing database --------------------------------------------------------------------------


def _rename_table(stack: Stack, old: str, new: str) -> None:
    """Break (or mend) the schema under the running processes: their next query fails for real."""
    db = sqlite3.connect(stack.home / "data" / "picobot.db", timeout=30)
    try:
        db.execute(f"ALTER TABLE {old} RENAME TO {new}")
        db.commit()
    finally:
        db.close()


def _web_log(stack: Stack) -> str:
    return (stack.logs / "web.log").read_text(errors="replace")


def test_a_database_error_answers_unavailable_and_keeps_the_socket(stack: Stack) -> None:
    c = StrictClient(stack)
    before = _web_log(stack).count("history frame on")
    _rename_table(stack, "messages", "messages_away")
    try:
        err = c.reply({"type": "history", "id": "h1"})
    finally:
        _rename_table(stack, "messages_away", "messages")
    assert err["type"] == "error" and err["code"] == "unavailable" and err["id"] == "h1", err
    assert "messages" not in err["error"] and "sqlite" not in err["error"].lower()  # no exception detail
    c.still_usable()
    assert c.reply({"type": "history", "id": "h2"})["type"] == "history"
    assert _web_log(stack).count("history frame on") == before + 1  # logged once

    _rename_table(stack, "sessions", "sessions_away")
    try:
        msg = c.reply({"type": "message", "content": "hello?", "id": "m1"})
        cmd = c.reply({"type": "command", "command": "/new Elsewhere", "id": "n1"})
    finally:
        _rename_table(stack, "sessions_away", "sessions")
    assert (msg["code"], cmd["code"]) == ("unavailable", "unavailable"), (msg, cmd)
    assert msg["id"] == "m1" and cmd["id"] == "n1"
    c.still_usable()


def test_a_database_error_while_rechecking_pairing_keeps_an_idle_socket(stack: Stack) -> None:
    c = StrictClient(stack)
    _rename_table(stack, "device_tokens", "device_tokens_away")
    try:
        time.sleep(REVERIFY_SECS + 1.5)  # the open socket re-checks its token once in this time
    finally:
        _rename_table(stack, "device_tokens_away", "device_tokens")
    c.still_usable()  # not closed with 1011 for an outage that was not its fault
    assert "could not re-check the device token" in _web_log(stack)


def test_a_failure_before_ready_closes_with_1011_not_http_500(stack: Stack) -> None:
    _rename_table(stack, "sessions", "sessions_away")
    try:
        ws = websocket.create_connection(f"{stack.ws_url}?chat_id=t-{uuid.uuid4().hex[:8]}", timeout=20,
                                         header=[f"Authorization: Bearer {stack.token}"])
        err = json.loads(ws.recv())
        opcode, data = ws.recv_data(control_frame=True)
    finally:
        _rename_table(stack, "sessions_away", "sessions")
    assert err["type"] == "error" and err["code"] == "unavailable"
    assert opcode == websocket.ABNF.OPCODE_CLOSE and int.from_bytes(data[:2], "big") == 1011, (opcode, data)
    assert data[2:].decode()  # a reason
    ws.close()
    StrictClient(stack).still_usable()


# --- clients that never read ---------------------------------------------------------------------


def _never_reader(stack: Stack, chat_id: str) -> socket.socket:
    """A WebSocket handshake on a raw socket with a tiny receive buffer, then no reading at all."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", stack.port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /ws?chat_id={chat_id}&channel=cli_chat HTTP/1.1\r\nHost: 127.0.0.1:{stack.port}\r\n"
               f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {stack.token}\r\n\r\n").encode())
    status = b""
    while not status.endswith(b"\r\n"):
        status += s.recv(1)
    assert b" 101 " in status, status
    return s


def _hung_up(s: socket.socket, timeout: float) -> bool:
    """Read whatever is buffered; True once the server has closed the connection."""
    s.settimeout(timeout)
    try:
        while s.recv(1 << 20):
            pass
    except socket.timeout:
        return False
    except ConnectionResetError:
        pass
    return True


def test_clients_that_never_read_cannot_stall_other_sockets(stack: Stack, llm: FakeLLM) -> None:
    words = " ".join(f"{i:04d}" + "z" * 1200 for i in range(160))  # ~190 KB, streamed in 160 pieces
    add_rule(llm, "flood the watchers", {"content": words, "chunk_delay_ms": 15})
    add_rule(llm, "quiet neighbour", {"content": "neighbour done", "delay_ms": 1500})
    chat = "t-flood-" + uuid.uuid4().hex[:6]
    base = stack.health()["connections"]
    stuck = [_never_reader(stack, chat) for _ in range(12)]  # more than the web's shared send threads
    same, other = StrictClient(stack, chat), StrictClient(stack)
    wait_for(lambda: stack.health()["connections"] >= base + len(stuck) + 2, 20, "sockets not watching")

    flood = same.reply({"type": "message", "content": "flood the watchers", "id": "f"})
    neighbour = other.reply({"type": "message", "content": "quiet neighbour", "id": "q"})
    assert flood["type"] == neighbour["type"] == "accepted"
    done = same.until(lambda f: f["type"] == "turn_completed" and flood["seq"] in f["inbound_seqs"], timeout=90)
    assert done["final_text"] == words
    last = [f for f in same.frames if f["type"] == "turn_updated" and f["turn_id"] == done["turn_id"]][-1]
    assert last["blocks"][-1] == {"type": "text", "text": words}
    assert other.until(lambda f: f["type"] == "turn_completed", timeout=90)["final_text"] == "neighbour done"
    same.still_usable()
    other.still_usable()

    # the stuck ones were dropped (each would have to read megabytes to learn it) ...
    assert all(_hung_up(s, 30) for s in stuck)
    wait_for(lambda: stack.health()["connections"] <= base + 2, 20, "dropped sockets stayed registered")
    log = _web_log(stack)
    assert "dropped a websocket" in log
    for s in stuck:
        s.close()
    # ... and a reconnect catches up from `ready`
    again = StrictClient(stack, chat)
    assert [m["content"] for m in again.ready["history"] if m["role"] == "assistant"][-1] == words
    again.still_usable()


# --- the outbox's policy, over a real socket pair -------------------------------------------------


class LineTransport:
    """Frames as lines on a real socket, so the peer can read exactly what the outbox wrote."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def encode(self, text: str) -> bytes:
        return text.encode() + b"\n"

    def encode_close(self, code: int, reason: str) -> bytes:
        return f"CLOSE {code} {reason}\n".encode()

    def encode_ping(self) -> bytes:
        return b"PING\n"

    def send_nowait(self, data: memoryview) -> int:
        try:
            return self.sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def abort(self, graceful: bool = False) -> None:
        self.sock.shutdown(socket.SHUT_WR if graceful else socket.SHUT_RDWR)


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = b""
    while chunk := sock.recv(1 << 20):
        data += chunk
    return data


def test_an_overflowing_queue_drops_the_socket_with_1013() -> None:
    ours, peer = socket.socketpair()
    box = Outbox(LineTransport(ours), OutboxLimits(frames=4, bytes=1 << 20, stall_secs=5))
    assert box.put({"type": "a"}, "a", 1)  # the caller would now schedule a drain; it is late
    for i in range(3):
        box.put({"type": "turn_updated", "turn_id": "t", "revision": i}, f"snap{i}", 5)  # coalesce to one
    box.put({"type": "b"}, "b", 1)
    box.put({"type": "c"}, "c", 1)  # four waiting: the limit
    assert not box.closed
    box.put({"type": "d"}, "d", 1)  # one too many
    assert box.drain() is False and box.closed
    assert _read_all(peer) == b"CLOSE 1013 the client is not reading (more than 4 frames or 1048576 bytes waiting)\n"
    assert box.put({"type": "e"}, "e", 1) is False
    ours.close(), peer.close()


def test_a_socket_that_takes_nothing_is_dropped_after_its_deadline() -> None:
    ours, peer = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    box = Outbox(LineTransport(ours), OutboxLimits(frames=8, bytes=64 << 20, stall_secs=0.5))
    big = "x" * (4 << 20)  # more than both socket buffers hold
    assert box.put({"type": "history"}, big, len(big))
    assert box.drain() is True  # full: the drain gives its thread back instead of blocking
    resumed: list[Outbox] = []
    waiter = WriteWaiter(resumed.append, poll_ms=20)
    waiter.park(box)
    wait_for(lambda: box.closed, 10, "a stalled socket was never dropped")
    waiter.close()
    assert resumed == []  # the peer never read, so there was never room
    data = _read_all(peer)
    assert 0 < len(data) < len(big) and b"CLOSE" not in data  # cut mid-frame: no close frame can follow
    ours.close(), peer.close()


@given(url=st.text(max_size=60) | st.text(st.sampled_from("data:image/png;base64,javascript:http://%AZaz09+/= "),
                                          max_size=60))
def test_image_urls_are_judged_without_echoing_them(url: str) -> None:
    problem = image_problem(url)
    assert problem is None or (len(url) < 12 or url not in problem)
    if problem is None:
        assert url.startswith("data:image/") or url.split(":", 1)[0].lower() in ("http", "https"), url
        assert data_image_bytes(url) >= 0


# --- anything at all -----------------------------------------------------------------------------

# strings biased towards what breaks encoders: lone surrogates of both halves, NUL, quotes, a real pair
_strings = (st.text(st.sampled_from("a\ud800\udc00\udfff\x00\u2028\"\\\U0001F600"), max_size=8)
            | st.text(st.characters(exclude_categories=()), max_size=12))
_numbers = (st.sampled_from([float("nan"), float("inf"), float("-inf"), 10**400, -0.0, True])
            | st.integers() | st.floats(allow_nan=True, allow_infinity=True))
_scalars = st.none() | _numbers | _strings
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(_strings, inner, max_size=3), max_leaves=12)
_types = st.sampled_from(["ping", "history", "command", "message", "dance"]) | _values


@st.composite
def _frames(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:  # deep nesting of arrays and objects
        depth = draw(st.integers(1, 1500))
        return "[" * depth + "]" * depth if draw(st.booleans()) else '{"a":' * depth + "1" + "}" * depth
    if kind == 1:  # not JSON at all
        return draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=40))
    frame = draw(st.dictionaries(st.sampled_from(["limit", "mode", "content", "x"]) | _strings, _values, max_size=3))
    frame["type"] = draw(_types)
    if draw(st.integers(0, 3)):
        frame["id"] = draw(_values)
    if frame["type"] == "message" and isinstance(frame.get("content"), str):
        del frame["content"]  # keep it from starting hundreds of turns; content shapes are tested above
    if frame["type"] == "command":
        frame["command"] = "/" + draw(st.sampled_from(["help", "sessions", "info", "zap "])) + draw(_strings)
    # ASCII JSON with NaN/Infinity allowed: lone surrogates travel as \\udXXX escapes, legal JSON
    return json.dumps(frame, ensure_ascii=True, allow_nan=True)


@pytest.fixture(scope="module")
def fuzz_client(stack: Stack) -> Iterator[StrictClient]:
    c = StrictClient(stack)
    StrictClient.opened.remove(c)  # one socket for every example
    yield c
    c.close()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=_frames())
def test_any_frame_gets_strict_json_and_the_socket_lives(fuzz_client: StrictClient, raw: str) -> None:
    fuzz_client.send(raw)
    fuzz_client.still_usable()  # every frame on the way there went through the strict parser
