"""`picobot chat`: a terminal client over /ws — the connection, and the one-shot `-m`.

It never waits on a gateway that cannot serve it: no `ready` within the ready timeout, or a
connection that closes before or after `ready`, ends the command with a one-line error and exit
code 2 (see docs/OPERATIONS.md). The interactive chat is in chat_interactive.py.
"""

from __future__ import annotations

import json
import secrets
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import websocket  # websocket-client

LOCAL_COMMANDS = {"/quit", "/exit", "/clear"}
EXIT_UNAVAILABLE = 2  # no usable connection: unreachable, refused, not ready in time, or closed
NOT_PAIRED = ("the gateway requires a paired device. On the server, `picobot chat` pairs itself; from another "
              "machine pass --token (or set PICOBOT_TOKEN) with a token from `picobot pair --new-token NAME` "
              "run on the server.")


def stable_chat_id(home: Path) -> str:
    """The terminal's chat id, kept in the PicoBot home so successive runs continue one chat."""
    path = home / "cli" / "chat_id"
    if path.exists():
        value = path.read_text().strip()
        if value:
            return value
    path.parent.mkdir(parents=True, exist_ok=True)
    value = "cli-" + secrets.token_hex(6)
    path.write_text(value + "\n")
    return value


class GatewayUnavailable(Exception):
    """The gateway cannot serve this client; the message is one line for the terminal."""


# What a connection that went away looks like, from the socket or from websocket-client.
CONNECTION_ERRORS = (websocket.WebSocketException, OSError)
# Nothing answered at that address at all (as opposed to a server that answered, then went away).
UNREACHABLE = (ConnectionRefusedError, socket.gaierror, websocket.WebSocketAddressException)


class ChatClient:
    """A /ws connection that has received `ready`, or GatewayUnavailable within ready_timeout."""

    def __init__(self, url: str, chat_id: str, ready_timeout: float, headers: list[str] | None = None):
        self.url = url
        if not url.lower().startswith(("ws://", "wss://")):
            raise GatewayUnavailable(f"the gateway URL must start with ws:// or wss:// (e.g. "
                                     f"ws://127.0.0.1:19876/ws), not {_one_line(url)[:100]!r}")
        deadline = time.monotonic() + ready_timeout
        query = urlencode({"chat_id": chat_id, "channel": "cli_chat"})
        try:
            self.ws = websocket.create_connection(f"{url}?{query}", timeout=ready_timeout, header=headers or [])
        except websocket.WebSocketBadStatusException:
            raise  # 401 is the caller's to explain
        except (websocket.WebSocketTimeoutException, socket.timeout):
            raise self._gave_up(ready_timeout, "no WebSocket handshake") from None
        except UNREACHABLE as exc:
            raise self._unreachable(exc) from None
        except CONNECTION_ERRORS:
            raise self._closed_early() from None
        try:
            self.ready = self._first_frame(deadline, ready_timeout)
        except BaseException:
            self.close()
            raise
        self.session_id = self.ready["session"]["session_id"]

    def _first_frame(self, deadline: float, ready_timeout: float) -> dict[str, Any]:
        try:
            frame = self.recv(max(0.01, deadline - time.monotonic()))
        except (websocket.WebSocketTimeoutException, socket.timeout):
            raise self._gave_up(ready_timeout, "connected, but no `ready` frame") from None
        except CONNECTION_ERRORS:
            raise self._closed_early() from None
        if frame.get("type") == "ready" and isinstance(frame.get("session"), dict) \
                and isinstance(frame["session"].get("session_id"), str):
            return frame
        if frame.get("type") == "error":
            raise GatewayUnavailable(f"the gateway at {self.url} refused the connection: "
                                     f"{_one_line(frame.get('error'))}")
        raise GatewayUnavailable(f"the gateway at {self.url} sent {_one_line(frame.get('type'))!r} where "
                                 "`ready` was expected; is that URL a PicoBot /ws endpoint?")

    def _gave_up(self, ready_timeout: float, what: str) -> GatewayUnavailable:
        return GatewayUnavailable(f"the gateway at {self.url} is not ready after {ready_timeout:g} s ({what}); "
                                  "check `picobot health`, or allow longer with --ready-timeout")

    def _closed_early(self) -> GatewayUnavailable:
        return GatewayUnavailable(f"the gateway at {self.url} closed the connection before it was ready; "
                                  "see its log, or `picobot health`")

    def _unreachable(self, exc: BaseException) -> GatewayUnavailable:
        reason = _one_line(getattr(exc, "strerror", None) or exc) or type(exc).__name__
        return GatewayUnavailable(f"cannot reach the gateway at {self.url} ({reason}); "
                                  "is PicoBot running? Start it with `picobot up`")

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        """The next frame; GatewayUnavailable if it is not a JSON object (the gateway sends only those)."""
        self.ws.settimeout(timeout)
        raw = self.ws.recv()
        try:
            frame = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
            frame = None
        if not isinstance(frame, dict):
            raise GatewayUnavailable(f"the gateway at {self.url} sent a frame that is not a JSON object; "
                                     "is that URL a PicoBot /ws endpoint?")
        return frame

    def send(self, frame: dict[str, Any]) -> None:
        self.ws.send(json.dumps(frame))

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass


def _one_line(value: Any, limit: int = 200) -> str:
    """Text from the network, fit for one line of a terminal (no control characters, bounded)."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value if value is not None else ""))
    return " ".join(text.split())[:limit]


def lost(url: str, during: str) -> str:
    return (f"the connection to the gateway at {url} was lost {during}; see `picobot health` "
            "(a message it accepted is still answered and kept in the dialog)")


def _has_local_database(config: Any) -> bool:
    """True on the server machine: its database is reachable from here (a SQLite file that exists,
    or a shared database URL). Elsewhere we must not create a stray database just to pair."""
    if not config.database_url.startswith("sqlite"):
        return True
    path = config.database_url.split(":///", 1)[-1]
    return bool(path) and Path(path).expanduser().exists()


def _local_token(config: Any) -> str:
    """The terminal's stored token; the pairing stack (SQL) is imported only to issue the first one."""
    from picobot.auth.token_file import read_cli_token

    token = read_cli_token(config.home)
    if token:
        return token
    from picobot.auth.pairing import local_cli_token

    return local_cli_token(config)


def _bearer(token: str | None) -> list[str]:
    return [f"Authorization: Bearer {token}"] if token else []


def connect_paired(settings: Any, url: str, chat_id: str, token: str | None, ready_timeout: float) -> ChatClient:
    """Connect with the given token, else (on the server) the terminal's own token, issued on first use.

    `settings` needs home, database_url and pairing_required (ClientSettings or Config's equivalents).
    Raises PermissionError with how-to-pair advice when the gateway answers 401, GatewayUnavailable
    when it cannot serve us.
    """
    if token:
        client = _connect(url, chat_id, token, ready_timeout)
        if client is None:
            raise PermissionError("the gateway refused this token (revoked, or from another server). " + NOT_PAIRED)
        return client
    local = _local_token(settings) if settings.pairing_required and _has_local_database(settings) else None
    client = _connect(url, chat_id, local, ready_timeout)
    if client is not None:
        return client
    if not _has_local_database(settings):
        raise PermissionError(NOT_PAIRED)
    # Our token was revoked or the database was replaced: pair again, once.
    from picobot.auth.pairing import local_cli_token

    client = _connect(url, chat_id, local_cli_token(settings, renew=True), ready_timeout)
    if client is None:
        raise PermissionError(NOT_PAIRED)
    return client


def _connect(url: str, chat_id: str, token: str | None, ready_timeout: float) -> ChatClient | None:
    """A ready client, or None when the gateway answers 401 (not paired)."""
    try:
        return ChatClient(url, chat_id, ready_timeout, headers=_bearer(token))
    except websocket.WebSocketBadStatusException as exc:
        if exc.status_code == 401:
            return None
        raise GatewayUnavailable(f"the gateway at {url} refused the WebSocket with HTTP {exc.status_code}; "
                                 "is that URL a PicoBot /ws endpoint?") from None


def run_once(client: ChatClient, text: str, timeout: float) -> int:
    """Send one message or command; print the final reply. 0 on success, 2 if the connection is lost."""
    try:
        return _send_and_wait(client, text, timeout)
    except GatewayUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
    except CONNECTION_ERRORS:
        print(f"error: {lost(client.url, 'before the reply came')}", file=sys.stderr)
    return EXIT_UNAVAILABLE


def _send_and_wait(client: ChatClient, text: str, timeout: float) -> int:
    is_command = text.strip().startswith("/")
    client.send({"type": "command" if is_command else "message", "id": "m1",
                 **({"command": text} if is_command else {"content": text})})
    deadline = time.monotonic() + timeout
    seq = None
    # The gateway enqueues the turn before it answers `accepted`, and the turn's events come on another path:
    # a fast turn's end can arrive first. Ends seen before `accepted` are kept and matched when it comes.
    ended: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            frame = client.recv(max(0.1, deadline - time.monotonic()))
        except websocket.WebSocketTimeoutException:
            break
        kind = frame.get("type")
        if frame.get("id") == "m1":
            if kind == "command":
                print(frame.get("text", ""))
                return 1 if frame.get("code") in ("unknown_command", "usage", "not_found") else 0
            if kind in ("rejected", "error"):
                print(f"error: {frame.get('error')}", file=sys.stderr)
                return 1
            if kind == "accepted":
                seq = frame.get("seq")
                done = next((f for f in ended if _lists(f.get("inbound_seqs"), seq)), None)
                if done is not None:
                    return _print_end(done)
        elif kind == "turn_completed":
            if seq is None:
                ended.append(frame)
            elif _lists(frame.get("inbound_seqs"), seq):
                return _print_end(frame)
    print(f"error: no reply within {timeout:g} s", file=sys.stderr)
    return 1


def _print_end(frame: dict[str, Any]) -> int:
    if frame.get("status") == "completed":
        print(frame.get("final_text", ""))
        return 0
    print(f"error: turn {frame.get('status')}: {frame.get('error') or ''}".rstrip(": "), file=sys.stderr)
    return 1


def _lists(seqs: Any, seq: Any) -> bool:
    return isinstance(seqs, list) and seq in seqs
