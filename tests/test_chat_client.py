"""`picobot chat` against gateways that cannot serve it: it gives up with one line and exit code 2.

Each server here is a real TCP server on 127.0.0.1 that misbehaves in one way: it accepts and never
answers, completes the WebSocket handshake and never sends `ready`, closes at once, or closes after
`ready`. The client runs as a user runs it (`python -m picobot chat`), with a --timeout far longer
than the test is willing to wait, so a client that waits for it fails the test.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
GIVE_UP_SECS = 60  # the test's own limit; the client is told --timeout 600
READY = {"type": "ready", "session": {"session_id": "cli_chat:x:d1", "dialog_id": "d1", "title": ""}, "history": []}


# --- the misbehaving servers ------------------------------------------------------------------

def _handshake(conn: socket.socket) -> None:
    request = b""
    while b"\r\n\r\n" not in request:
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("client left during the handshake")
        request += chunk
    key = next(line.split(b":", 1)[1].strip() for line in request.split(b"\r\n")
               if line.lower().startswith(b"sec-websocket-key:"))
    accept = base64.b64encode(hashlib.sha1(key + WS_GUID.encode()).digest())
    conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")


def _send_text(conn: socket.socket, frame: dict) -> None:
    payload = json.dumps(frame).encode()
    assert len(payload) < 65536  # the short and 16-bit forms of the length are all these servers need
    header = bytes([0x81, len(payload)]) if len(payload) < 126 else bytes([0x81, 126]) + len(payload).to_bytes(2, "big")
    conn.sendall(header + payload)


def _recv_frame(conn: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("client left")
            data += chunk
        return data

    _, second = exactly(2)
    length = second & 0x7F
    if length == 126:
        length = int.from_bytes(exactly(2), "big")
    elif length == 127:
        length = int.from_bytes(exactly(8), "big")
    mask = exactly(4)  # client frames are always masked
    return bytes(b ^ mask[i % 4] for i, b in enumerate(exactly(length)))


def silent(conn: socket.socket, done: threading.Event) -> None:
    done.wait()


def handshake_only(conn: socket.socket, done: threading.Event) -> None:
    _handshake(conn)
    done.wait()


def close_at_once(conn: socket.socket, done: threading.Event) -> None:
    conn.close()


def ready_then_close(conn: socket.socket, done: threading.Event) -> None:
    _handshake(conn)
    _send_text(conn, READY)
    conn.close()  # no close frame: the way a dying web process leaves


def accepted_then_close(conn: socket.socket, done: threading.Event) -> None:
    _handshake(conn)
    _send_text(conn, READY)
    frame = json.loads(_recv_frame(conn))
    _send_text(conn, {"type": "accepted", "id": frame.get("id"), "seq": 1, "session_id": "cli_chat:x:d1",
                      "fate": "started"})
    conn.close()


def ready_then_close_later(conn: socket.socket, done: threading.Event) -> None:
    _handshake(conn)
    _send_text(conn, READY)
    done.wait(1.0)  # the interactive client is waiting for the user's next line by now
    conn.close()


ODD_READY = {**READY, "session": {**READY["session"], "dialog_id": "\ud800"}}


def answers_oddly(conn: socket.socket, done: threading.Event) -> None:
    """Legal JSON a client must survive: lone surrogates, wrong types, frames missing their keys."""
    _handshake(conn)
    _send_text(conn, ODD_READY)
    frame_id = json.loads(_recv_frame(conn)).get("id")
    for frame in ({"type": "accepted", "id": frame_id, "seq": 1, "fate": "started"},
                  {"type": "turn_updated"}, {"type": "turn_updated", "turn_id": "t", "blocks": [{"type": "text"}]},
                  {"type": "session"}, {"type": "command", "id": ["not", "a", "string"], "text": "\ud800"},
                  {"type": "turn_completed", "inbound_seqs": 1},
                  {"type": "turn_completed", "inbound_seqs": [1], "status": "completed", "final_text": "hi \ud800"}):
        _send_text(conn, frame)
    done.wait()


def ends_before_accepted(conn: socket.socket, done: threading.Event) -> None:
    """The turn's end first, then `accepted`: the gateway enqueues the turn before it answers, and a fast turn's
    events reach the socket on another path."""
    _handshake(conn)
    _send_text(conn, READY)
    frame_id = json.loads(_recv_frame(conn)).get("id")
    _send_text(conn, {"type": "turn_completed", "inbound_seqs": [7], "status": "completed", "final_text": "early answer"})
    _send_text(conn, {"type": "accepted", "id": frame_id, "seq": 7, "fate": "started"})
    done.wait()


Behaviour = Callable[[socket.socket, threading.Event], None]


class HostileServer:
    def __init__(self, behaviour: Behaviour) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.behaviour = behaviour
        self.done = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def _accept(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self.behaviour(conn, self.done)
        except OSError:
            pass

    def close(self) -> None:
        self.done.set()
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], HostileServer]]:
    servers: list[HostileServer] = []

    def start(behaviour: Behaviour) -> HostileServer:
        servers.append(HostileServer(behaviour))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


# --- the client, as a user runs it -----------------------------------------------------------

def _chat(home: Path, url: str, *args: str, stdin: str | None = None, typed: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICOBOT_", "DATABASE_URL", "REDIS_URL"))}
    env["PICOBOT_HOME"] = str(home)
    argv = [sys.executable, "-m", "picobot", "chat", "--url", url, "--ready-timeout", "1", "--timeout", "600", *args]
    if stdin is None:
        return _interactive(argv, env, home, typed)
    return subprocess.run(argv, env=env, cwd=home, input=stdin, capture_output=True, text=True, timeout=GIVE_UP_SECS)


def _interactive(argv: list[str], env: dict[str, str], home: Path, typed: str) -> subprocess.CompletedProcess:
    """Stdin stays open after `typed`, as for a user still at the terminal (communicate() would close it)."""
    out, err = home / "stdout", home / "stderr"
    with open(out, "w") as o, open(err, "w") as e, subprocess.Popen(argv, env=env, cwd=home, stdin=subprocess.PIPE,
                                                                     stdout=o, stderr=e) as proc:
        proc.stdin.write(typed.encode())  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        try:
            proc.wait(timeout=GIVE_UP_SECS)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError("the interactive client did not give up") from None
        finally:
            proc.stdin.close()  # type: ignore[union-attr]
    return subprocess.CompletedProcess(argv, proc.returncode, out.read_text(), err.read_text())


def _one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


NOT_READY = [(silent, "not ready after 1 s (no WebSocket handshake)"),
             (handshake_only, "not ready after 1 s (connected, but no `ready` frame)"),
             (close_at_once, "closed the connection before it was ready")]


@pytest.mark.parametrize("behaviour, says", NOT_READY, ids=lambda v: getattr(v, "__name__", ""))
def test_chat_m_gives_up_when_ready_does_not_come(tmp_path: Path, serve, behaviour: Behaviour, says: str) -> None:
    server = serve(behaviour)
    line = _one_error_line(_chat(tmp_path, server.url, "-m", "hello"))
    assert says in line and server.url in line


@pytest.mark.parametrize("behaviour, says", NOT_READY, ids=lambda v: getattr(v, "__name__", ""))
def test_interactive_chat_gives_up_when_ready_does_not_come(tmp_path: Path, serve, behaviour: Behaviour,
                                                            says: str) -> None:
    server = serve(behaviour)
    result = _chat(tmp_path, server.url)
    assert says in _one_error_line(result)
    assert "PicoBot chat" not in result.stdout  # it never claimed to be connected


@pytest.mark.parametrize("behaviour", [ready_then_close, accepted_then_close], ids=lambda b: b.__name__)
def test_chat_m_gives_up_when_the_socket_closes_after_ready(tmp_path: Path, serve, behaviour: Behaviour) -> None:
    server = serve(behaviour)
    line = _one_error_line(_chat(tmp_path, server.url, "-m", "hello"))
    assert "connection to the gateway" in line and "was lost" in line


def test_interactive_chat_ends_when_the_socket_closes_while_waiting_for_input(tmp_path: Path, serve) -> None:
    server = serve(ready_then_close_later)
    result = _chat(tmp_path, server.url)
    assert "PicoBot chat — dialog d1" in result.stdout
    assert "was lost during the chat" in _one_error_line(result)


def test_interactive_chat_ends_when_the_socket_closes_after_a_message(tmp_path: Path, serve) -> None:
    server = serve(accepted_then_close)
    result = _chat(tmp_path, server.url, typed="hello\n")
    assert "was lost during the chat" in _one_error_line(result)


def test_odd_frames_from_the_gateway_do_not_break_the_client(tmp_path: Path, serve) -> None:
    server = serve(answers_oddly)
    result = _chat(tmp_path, server.url, "-m", "hello")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hi \\ud800\n"
    result = _chat(tmp_path, server.url, stdin="hello\n")
    assert result.returncode == 0, result.stderr
    assert "dialog \\ud800" in result.stdout and "Traceback" not in result.stderr


def test_a_turn_that_ends_before_its_accepted_frame_is_still_the_reply(tmp_path: Path, serve) -> None:
    server = serve(ends_before_accepted)
    result = _chat(tmp_path, server.url, "-m", "hello", "--timeout", "5")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "early answer\n"


def test_an_unreachable_gateway_is_one_line_too(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"ws://127.0.0.1:{s.getsockname()[1]}/ws"
    line = _one_error_line(_chat(tmp_path, url, "-m", "hello"))
    assert "cannot reach the gateway" in line and "picobot up" in line


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon", ""])
def test_timeouts_must_be_positive_numbers(tmp_path: Path, value: str) -> None:
    for flag in ("--timeout", "--ready-timeout"):
        r = subprocess.run([sys.executable, "-m", "picobot", "chat", flag, value, "-m", "x"],
                           env=dict(os.environ, PICOBOT_HOME=str(tmp_path)), capture_output=True, text=True,
                           timeout=GIVE_UP_SECS)
        assert r.returncode == 2 and "positive number of seconds" in r.stderr, r.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/ws", "127.0.0.1:1", "ftp://x/ws"])
def test_a_gateway_url_that_is_not_a_websocket_url_is_a_clear_error(tmp_path: Path, url: str) -> None:
    assert "must start with ws:// or wss://" in _one_error_line(_chat(tmp_path, url, "-m", "hello"))
