"""Approvals on a real stack: a matching tool call pauses its turn until /approve or /deny, a timeout,
or /stop; the wait lives in SQL and Redis (a web restart loses nothing); of two deciders one wins.

The fake LLM asks `bash` for `rm -rf victim-<tag>`, a folder made in the workspace for the test: a
deny leaves it there, an approve removes it. Nothing outside the test's own folders is touched.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.storage.db import Database
from tests.conftest import add_rule
from tests.stack import Stack, WsClient, base_config, wait_for
from tests.http_client import HTTP


def _config(llm_url: str, port: int, **approval: Any) -> dict[str, Any]:
    cfg = base_config(llm_url, port, openai_api={"enabled": True, "timeout_secs": 60})
    cfg["tools"] = {"approval": {"mode": "ask", "timeout_secs": 120, **approval,
                                 "rules": [{"name": "flagged", "tool": "*", "pattern": "approve-me"}]}}
    return cfg


def _stack(tmp: Path, llm_url: str, **approval: Any) -> Stack:
    s = Stack(tmp, llm_url)
    (s.home / "config.json").write_text(json.dumps(_config(llm_url, s.port, **approval)))
    return s.start(beat=False)


@pytest.fixture(scope="module")
def astack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    s = _stack(tmp_path_factory.mktemp("approvals"), fake_llm.url)
    try:
        yield s
    finally:
        s.stop()


def _workspace(s: Stack) -> Path:
    return s.home.parent / "home-workspace"


def _victim(s: Stack) -> tuple[str, Path]:
    tag = uuid.uuid4().hex[:8]
    path = _workspace(s) / f"victim-{tag}"
    path.mkdir(parents=True)
    (path / "keep.txt").write_text("still here")
    return tag, path


def _script_rm(llm, tag: str, path: Path, calls: int = 1) -> None:  # type: ignore[no-untyped-def]
    call = {"name": "bash", "arguments": {"command": f"rm -rf {path.name}"}}
    add_rule(llm, f"wipe-{tag}", *[{"tool_calls": [call]}] * calls, {"content": f"finished {tag}"})


def _seen(c: WsClient, kind: str, timeout: float = 90) -> dict[str, Any]:
    """The first `kind` frame not yet looked at, received already (it may come before the frame a
    command or message waited for) or still to come."""
    taken = c.__dict__.setdefault("taken", set())
    for i, frame in enumerate(c.frames):
        if frame["type"] == kind and i not in taken:
            taken.add(i)
            return frame
    frame = c.recv_until(lambda f: f["type"] == kind, timeout)
    taken.add(len(c.frames) - 1)
    return frame


def _requested(c: WsClient, timeout: float = 90) -> dict[str, Any]:
    return _seen(c, "approval_requested", timeout)


def _tool_results(c: WsClient) -> list[str]:
    c.send({"type": "history", "limit": 50, "id": "h"})
    frame = c.recv_until(lambda f: f.get("id") == "h")
    return [m["content"] for m in frame["messages"] if m.get("role") == "tool"]


def _row(s: Stack, approval_id: str) -> dict[str, Any]:
    db = Database(s.database_url)
    try:
        with db.begin() as conn:
            from picobot.storage import approvals

            found = approvals.get(conn, approval_id)
            assert found is not None
            return found.as_dict()
    finally:
        db.dispose()


def test_approve_runs_the_call_and_records_who(astack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    tag, victim = _victim(astack)
    _script_rm(llm, tag, victim)
    c = astack.client()
    acc = c.say(f"wipe-{tag}")
    asked = _requested(c)
    assert asked["tool"] == "bash" and asked["rule"] == "rm-recursive-force"
    assert asked["summary"] == f"rm -rf {victim.name}" and asked["session_id"] == c.session_id
    assert victim.exists()  # paused: nothing ran yet
    reply = c.command(f"/approve {asked['approval_id']}")
    assert reply["text"].startswith("Approved bash"), reply
    decided = _seen(c, "approval_decided")
    assert decided["status"] == "approved" and decided["decided_via"] == "cli_chat"
    done = c.wait_completed(acc["seq"])
    assert done["status"] == "completed" and done["final_text"] == f"finished {tag}"
    assert not victim.exists()
    row = _row(astack, asked["approval_id"])
    assert row["status"] == "approved" and row["decided_by"] == f"cli_chat:{c.chat_id}" and row["decided_at"]
    info = c.command("/info")
    assert asked["approval_id"] in info["text"] and "approved" in info["text"]
    c.close()


def test_deny_refuses_the_call_and_the_model_sees_why(astack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    tag, victim = _victim(astack)
    _script_rm(llm, tag, victim)
    c = astack.client()
    acc = c.say(f"wipe-{tag}")
    asked = _requested(c)
    assert c.command(f"/deny {asked['approval_id']}")["text"].startswith("Denied bash")
    done = c.wait_completed(acc["seq"])
    assert done["status"] == "completed"
    assert (victim / "keep.txt").read_text() == "still here"
    assert any(r.startswith("[denied] the user denied this call") for r in _tool_results(c))
    # a second decision changes nothing and says who decided
    again = c.command(f"/approve {asked['approval_id']}")
    assert "already denied" in again["text"] and _row(astack, asked["approval_id"])["status"] == "denied"
    c.close()


def test_another_chat_cannot_decide(astack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    tag, victim = _victim(astack)
    _script_rm(llm, tag, victim)
    c, other = astack.client(), astack.client()
    acc = c.say(f"wipe-{tag}")
    asked = _requested(c)
    assert "No approval" in other.command(f"/approve {asked['approval_id']}")["text"]
    assert _row(astack, asked["approval_id"])["status"] == "pending"
    c.command(f"/deny {asked['approval_id']}")
    c.wait_completed(acc["seq"])
    assert victim.exists()
    c.close()
    other.close()


def test_allow_for_the_dialog_is_not_asked_again(astack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    tag, victim = _victim(astack)
    second = _workspace(astack) / f"victim-{tag}-2"
    second.mkdir()
    calls = [{"tool_calls": [{"name": "bash", "arguments": {"command": f"rm -rf {victim.name}"}}]},
             {"tool_calls": [{"name": "bash", "arguments": {"command": f"rm -rf {second.name}"}}]},
             {"content": f"finished {tag}"}]
    add_rule(llm, f"wipe-{tag}", *calls)
    c = astack.client()
    acc = c.say(f"wipe-{tag}")
    asked = _requested(c)
    assert "allowed for this dialog" in c.command(f"/approve {asked['approval_id']} session")["text"]
    done = c.wait_completed(acc["seq"])
    assert done["status"] == "completed"
    assert not victim.exists() and not second.exists()  # the second call ran without a request
    assert sum(1 for f in c.frames if f["type"] == "approval_requested") == 1
    assert _row(astack, asked["approval_id"])["scope"] == "session"
    c.close()


def test_read_only_tools_are_never_asked(astack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:8]
    add_rule(llm, f"ro-{tag}", {"tool_calls": [{"name": "read", "arguments": {"path": "approve-me.txt"}}]},
             {"tool_calls": [{"name": "write", "arguments": {"path": f"approve-me-{tag}.txt", "content": "x"}}]},
             {"content": f"finished {tag}"})
    c = astack.client()
    acc = c.say(f"ro-{tag}")
    asked = _requested(c)  # the write, not the read (which matched the same rule)
    assert asked["tool"] == "write" and asked["rule"] == "flagged"
    c.command(f"/deny {asked['approval_id']}")
    c.wait_completed(acc["seq"])
    assert sum(1 for f in c.frames if f["type"] == "approval_requested") == 1
    assert not (_workspace(astack) / f"approve-me-{tag}.txt").exists()
    c.close()


def test_stop_during_the_wait_ends_the_turn(astack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    tag, victim = _victim(astack)
    _script_rm(llm, tag, victim)
    c = astack.client()
    acc = c.say(f"wipe-{tag}")
    asked = _requested(c)
    c.send({"type": "command", "command": "/stop", "id": "s"})
    done = c.wait_completed(acc["seq"])
    assert done["status"] == "cancelled"
    assert victim.exists()
    row = wait_for(lambda: (r := _row(astack, asked["approval_id"]))["status"] != "pending" and r, 30, "not closed")
    assert row["status"] == "cancelled" and row["decided_via"] == "stop"
    c.close()


def test_two_deciders_at_once_one_wins(astack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    tag, victim = _victim(astack)
    _script_rm(llm, tag, victim)
    c = astack.client()
    acc = c.say(f"wipe-{tag}")
    asked = _requested(c)
    aid = asked["approval_id"]
    clients = [WsClient(astack.ws_url, c.chat_id, token=astack.token) for _ in range(6)]
    replies: list[dict[str, Any]] = []
    go = threading.Barrier(len(clients))

    def decide(i: int, cl: WsClient) -> None:
        go.wait()
        replies.append(cl.command(f"/approve {aid}" if i % 2 else f"/deny {aid}"))

    threads = [threading.Thread(target=decide, args=(i, cl)) for i, cl in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    winners = [r for r in replies if not r.get("data", {}).get("code")]
    assert len(replies) == 6 and len(winners) == 1, replies
    c.wait_completed(acc["seq"])
    final = _row(astack, aid)["status"]
    assert winners[0]["text"].lower().startswith(final)
    assert victim.exists() == (final == "denied")
    for cl in clients:
        cl.close()
    c.close()


@pytest.mark.parametrize("bad", ["", "x", "zzzzzzzzzz", "../../etc", "1' OR '1'='1", "\ud800", "a" * 5000,
                                 "0123456789 session extra", "0123456789 forever"])
def test_hostile_ids_are_refused_plainly(astack: Stack, bad: str) -> None:
    c = astack.client()
    for cmd in ("/approve", "/deny"):
        reply = c.command(f"{cmd} {bad}")
        assert reply["type"] == "command" and reply["data"].get("code") in ("usage", "not_found"), reply
    assert c.command("/info")["type"] == "command"  # the gateway still answers
    c.close()


def test_a_web_restart_during_the_wait_loses_nothing(astack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    tag, victim = _victim(astack)
    _script_rm(llm, tag, victim)
    c = astack.client()
    acc = c.say(f"wipe-{tag}")
    asked = _requested(c)
    c.close()
    astack.kill("web")
    astack.start_web()
    c2 = WsClient(astack.ws_url, c.chat_id, token=astack.token)
    listed = c2.command("/approvals")
    assert [a["approval_id"] for a in listed["data"]["approvals"] if a["status"] == "pending"] == [asked["approval_id"]]
    c2.command(f"/approve {asked['approval_id']}")
    wait_for(lambda: not victim.exists(), 60, "the approved call did not run after the web restart")
    # the paused turn kept its session lease through the wait and the restart: completed, not interrupted
    assert c2.wait_completed(acc["seq"])["status"] == "completed"
    c2.close()


def test_no_answer_in_time_denies(tmp_path: Path, fake_llm, llm) -> None:  # type: ignore[no-untyped-def]
    s = _stack(tmp_path, fake_llm.url, timeout_secs=2)
    try:
        tag, victim = _victim(s)
        _script_rm(llm, tag, victim)
        c = s.client()
        acc = c.say(f"wipe-{tag}")
        asked = _requested(c)
        decided = _seen(c, "approval_decided")
        assert decided["status"] == "expired" and decided["decided_by"] == "system"
        done = c.wait_completed(acc["seq"])
        assert done["status"] == "completed" and victim.exists()
        assert any("nobody approved this call within 2s" in r for r in _tool_results(c))
        assert "already expired" in c.command(f"/approve {asked['approval_id']}")["text"]
        c.close()
    finally:
        s.stop()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arg=st.text(max_size=80) | st.sampled_from(["0" * 10, "f" * 10 + " session", "A" * 10, "0123456789 SESSION"]),
       cmd=st.sampled_from(["/approve", "/deny"]))
def test_hostile_ids_never_decide_anything(astack: Stack, arg: str, cmd: str) -> None:
    c = _client(astack)
    reply = c.command(f"{cmd} {arg}")
    assert reply["type"] == "command" and reply["data"].get("code") in ("usage", "not_found"), reply


_clients: dict[int, WsClient] = {}


def _client(s: Stack) -> WsClient:
    if id(s) not in _clients:
        _clients[id(s)] = s.client()
    return _clients[id(s)]


def test_a_channel_nobody_can_answer_in_is_denied_at_once(astack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    tag, victim = _victim(astack)
    _script_rm(llm, tag, victim)
    made = astack.cli("apikeys", "create", f"appr-{tag}", "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["key"]
    r = HTTP.post(astack.http + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=90,
                   json={"model": "picobot", "messages": [{"role": "user", "content": f"wipe-{tag}"}]})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == f"finished {tag}"
    assert victim.exists()
    db = Database(astack.database_url)
    try:
        with db.connect() as conn:
            from sqlalchemy import text

            found = conn.execute(text("SELECT status, decided_via FROM approvals WHERE session_id LIKE 'openai_api:%'"))
            assert [tuple(row) for row in found] == [("denied", "unreachable")]
    finally:
        db.dispose()
