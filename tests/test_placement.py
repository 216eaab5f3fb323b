"""Workspaces that follow the chat (runtime/placement.py): the decision in process. Two worker hosts
that share no disk, under chaos: tests/test_chaos_two_hosts.py."""

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
from tests.stack import Stack, base_config, wait_for


class _Queue:
    """The TaskQueue seam, recording the turns and compactions sent on."""

    def __init__(self) -> None:
        self.turns: list[tuple[str, str]] = []
        self.compactions: list[tuple[str, bool, str]] = []

    def enqueue_turn(self, session_id: str, queue: str = "turns") -> None:
        self.turns.append((session_id, queue))

    def enqueue_compaction(self, session_id: str, force: bool = False, queue: str = "maintenance") -> None:
        self.compactions.append((session_id, force, queue))

    def __getattr__(self, name: str) -> Any:  # the other queue ports are not used here
        return lambda *a, **k: None


def _as_host(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    monkeypatch.setenv(placement.HOST_ENV, host)
    placement.host_id.cache_clear()
    monkeypatch.setattr(placement, "_serving", placement._UNSET)  # as a process that never said: it serves


def _not_serving(monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    """This process is a worker of `host` that does not take turns (e.g. `-Q scheduled` only)."""
    _as_host(monkeypatch, host)
    placement.serve(None)


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


def _settled(rt: Runtime) -> None:
    """The host set began HOST_TTL_SECS ago (every live host has beaten in it since)."""
    rt.redis.set("picobot:hosts:since", time.time() - placement.HOST_TTL_SECS - 1)


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
    rt.redis.set("picobot:hosts:since", time.time() - 120)  # the host set is older than that
    placement.beat(rt.redis, "alpha")
    _settled(rt)
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
    placement.beat(rt.redis, "alpha")  # alpha beats again first; beta's beat is due within 2 s
    assert placement.forwarded(rt, sid) is True
    assert rt.queue.turns == [(sid, "host.beta")] * 2 and _holder(rt, "c1").host == "beta"  # type: ignore[attr-defined]
    _settled(rt)  # a host set as old as a host's TTL without beta: beta is dead
    assert placement.forwarded(rt, sid) is False and _holder(rt, "c1").host == "alpha"


def test_a_worker_that_takes_no_turns_never_pins_a_chat_to_its_host(rt: Runtime,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _not_serving(monkeypatch, "gamma")
    sid = _session(rt, "c1")
    assert placement.route(rt, sid) == "turns" and _holder(rt, "c1") is None  # no host known: `turns` decides
    placement.beat(rt.redis, "gamma")  # its host beats, but without a load: it serves no turns
    placement.beat(rt.redis, "alpha", "t1@alpha", running=1, slots=4)
    assert placement.forwarded(rt, sid) is True
    assert rt.queue.turns == [(sid, "host.alpha")] and _holder(rt, "c1").host == "alpha"  # type: ignore[attr-defined]


def test_a_worker_that_takes_no_turns_leaves_a_dead_hosts_chat_to_one_that_does(rt: Runtime,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    sid = _session(rt, "c1")
    _as_host(monkeypatch, "beta")
    placement.forwarded(rt, sid)  # pinned to beta
    _not_serving(monkeypatch, "gamma")
    rt.redis.zadd("picobot:hosts", {"beta": time.time() - 60})
    placement.beat(rt.redis, "gamma")
    assert placement.route(rt, sid) == "turns"
    row = _holder(rt, "c1")
    assert (row.host, row.moved_from) == ("beta", None) and _notes(rt, sid) == []


def test_a_new_chat_goes_to_a_clearly_less_loaded_host(rt: Runtime) -> None:
    placement.beat(rt.redis, "alpha", "a1@x", running=7, slots=8)
    placement.beat(rt.redis, "alpha", "a2@x", running=5, slots=8)  # alpha: 12 of 16 slots busy
    placement.beat(rt.redis, "beta", "b1@y", running=2, slots=8)
    view = placement.hosts(rt.redis)
    assert view.load == {"alpha": 0.75, "beta": 0.25}
    sid = _session(rt, "c1")
    assert placement.forwarded(rt, sid) is True
    assert rt.queue.turns == [(sid, "host.beta")] and _holder(rt, "c1").host == "beta"  # type: ignore[attr-defined]
    placement.beat(rt.redis, "beta", "b1@y", running=6, slots=8)  # 0.75 - 0.625: not clearly less
    other = _session(rt, "c2")
    assert placement.forwarded(rt, other) is False and _holder(rt, "c2").host == "alpha"


def test_a_burst_of_new_chats_between_two_beats_spreads(rt: Runtime) -> None:
    placement.beat(rt.redis, "alpha", "a1@x", running=12, slots=16)  # 0.75
    placement.beat(rt.redis, "beta", "b1@y", running=2, slots=8)  # 0.25, and it will not beat again here
    sids = [_session(rt, f"c{i}") for i in range(5)]
    for sid in sids:
        placement.forwarded(rt, sid)
    # beta takes new chats while it is clearly less loaded, counting those it was given since its beat
    # (3/8, 4/8, 5/8); then alpha's 0.75 is within the margin of beta's 0.625, and alpha keeps them
    holders = [_holder(rt, f"c{i}").host for i in range(5)]
    assert holders == ["beta", "beta", "beta", "alpha", "alpha"], holders
    assert placement.hosts(rt.redis).load["beta"] > 0.5
    placement.beat(rt.redis, "beta", "b1@y", running=5, slots=8)  # its report now counts them as running
    assert placement.hosts(rt.redis).load["beta"] == 5 / 8


def test_a_dead_or_stale_host_is_not_chosen(rt: Runtime) -> None:
    placement.beat(rt.redis, "alpha", "a1@x", running=8, slots=8)
    placement.beat(rt.redis, "beta", "b1@y", running=0, slots=8)
    rt.redis.zadd("picobot:hosts", {"beta": time.time() - 60})  # beta stopped beating
    assert placement.hosts(rt.redis).load == {"alpha": 1.0}
    sid = _session(rt, "c1")
    assert placement.forwarded(rt, sid) is False and _holder(rt, "c1").host == "alpha"


def test_compaction_runs_on_the_host_holding_the_chat(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    from picobot.memory.compactor import run_background

    sid = _session(rt, "c1")
    _as_host(monkeypatch, "beta")
    placement.forwarded(rt, sid)  # pinned to beta
    placement.beat(rt.redis, "beta")
    _as_host(monkeypatch, "alpha")
    placement.beat(rt.redis, "alpha")
    assert run_background(rt, sid, force=True).status == "forwarded"  # type: ignore[arg-type]
    assert rt.queue.compactions == [(sid, True, "host.beta")]  # type: ignore[attr-defined]
    _as_host(monkeypatch, "beta")
    assert run_background(rt, sid, force=True).status != "forwarded"  # type: ignore[arg-type]


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
def test_a_scheduled_only_worker_sends_a_jobs_turn_to_a_host_that_takes_turns(tmp_path: Path, fake_llm) -> None:  # type: ignore[no-untyped-def]
    """Worker t1 (host alpha) takes turns; worker g1 (host gamma, a home of its own) takes only the
    scheduled queue, so it fires the job and gets the job's turn, which it must not pin to gamma."""
    import httpx

    stack = Stack(tmp_path, fake_llm.url)
    try:
        stack.start_web()
        stack._spawn("t1", ["worker", "-c", "4", "-n", "t1@%h", "-Q", "turns,maintenance,subagents,outbound"],
                     env={"PICOBOT_HOST_ID": "alpha"})
        gamma = tmp_path / "home-gamma"
        gamma.mkdir()
        shutil.copy(stack.home / "config.json", gamma / "config.json")
        stack._spawn("g1", ["worker", "-c", "2", "-n", "g1@%h", "-Q", "scheduled"],
                     env={"PICOBOT_HOST_ID": "gamma", "PICOBOT_HOME": str(gamma),
                          "DATABASE_URL": stack.database_url})
        stack.start_beat()
        r = stack.redis()
        wait_for(lambda: len([n for n in stack.workers_alive() if n.startswith(("t1@", "g1@"))]) == 2, 40,
                 "workers did not start")
        wait_for(lambda: "alpha" in r.zrange("picobot:hosts", 0, -1), 20, "alpha never beat")
        with httpx.Client(base_url=stack.http, headers={"Authorization": f"Bearer {stack.token}"}, timeout=20) as c:
            resp = c.post("/api/jobs", json={"id": "g.once", "kind": "agent_task",
                                             "schedule": {"type": "delay", "seconds": 1},
                                             "target": {"channel": "cli_chat", "chat_id": "job-chat"},
                                             "payload": {"prompt": "scheduled hello"}})
            assert resp.status_code == 201, resp.text
            wait_for(lambda: _host_of(stack, "job-chat"), 60, "the job's chat was never placed")
        assert _host_of(stack, "job-chat") == "alpha"
        wait_for(lambda: any("scheduled hello" in json.dumps(q["body"].get("messages", [])) for q in fake_llm.requests()),
                 60, "the job's turn never reached the model")
        loads = {k.split(" ")[0]: v.split()[1] for k, v in r.hgetall("picobot:hosts:load").items()}
        assert loads == {"alpha": "4"}  # turn slots of the one worker that takes turns; gamma takes none
    finally:
        stack.stop()
