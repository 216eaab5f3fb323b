"""Workspaces that follow the chat (runtime/placement.py): the decision in process. Two worker hosts
that share no disk, under chaos: tests/test_chaos_two_hosts.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import text

from picobot.app import build_runtime
from picobot.config import load_config
from picobot.errors import ConfigError
from picobot.runtime import placement
from picobot.runtime.services import Runtime
from picobot.storage import chat_hosts, sessions
from tests.stack import base_config


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
    rt.redis.set("picobot:hosts:since", time.time() - 120)  # the host set is older than that
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


def test_the_first_host_to_beat_after_a_flush_does_not_judge_the_others_dead(rt: Runtime,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    sid = _session(rt, "c1")
    _as_host(monkeypatch, "beta")
    placement.forwarded(rt, sid)
    _as_host(monkeypatch, "alpha")
    placement.beat(rt.redis, "alpha")
    placement.beat(rt.redis, "beta")
    rt.redis.flushall()
    placement.beat(rt.redis, "alpha")  # alpha beats again first; beta's next beat is up to a beat interval away
    assert placement.forwarded(rt, sid) is True
    assert rt.queue.turns == [(sid, "host.beta")] and _holder(rt, "c1").host == "beta"  # type: ignore[attr-defined]
    assert _notes(rt, sid) == []


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


# Two worker hosts that share no disk (files found in later turns whichever worker takes them, a
# host killed mid-turn): tests/test_chaos_two_hosts.py, on SQLite and PostgreSQL.
