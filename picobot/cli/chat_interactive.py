"""The interactive `picobot chat`: read lines, send them, show the replies as they stream.

A lost connection ends it at once with a one-line error and exit code 2, even while it waits for
the user to type.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from typing import Any

from picobot.cli.chat import CONNECTION_ERRORS, EXIT_UNAVAILABLE, ChatClient, GatewayUnavailable, lost


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


def _show(frame: dict[str, Any], printer: _Printer) -> None:
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
    elif kind == "approval_requested":
        aid = frame.get("approval_id")
        print(f"\n[approval {aid}] {frame.get('tool')} ({frame.get('rule')}) wants to run:\n  {frame.get('summary')}\n"
              f"  /approve {aid}   /approve {aid} session   /deny {aid}")
    elif kind == "approval_decided":
        print(f"[approval {frame.get('approval_id')} {frame.get('status')} by {frame.get('decided_by')}]")


class _Reader:
    """Shows what the gateway sends, on its own thread; notes when the connection is lost."""

    def __init__(self, client: ChatClient) -> None:
        self.client = client
        self.printer = _Printer()
        self.stop = threading.Event()
        self.lost: str | None = None  # why the connection ended, when it was not us
        self.awaiting: set[str] = set()  # ids of frames sent whose reply has not come yet
        self.replied = threading.Condition()

    def start(self) -> None:
        threading.Thread(target=self._run, name="chat-reader", daemon=True).start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                frame = self.client.recv(None)
            except GatewayUnavailable as exc:
                return self.lose(str(exc))
            except CONNECTION_ERRORS:
                return self.lose(lost(self.client.url, "during the chat"))
            with self.replied:
                self.awaiting.discard(str(frame.get("id")))
                if not self.awaiting:
                    self.replied.notify_all()
            try:
                _show(frame, self.printer)
            except (KeyError, TypeError, AttributeError, IndexError):
                pass  # a malformed frame is skipped: the chat and later frames go on

    def lose(self, why: str) -> None:
        if not self.stop.is_set():  # not when we closed it ourselves
            self.lost = why
        self.stop.set()
        with self.replied:
            self.replied.notify_all()

    def expect(self, frame_id: str) -> None:
        with self.replied:
            self.awaiting.add(frame_id)

    def wait_for_replies(self, timeout: float) -> None:
        with self.replied:
            self.replied.wait_for(lambda: not self.awaiting or self.stop.is_set(), timeout=timeout)


class _StdinLines:
    """Lines typed at the terminal, read so that a lost connection can end the wait for one.

    input() would block until Enter even after the gateway went away; this polls stdin with
    select() and gives up as soon as `stop` is set.
    """

    POLL_SECS = 0.2

    def __init__(self, stop: threading.Event) -> None:
        self.fd = sys.stdin.fileno()
        self.stop = stop
        self.buf = b""
        self.eof = False

    def next(self) -> str | None:
        """The next line without its newline; None at end of input or when stopped."""
        while b"\n" not in self.buf and not self.eof:
            if self.stop.is_set():
                return None
            if select.select([self.fd], [], [], self.POLL_SECS)[0]:
                chunk = os.read(self.fd, 65536)
                self.buf += chunk
                self.eof = not chunk
        if not self.buf or self.stop.is_set():
            return None
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(sys.stdin.encoding or "utf-8", errors="replace")


def interactive(client: ChatClient) -> int:
    """The interactive chat; 0 when the user leaves, 2 when the connection is lost."""
    print(f"PicoBot chat — dialog {client.ready['session']['dialog_id']}. /help for commands, /quit to leave.")
    reader = _Reader(client)
    reader.start()
    try:
        _read_and_send(client, reader)
        reader.wait_for_replies(timeout=5)  # let the replies to what was just typed arrive before leaving
    except KeyboardInterrupt:
        pass
    reader.stop.set()
    client.close()
    if reader.lost:
        print(f"\nerror: {reader.lost}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return 0


def _read_and_send(client: ChatClient, reader: _Reader) -> None:
    lines = _StdinLines(reader.stop)
    while True:
        print("> ", end="", flush=True)
        line = lines.next()
        if line is None or line.strip() in ("/quit", "/exit"):
            return
        line = line.strip()
        if line == "/clear":
            print("\033[2J\033[H", end="")
        elif line:
            _send_line(client, reader, line)


def _send_line(client: ChatClient, reader: _Reader, line: str) -> None:
    frame_id = f"t{len(reader.awaiting)}-{time.monotonic_ns()}"
    reader.expect(frame_id)
    frame = ({"type": "command", "command": line, "id": frame_id} if line.startswith("/")
             else {"type": "message", "content": line, "id": frame_id})
    try:
        client.send(frame)
    except CONNECTION_ERRORS:
        reader.lose(lost(client.url, "while sending"))
