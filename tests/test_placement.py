"""Workspaces that follow the chat (runtime/placement.py): the decision in process, then two worker
hosts that share no disk (own homes and workspaces, one PostgreSQL, one Redis), one of them killed."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import text

from picobot.app import build_runtime
from picobot.config import load_config
from picobot.errors import ConfigError
from picobot.runtime import placement
from picobot.runtime.pinned_here import PinnedHere
from picobot.runtime.services import Runtime
from picobot.storage import chat_hosts, sessions
from tests.conftest import add_rule
from tests.stack import Stack, base_config, wait_for


class _Queue:
    """The TaskQueue seam, recording the turns sent on."""

    def __init__(self) -> None:
        self.turns: list[tuple[str, str]] = []

    def enqueue_turn(self, session_id: str, queue: str = "turns") -> None:
        self.turns.append((session_id, queue))

    def __getattr__(self, name: str) -> Any:  # the other queue ports are not used here
        return lambda *a, **k: None


def _as_host(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.setenv(placement.HOST_ENV, host)
    placement.host_id.cache_clear()


@pytest.fixture
def rt(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps(base_config(llm.url, 1)))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-placement")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    _as_host(monkeypatch, "alpha")
    # this process plays several hosts over fresh databases: no memory of an earlier test's sessions
    monkeypatch.setattr(placement, "_here", PinnedHere(fresh_secs=placement.HOST_TTL_SECS / 2))
    runtime = build_runtime(load_config(), _Queue(), migrate=True)  # type: ignore[arg-type]
    yield runtime
    placement.host_id.cache_clear()


def _session(rt: Runtime, chat_id: str) -> str:
    with rt.db.write() as s:
        return sessions.get_or_create_current(s, "cli_chat", chat_id).id


def _holder(rt: Runtime, chat_id: str) -> Any:
    with rt.db.connect() as conn:
        return chat_hosts.get(conn, "cli_chat", chat_id)


def _notes(rt: Runtime, session_id: str) -> list[str]:
    with rt.db.connect() as conn:
        rows = conn.execute(text("SELECT content FROM messages WHERE session_id = :s AND marker = 'host_moved'"),
                            {"s": session_id}).all()
    return [r[0] for r in rows]


def test_first_turn_pins_the_chat_to_the_host_that_runs_it(rt: Runtime) -> None:
    sid = _session(rt, "c1")
    assert placement.forwarded(rt, sid) is False
    assert _holder(rt, "c1").host == "alpha"
    assert placement.forwarded(rt, sid) is False and rt.queue.turns == []  # type: ignore[attr-defined]
    other = _session(rt, "c2")
    assert placement.forwarded(rt, other) is False and _holder(rt, "c2").host == "alpha"


def test_a_chat_found_here_skips_the_lookup_while_this_host_beats(rt: Runtime) -> None:
    sid = _session(rt, "c1")
    placement.beat(rt.redis, "alpha")
    assert placement.forwarded(rt, sid) is False and _holder(rt, "c1").host == "alpha"
    with rt.db.begin() as conn:  # were route() asked again, it would pin the chat again
        conn.execute(text("DELETE FROM chat_hosts"))
    assert placement.forwarded(rt, sid) is False and _holder(rt, "c1") is None
    other = _session(rt, "c2")  # another session is looked up (and pinned)
    assert placement.forwarded(rt, other) is False and _holder(rt, "c2").host == "alpha"


def test_a_turn_of_a_chat_held_by_a_live_host_is_sent_to_that_host(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = _session(rt, "c1")
    _as_host(monkeypatch, "beta")
    assert placement.forwarded(rt, sid) is False  # beta's worker took the chat's first turn
    _as_host(monkeypatch, "alpha")
    placement.beat(rt.redis, "alpha")
    placement.beat(rt.redis, "beta")
    assert placement.forwarded(rt, sid) is True
    assert rt.queue.turns == [(sid, "host.beta")]  # type: ignore[attr-defined]
    assert _holder(rt, "c1").host == "beta" and _notes(rt, sid) == []


def test_a_chat_of_a_dead_host_moves_here_and_the_agent_is_told(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = _session(rt, "c1")
    _as_host(monkeypatch, "beta")
    placement.forwarded(rt, sid)
    _as_host(monkeypatch, "alpha")
    rt.redis.zadd("picobot:hosts", {"beta": time.time() - 60})  # its last beat, a minute ago
    placement.beat(rt.redis, "alpha")
    assert placement.forwarded(rt, sid) is False and rt.queue.turns == []  # type: ignore[attr-defined]
    row = _holder(rt, "c1")
    assert (row.host, row.moved_from) == ("alpha", "beta") and row.moved_at
    [note] = _notes(rt, sid)
    assert "beta" in note and "not reachable" in note
    info = placement.where(rt, "cli_chat", "c1")
    assert info is not None and info["moved_from"] == "beta" and info["alive"] is True


def test_a_flushed_host_set_moves_nothing(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = _session(rt, "c1")
    _as_host(monkeypatch, "beta")
    placement.forwarded(rt, sid)
    _as_host(monkeypatch, "alpha")
    rt.redis.flushall()  # no host has beaten since: this one cannot judge beta dead
    assert placement.forwarded(rt, sid) is True
    assert rt.queue.turns == [(sid, "host.beta")] and _holder(rt, "c1").host == "beta"  # type: ignore[attr-defined]


def test_shared_workspace_storage_turns_placement_off(tmp_path: Path, llm, redis_url: str,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shared = tmp_path / "shared"
    cfg = base_config(llm.url, 1)
    cfg["tools"] = {"workspace_storage": str(shared)}
    (home / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-placement")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    config = load_config()
    assert config.workspace_path() == shared and not placement.enabled(config)
    runtime = build_runtime(config, _Queue(), migrate=True)  # type: ignore[arg-type]
    sid = _session(runtime, "c1")
    assert placement.forwarded(runtime, sid) is False and _holder(runtime, "c1") is None


@pytest.mark.parametrize("tools, why", [
    ({"workspace_storage": "relative/dir"}, "absolute"),
    ({"workspace_storage": ""}, "absolute path"),
    ({"workspace_storage": 7}, "string"),
    ({"workspace_storage": "/mnt/x", "workspace": "/srv/y"}, "not both"),
])
def test_workspace_storage_config_errors_name_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      tools: dict, why: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"tools": tools}))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    with pytest.raises(ConfigError) as err:
        load_config()
    assert "tools" in str(err.value) and why in str(err.value)


def test_host_ids_become_safe_queue_names(monkeypatch: pytest.MonkeyPatch) -> None:
    _as_host(monkeypatch, "rack 4/node:7é")
    try:
        assert placement.host_id() == "rack_4_node_7_" and placement.host_queue("a") == "host.a"
    finally:
        placement.host_id.cache_clear()


# --- two worker hosts that share no disk -------------------------------------------------------


@pytest.fixture
def two_hosts(tmp_path: Path, fake_llm, pg_url: str) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    """web + worker `a1` (host alpha, the stack's home) + worker `b1` (host beta, a home of its own)."""
    stack = Stack(tmp_path, fake_llm.url, database_url=pg_url)
    cfg = json.loads((stack.home / "config.json").read_text())
    cfg["gateway"]["turn_lease_secs"] = 4
    homes = {}
    for host in ("alpha", "beta"):
        home = tmp_path / f"home-{host}"
        home.mkdir()
        (home / "config.json").write_text(json.dumps({**cfg, "tools": {"workspace": str(tmp_path / f"ws-{host}")}}))
        homes[host] = home
    shutil.copy(homes["alpha"] / "config.json", stack.home / "config.json")  # web and beat read it too
    stack.start_web()
    stack.start_worker("a1", env={"PICOBOT_HOST_ID": "alpha", "PICOBOT_HOME": str(homes["alpha"])})
    stack.start_worker("b1", env={"PICOBOT_HOST_ID": "beta", "PICOBOT_HOME": str(homes["beta"])})
    stack.start_beat()
    wait_for(lambda: {"alpha", "beta"} <= set(stack.redis().zrange("picobot:hosts", 0, -1)), 20, "hosts never beat")
    try:
        yield stack
    finally:
        stack.stop()


def _host_of(stack: Stack, chat_id: str) -> str | None:
    from picobot.storage.db import Database

    db = Database(stack.database_url)
    try:
        with db.connect() as conn:
            row = chat_hosts.get(conn, "cli_chat", chat_id)
        return None if row is None else str(row.host)
    finally:
        db.dispose()


@pytest.mark.slow
@pytest.mark.postgres
def test_files_written_in_one_turn_are_found_in_later_turns_on_either_host(two_hosts: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    chats = [two_hosts.client(f"chat-{i}") for i in range(6)]
    for i, c in enumerate(chats):
        add_rule(llm, f"save-{i}", {"tool_calls": [{"name": "write", "arguments": {"path": f"note-{i}.txt",
                                                                                   "content": f"secret {i}"}}]},
                 {"content": f"saved {i}"})
        add_rule(llm, f"load-{i}", {"tool_calls": [{"name": "read", "arguments": {"path": f"note-{i}.txt"}}]},
                 {"content": f"loaded {i}"}, repeat=True)
    accepted = [c.say(f"save-{i}") for i, c in enumerate(chats)]
    for c, acc in zip(chats, accepted):
        assert c.wait_completed(acc["seq"], timeout=60)["status"] == "completed"
    holders = {i: _host_of(two_hosts, f"chat-{i}") for i in range(6)}
    assert set(holders.values()) <= {"alpha", "beta"} and None not in holders.values()
    for _ in range(3):  # later turns arrive on whichever worker takes them
        accepted = [c.say(f"load-{i}") for i, c in enumerate(chats)]
        for c, acc in zip(chats, accepted):
            assert c.wait_completed(acc["seq"], timeout=60)["status"] == "completed"
    after_read = [r["body"]["messages"] for r in llm.requests()
                  if r["body"].get("messages") and r["body"]["messages"][-1].get("role") == "tool"
                  and any(str(m.get("content")).startswith("load-") for m in r["body"]["messages"][-3:])]
    assert len(after_read) == 18, len(after_read)
    for msgs in after_read:  # each read found the file its chat wrote, whichever worker took the turn
        asked = next(str(m["content"]) for m in reversed(msgs) if m.get("role") == "user")
        assert f"secret {asked.removeprefix('load-')}" in str(msgs[-1]["content"]), msgs[-1]
    assert {i: _host_of(two_hosts, f"chat-{i}") for i in range(6)} == holders  # nothing moved


@pytest.mark.slow
@pytest.mark.postgres
def test_a_host_killed_mid_turn_moves_its_chat_and_says_so(two_hosts: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    c = two_hosts.client("mover")
    add_rule(llm, "first words", {"content": "hello"})
    assert c.wait_completed(c.say("first words")["seq"])["status"] == "completed"
    holder = _host_of(two_hosts, "mover")
    survivor = {"alpha": "beta", "beta": "alpha"}[holder]
    add_rule(llm, "slow one", {"content": "never seen", "delay_ms": 8000}, {"content": "answered after the move"})
    acc = c.say("slow one")
    wait_for(lambda: any("slow one" in json.dumps(r["body"].get("messages", [])[-1:]) for r in llm.requests()), 30,
             "the model never saw the turn")
    two_hosts.kill({"alpha": "a1", "beta": "b1"}[holder])  # kill -9 the holding host's only worker
    done = c.wait_completed(acc["seq"], timeout=90)
    assert done["status"] == "completed" and done["final_text"] == "answered after the move"
    assert _host_of(two_hosts, "mover") == survivor
    last = [r for r in llm.requests() if "slow one" in json.dumps(r["body"].get("messages", []))][-1]
    told = [m for m in last["body"]["messages"] if m.get("role") == "system" and "not reachable" in str(m.get("content"))]
    assert told and holder in str(told[0]["content"])  # the agent knows the old files are gone
    info = c.command("/info --json")["data"]["worker_host"]
    assert (info["host"], info["moved_from"]) == (survivor, holder)
    history = c.command("/info")["text"]
    assert f"moved from {holder}" in history
