"""Fault injection with real processes: /stop against a long model call, a running bash, a stalled
fetch (split from test_faults.py so the suite runs the two files on different workers)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import add_rule
from tests.test_faults import BOTH_DATABASES, _history, _model_saw, fresh
from picobot.cli.embedded_redis import free_port
from tests.stack import Stack, base_config, wait_for

pytestmark = pytest.mark.slow

STOP_PROMISE_SECS = 1.0
STOP_HEADROOM_SECS = 0.5


@BOTH_DATABASES
def test_stop_cancels_long_model_call_within_a_second(fresh: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "stop-me", {"content": "too late", "delay_ms": 20000})
    fresh.start(workers=1)
    c = fresh.client()
    acc = c.say("stop-me")
    _model_saw(llm, "stop-me")
    queued = c.say("waiting behind", mode="queue")
    assert queued["fate"] == "queued"
    started = time.monotonic()
    reply = c.command("/stop")
    assert reply["data"]["cleared"] == 1
    done = c.wait_completed(acc["seq"], timeout=10)
    elapsed = time.monotonic() - started
    assert done["status"] == "cancelled"
    # docs/PROTOCOL.md promises STOP_PROMISE_SECS from /stop to the turn's end. Measured here it is
    # about 0.05-0.15 s; STOP_HEADROOM_SECS is for a loaded two-core CI box, where the web, worker,
    # Redis and this client share the cores. The round trip of the /stop frame itself is included.
    print(f"/stop took {elapsed:.3f} s")
    assert elapsed < STOP_PROMISE_SECS + STOP_HEADROOM_SECS, f"/stop took {elapsed:.2f} s"
    # the queued message was cleared, not run
    time.sleep(1.5)
    assert not any(f["type"] == "turn_completed" and queued["seq"] in f["inbound_seqs"] for f in c.frames)


@BOTH_DATABASES
def test_stop_kills_a_running_bash(fresh: Stack, llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # The marker is in the workspace: the sandbox sees only that folder (a path elsewhere would be
    # written to the sandbox's private /tmp, or not at all, and the test could not fail).
    marker = tmp_path / "home-workspace" / "bash-finished"
    add_rule(llm, "run-sleep", {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 3 && touch bash-finished"}}]},
             {"content": "slept"})
    # Unsandboxed, so only /stop's kill can end the command: bubblewrap's --die-with-parent also
    # kills it once the thread that started it returns, which would hide a missing kill.
    config = json.loads((fresh.home / "config.json").read_text())
    config["tools"] = {"bash": {"sandbox": "none"}}
    (fresh.home / "config.json").write_text(json.dumps(config))
    fresh.start(workers=1)
    c = fresh.client()
    acc = c.say("run-sleep")
    c.recv_until(lambda f: f["type"] == "turn_updated" and any(
        b["type"] == "tool" and b.get("status") == "running" for b in f["blocks"]))
    c.command("/stop")
    done = c.wait_completed(acc["seq"], timeout=10)
    assert done["status"] == "cancelled"
    hist = _history(c)
    tool = [m for m in hist if m["role"] == "tool"]
    assert tool and tool[-1]["is_error"]  # the chain stays whole: the call has a (cancelled) result
    time.sleep(4)  # past the command's own 3 s: a shell that survived /stop would have written the marker
    assert marker.parent.is_dir() and not marker.exists()


@pytest.fixture
def stalling_server() -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """A local HTTP server that sends a few bytes of its body, then nothing for 30 s; it notes
    when the client hangs up."""
    stalled, hung_up = threading.Event(), threading.Event()

    class Stall(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"the start of a page ")
            self.wfile.flush()
            stalled.set()
            self.connection.settimeout(30)
            try:
                if self.connection.recv(1) == b"":
                    hung_up.set()
            except OSError:
                hung_up.set()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Stall)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/page", stalled, hung_up
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_stop_cuts_a_stalled_fetch_and_a_waiting_write_never_lands(  # type: ignore[no-untyped-def]
        tmp_path: Path, fake_llm, llm, stalling_server, database: str, request: pytest.FixtureRequest) -> None:
    url, stalled, hung_up = stalling_server
    workspace = tmp_path / "ws"
    cfg = base_config(fake_llm.url, free_port())
    # one tool at a time, so the write waits behind the fetch; the guard opened for the local server
    cfg["tools"] = {"workspace": str(workspace), "max_parallel": 1, "network": {"allow": ["127.0.0.1"]}}
    add_rule(llm, "fetch-then-write", {"tool_calls": [
        {"name": "web_fetch", "arguments": {"url": url}},
        {"name": "write", "arguments": {"path": "after.txt", "content": "must not land"}}]}, {"content": "never"})
    stack = Stack(tmp_path, fake_llm.url, config=cfg,
                  database_url=request.getfixturevalue("pg_url") if database == "postgres" else None)
    try:
        stack.start(workers=1)
        c = stack.client()
        acc = c.say("fetch-then-write")
        assert stalled.wait(20)
        started = time.monotonic()
        c.command("/stop")
        done = c.wait_completed(acc["seq"], timeout=10)
        elapsed = time.monotonic() - started
        assert done["status"] == "cancelled"
        assert elapsed < 10, elapsed  # liveness only; the documented target is 1 s
        # the fetch was cut, not abandoned: an abandoned read would hold the connection
        # open until its 30 s timeout
        assert hung_up.wait(5)
        results = [m for m in _history(c) if m["role"] == "tool"]
        assert [m["content"].startswith("[cancelled]") for m in results] == [True, True]
        time.sleep(0.5)
        assert not (workspace / "after.txt").exists()
    finally:
        stack.stop()
