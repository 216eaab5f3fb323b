"""`picobot chat`: a terminal client over /ws (one-shot with -m, or interactive)."""

from __future__ import annotations

import json
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import websocket  # websocket-client

LOCAL_COMMANDS = {"/quit", "/exit", "/clear"}
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


class ChatClient:
    def __init__(self, url: str, chat_id: str, timeout: float = 10.0, headers: list[str] | None = None):
        query = urlencode({"chat_id": chat_id, "channel": "cli_chat"})
        self.ws = websocket.create_connection(f"{url}?{query}", timeout=timeout, header=headers or [])
        self.ready = self.recv(timeout)
        if self.ready.get("type") != "ready":
            raise RuntimeError(self.ready.get("error") or f"unexpected first frame: {self.ready}")
        self.session_id = self.ready["session"]["session_id"]

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        self.ws.settimeout(timeout)
        return json.loads(self.ws.recv())

    def send(self, frame: dict[str, Any]) -> None:
        self.ws.send(json.dumps(frame))

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass


def _has_local_database(config: Any) -> bool:
    """True on the server machine: its database is reachable from here (a SQLite file that exists,
    or a shared database URL). Elsewhere we must not create a stray database just to pair."""
    if not config.database_url.startswith("sqlite"):
        return True
    path = config.database_url.split(":///", 1)[-1]
    return bool(path) and Path(path).expanduser().exists()


def _bearer(token: str | None) -> list[str]:
    return [f"Authorization: Bearer {token}"] if token else []


def connect_paired(config: Any, url: str, chat_id: str, token: str | None = None) -> ChatClient:
    """Connect with the given token, else (on the server) the terminal's own token, issued on first use.

    Raises PermissionError with how-to-pair advice when the gateway answers 401.
    """
    from picobot.pairing import local_cli_token

    if token:
        try:
            return ChatClient(url, chat_id, headers=_bearer(token))
        except websocket.WebSocketBadStatusException as exc:
            if exc.status_code == 401:
                raise PermissionError("the gateway refused this token (revoked, or from another server). "
                                      + NOT_PAIRED) from None
            raise
    local = local_cli_token(config) if config.gateway.pairing_required and _has_local_database(config) else None
    try:
        return ChatClient(url, chat_id, headers=_bearer(local))
    except websocket.WebSocketBadStatusException as exc:
        if exc.status_code != 401:
            raise
    if not _has_local_database(config):
        raise PermissionError(NOT_PAIRED)
    # Our token was revoked or the database was replaced: pair again, once.
    try:
        return ChatClient(url, chat_id, headers=_bearer(local_cli_token(config, renew=True)))
    except websocket.WebSocketBadStatusException as exc:
        if exc.status_code == 401:
            raise PermissionError(NOT_PAIRED) from None
        raise


def run_once(client: ChatClient, text: str, timeout: float) -> int:
    """Send one message or command; print the final reply. 0 on success."""
    is_command = text.strip().startswith("/")
    client.send({"type": "command" if is_command else "message", "id": "m1",
                 **({"command": text} if is_command else {"content": text})})
    deadline = time.monotonic() + timeout
    seq = None
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
                seq = frame["seq"]
                client.session_id = frame["session_id"]
        elif kind == "turn_completed" and seq is not None and seq in frame.get("inbound_seqs", []):
            if frame.get("status") == "completed":
                print(frame.get("final_text", ""))
                return 0
            print(f"error: turn {frame.get('status')}: {frame.get('error') or ''}".rstrip(": "), file=sys.stderr)
            return 1
    print(f"error: no reply within {timeout:.0f} s", file=sys.stderr)
    return 1


class _Printer:
    """Prints snapshot growth as it streams (text and tool activity)."""

    def __init__(self) -> None:
        self.shown: dict[tuple[str, int], int] = {}
        self.tools: dict[str, str] = {}

    def snapshot(self, snap: dict[str, Any]) -> None:
        turn = snap["turn_id"]
        for i, block in enumerate(snap.get("blocks", [])):
            kind = block["type"]
            if kind == "text":
                done = self.shown.get((turn, i), 0)
                sys.stdout.write(block["text"][done:])
                self.shown[(turn, i)] = len(block["text"])
            elif kind == "tool":
                status = block.get("status", "")
                if self.tools.get(block.get("id", "")) != status and status in ("running", "done", "error"):
                    self.tools[block.get("id", "")] = status
                    sys.stdout.write(f"\n  [{block.get('name')} {status}]\n")
        sys.stdout.flush()


def interactive(client: ChatClient) -> int:
    printer = _Printer()
    print(f"PicoBot chat — dialog {client.ready['session']['dialog_id']}. /help for commands, /quit to leave.")
    stop = threading.Event()
    awaiting: set[str] = set()  # ids of commands sent whose reply has not come yet
    replied = threading.Condition()

    def reader() -> None:
        while not stop.is_set():
            try:
                frame = client.recv(None)
            except Exception:
                if not stop.is_set():
                    print("\n[disconnected]")
                stop.set()
                return
            with replied:
                awaiting.discard(frame.get("id"))
                if not awaiting:
                    replied.notify_all()
            kind = frame.get("type")
            if kind == "turn_updated":
                printer.snapshot(frame)
            elif kind == "turn_completed":
                if frame.get("status") != "completed":
                    print(f"\n[{frame.get('status')}] {frame.get('error') or ''}")
                print()
            elif kind == "command":
                print(frame.get("text", ""))
            elif kind in ("rejected", "error"):
                print(f"[error] {frame.get('error')}")
            elif kind == "accepted" and frame.get("fate") != "started":
                print(f"[{frame.get('fate')}]")
            elif kind == "message":
                print(f"\n[message] {frame.get('text')}")
            elif kind == "session":
                print(f"[dialog {frame['session']['dialog_id']}]")

    threading.Thread(target=reader, daemon=True).start()
    try:
        while not stop.is_set():
            line = input("> ").strip()
            if not line:
                continue
            if line in ("/quit", "/exit"):
                break
            if line == "/clear":
                print("\033[2J\033[H", end="")
                continue
            frame_id = f"t{len(awaiting)}-{time.monotonic_ns()}"
            with replied:
                awaiting.add(frame_id)
            if line.startswith("/"):
                client.send({"type": "command", "command": line, "id": frame_id})
            else:
                client.send({"type": "message", "content": line, "id": frame_id})
    except (EOFError, KeyboardInterrupt):
        pass
    with replied:  # let the replies to what was just typed arrive before leaving
        replied.wait_for(lambda: not awaiting or stop.is_set(), timeout=5)
    stop.set()
    client.close()
    return 0
