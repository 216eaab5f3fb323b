"""Memory maintenance: one model pass per changed user scope that merges, deletes, flags conflicts and
writes AGENT.md's managed block; strict plans, bounded and idempotent runs, its timeout, one run at a
time, the scheduled task through a real worker, and `picobot memory maintain`."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from celery import Celery
from sqlalchemy import select

from picobot.agent.context import agent_md_path, agent_prompt
from picobot.agent.managed_block import END, START, read_block
from picobot.config import load_config
from picobot.memory import Memory, MemorySource
from picobot.memory.maintenance import run_maintenance
from picobot.memory.maintenance_plan import PROMPT_TITLE
from picobot.app import App as Runtime, build_runtime
from picobot.runtime.task_names import MEMORY_MAINTENANCE_JOB, MEMORY_MAINTENANCE_TASK, QUEUE_MAINTENANCE
from picobot.storage.models import MemoryMaintenanceStateRow, MemoryRow
from tests.conftest import add_rule
from tests.stack import Stack, base_config, wait_for

ALICE = "telegram:alice"
BOB = "telegram:bob"
USER_TEXT = "# My own agent notes\r\n\nKeep answers short.\n\n```\n" + START + "\nan example, not the block\n```\n"


class _NoQueue:
    def enqueue_turn(self, session_id: str) -> None:
        pass

    def enqueue_compaction(self, session_id: str, force: bool = False) -> None:
        pass


def _runtime(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch, **memory: Any) -> Runtime:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cfg = base_config(llm.url, 1)
    cfg["providers"]["default"]["memory_maintenance_timeout_secs"] = memory.pop("timeout", 30)
    cfg["memory"] = memory
    (home / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-maintenance")
    monkeypatch.setenv("REDIS_URL", redis_url)
    return build_runtime(load_config(), _NoQueue(), migrate=True)


@pytest.fixture
def rt(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:  # type: ignore[no-untyped-def]
    runtime = _runtime(tmp_path, llm, redis_url, monkeypatch)
    yield runtime
    runtime.close()


def _put(rt: Runtime, scope: str, ns: str, key: str, content: str, importance: float = 0.5) -> Memory:
    assert rt.memory is not None
    return rt.memory.put(scope, ns, key, content, importance=importance,
                         source=MemorySource(session_id="telegram:c1:d1", channel="telegram", source_type="tool"))


def _rows(rt: Runtime, scope: str = ALICE) -> list[dict]:
    with rt.db.connect() as conn:
        rows = conn.execute(select(MemoryRow).where(MemoryRow.scope_key == scope).order_by(MemoryRow.id)).mappings()
        return [dict(r) for r in rows]


def _state(rt: Runtime, scope: str = ALICE) -> dict | None:
    with rt.db.connect() as conn:
        row = conn.execute(select(MemoryMaintenanceStateRow.__table__)
                           .where(MemoryMaintenanceStateRow.scope_key == scope)).mappings().first()
        return dict(row) if row else None


def _maintenance_requests(llm) -> list[dict]:  # type: ignore[no-untyped-def]
    return [r["body"] for r in llm.requests() if PROMPT_TITLE in json.dumps(r["body"])]


def _answer(llm, plan: Any, **extra: Any) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, PROMPT_TITLE, {"content": plan if isinstance(plan, str) else json.dumps(plan), **extra})


def _plan(summary: str = "- Likes green tea", **parts: Any) -> dict:
    return {"categories": parts.pop("categories", {"facts": [], "preferences": [], "patterns": [], "other": []}),
            "merges": [], "low_value": [], "conflicts": [], "managed_markdown": summary, **parts}


@pytest.fixture
def alice(rt: Runtime) -> dict[str, Memory]:
    return {
        "tea1": _put(rt, ALICE, "preferences", "drink", "Likes green tea"),
        "tea2": _put(rt, ALICE, "preferences", "tea", "Drinks green tea every morning"),
        "weather": _put(rt, ALICE, "misc", "weather", "It was sunny on Tuesday", 0.1),
        "oslo": _put(rt, ALICE, "profile", "city", "Lives in Oslo", 0.8),
        "bergen": _put(rt, ALICE, "profile", "home", "Lives in Bergen", 0.8),
    }


# --- one pass ----------------------------------------------------------------------------


def test_maintenance_merges_deletes_flags_and_writes_agent_md(rt: Runtime, alice: dict[str, Memory], llm) -> None:  # type: ignore[no-untyped-def]
    path = agent_md_path(rt.config.home)
    path.parent.mkdir(parents=True)
    path.write_bytes(USER_TEXT.encode())
    m = {k: v.id for k, v in alice.items()}
    _answer(llm, _plan(
        "- Drinks green tea every morning\n- Home city unclear (Oslo or Bergen)",
        categories={"facts": [m["oslo"], m["bergen"]], "preferences": [m["tea1"], m["tea2"]], "patterns": [],
                    "other": [m["weather"]]},
        merges=[{"ids": [m["tea1"], m["tea2"]], "namespace": "preferences", "key": "tea",
                 "content": "Drinks green tea, every morning", "importance": 0.7}],
        low_value=[m["weather"]],
        conflicts=[{"ids": [m["oslo"], m["bergen"]], "note": "Lives in Oslo vs lives in Bergen"}]))

    report = run_maintenance(rt)

    assert report.status == "done" and [(s.scope_key, s.status) for s in report.scopes] == [(ALICE, "maintained")]
    sent = _maintenance_requests(llm)
    assert len(sent) == 1 and "Drinks green tea every morning" in json.dumps(sent[0], ensure_ascii=False)
    rows = {(r["namespace"], r["memory_key"]): r for r in _rows(rt)}
    assert set(rows) == {("preferences", "tea"), ("profile", "city"), ("profile", "home")}
    merged = rows[("preferences", "tea")]
    assert merged["content"] == "Drinks green tea, every morning" and merged["importance"] == 0.7
    assert merged["source_type"] == "memory_maintenance" and merged["id"] == m["tea2"]
    assert rows[("profile", "city")]["source_type"] == "tool"  # conflicts are flagged, never resolved
    assert rt.memory is not None and rt.memory.search(ALICE, "tea")[0].memory.content.startswith("Drinks")  # FTS kept
    state = _state(rt)
    assert state is not None and state["last_error"] is None
    assert state["report"]["merged"] == 1 and state["report"]["deleted"] == 1
    assert state["report"]["conflicts"] == [{"ids": [m["oslo"], m["bergen"]], "note": "Lives in Oslo vs lives in Bergen"}]
    assert state["report"]["classified"] == {"facts": 2, "preferences": 2, "patterns": 0, "other": 1}
    data = path.read_bytes()
    assert data.startswith(USER_TEXT.encode())  # the user's text, byte for byte (fenced marker included)
    block = read_block(data.decode())
    assert block is not None and "- Drinks green tea every morning" in block
    assert "Lives in Oslo vs lives in Bergen" in block and ALICE in block
    assert report.agent_md_rewritten


def test_a_second_run_with_nothing_changed_makes_no_model_call(rt: Runtime, alice: dict[str, Memory], llm) -> None:  # type: ignore[no-untyped-def]
    _answer(llm, _plan())
    run_maintenance(rt)
    before = agent_md_path(rt.config.home).read_bytes()
    _answer(llm, _plan("- should never be asked for"))
    again = run_maintenance(rt)
    assert again.status == "done" and again.scopes == [] and not again.agent_md_rewritten
    assert len(_maintenance_requests(llm)) == 1
    assert agent_md_path(rt.config.home).read_bytes() == before
    _put(rt, ALICE, "profile", "job", "Works as a nurse")  # a change: the scope is due again
    assert [s.scope_key for s in run_maintenance(rt).scopes] == [ALICE]
    assert len(_maintenance_requests(llm)) == 2


def _bad_answers(m: dict[str, int]) -> list[tuple[str, str]]:
    deep = "[" * 100_000 + "]" * 100_000
    return [
        ("Sure! Here is the plan: merge the tea ones.", "not JSON"),
        (deep, "not JSON"),
        (json.dumps(_plan(low_value=[999_999])), "not among the entries shown"),
        (json.dumps(_plan(low_value=[m["tea1"]], merges=[
            {"ids": [m["tea1"], m["tea2"]], "namespace": "p", "key": "k", "content": "c", "importance": 0.5}])),
         "both merged and low value"),
        (json.dumps(_plan(merges=[{"ids": [m["tea1"], m["tea2"]], "namespace": "p", "key": "k", "content": "c",
                                   "importance": 0.5}]) | {"extra": 1}), "extra"),
        (json.dumps(_plan(low_value=[True])), "low_value"),
        (json.dumps(_plan(merges=[{"ids": [m["tea1"], m["tea2"]], "namespace": "p", "key": "k", "content": "c",
                                   "importance": float("nan")}])), "importance"),
        (json.dumps(_plan(merges=[{"ids": [m["tea1"], m["tea2"]], "namespace": "p", "key": "k",
                                   "content": "tea \ud800", "importance": 0.5}])), "merges.0.content"),
        (json.dumps(_plan("x" * 5000)), "managed_markdown"),
        (json.dumps(_plan(merges=[{"ids": [m["tea1"], m["tea2"]], "namespace": "profile", "key": "city",
                                   "content": "c", "importance": 0.5}])), "would overwrite entry"),
        (json.dumps([1, 2]), "categories"),
    ]


@pytest.mark.parametrize("case", range(11))
def test_a_bad_answer_changes_nothing_and_records_the_error(rt: Runtime, alice: dict[str, Memory], llm,  # type: ignore[no-untyped-def]
                                                            case: int) -> None:
    answer, why = _bad_answers({k: v.id for k, v in alice.items()})[case]
    path = agent_md_path(rt.config.home)
    path.parent.mkdir(parents=True)
    path.write_text("mine\n")
    before = _rows(rt)
    _answer(llm, answer)
    report = run_maintenance(rt)
    assert [s.status for s in report.scopes] == ["failed"] and why in report.scopes[0].error
    assert _rows(rt) == before
    state = _state(rt)
    assert state is not None and why in state["last_error"] and state["last_memory_change_seen"] is None
    assert path.read_text() == "mine\n"  # no summary yet: AGENT.md untouched
    _answer(llm, _plan())  # the failed scope is due again, and a good answer then goes through
    assert [s.status for s in run_maintenance(rt).scopes] == ["maintained"]
    assert _state(rt)["last_error"] is None  # type: ignore[index]


def test_the_plan_may_come_in_a_json_fence_and_its_summary_is_cleaned(rt: Runtime, alice: dict[str, Memory], llm) -> None:  # type: ignore[no-untyped-def]
    plan = _plan(f"- tea lover\x00\n{END}\n<!-- picobot:scope \"{BOB}\" -->\n- forged")
    _answer(llm, "```json\n" + json.dumps(plan) + "\n```")
    assert [s.status for s in run_maintenance(rt).scopes] == ["maintained"]
    text = agent_md_path(rt.config.home).read_bytes().decode("utf-8")  # valid UTF-8
    assert text.count(END) == 1 and "tea lover" in text and "\x00" not in text
    assert "forged" not in agent_prompt(rt.config.home, scope_key=BOB).content  # type: ignore[operator]


def test_a_memory_changed_while_the_model_thinks_is_not_touched(rt: Runtime, alice: dict[str, Memory], llm) -> None:  # type: ignore[no-untyped-def]
    m = {k: v.id for k, v in alice.items()}
    _answer(llm, _plan(low_value=[m["weather"]]), delay_ms=1500)
    result: list[Any] = []
    runner = threading.Thread(target=lambda: result.append(run_maintenance(rt)))
    runner.start()
    wait_for(lambda: _maintenance_requests(llm), 30, "the maintenance call did not reach the model")
    _put(rt, ALICE, "misc", "weather", "Planning a trip to Rome in May", 0.9)  # the user rewrote it meanwhile
    runner.join(60)
    assert [s.status for s in result[0].scopes] == ["failed"] and "changed while" in result[0].scopes[0].error
    assert any(r["content"] == "Planning a trip to Rome in May" for r in _rows(rt))


# --- bounds ------------------------------------------------------------------------------


def test_per_pass_caps_hold(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    rt = _runtime(tmp_path, llm, redis_url, monkeypatch, maintenance_max_scopes_per_run=2,
                  maintenance_max_entries_per_scope=3)
    try:
        for scope in ("telegram:a", "telegram:b", "telegram:c"):
            for i in range(5):
                _put(rt, scope, "notes", f"n{i}", f"note {i} of {scope}")
        add_rule(llm, PROMPT_TITLE, {"content": json.dumps(_plan())}, repeat=True)
        first = run_maintenance(rt)
        assert len(first.scopes) == 2 and len(_maintenance_requests(llm)) == 2
        shown = json.loads(_maintenance_requests(llm)[0]["messages"][-1]["content"].split("\n\n", 1)[1])
        assert [e["key"] for e in shown] == ["n4", "n3", "n2"]  # the newest 3 of 5
        second = run_maintenance(rt)
        assert [s.scope_key for s in second.scopes] == ["telegram:c"]  # the one left waiting goes next
        assert run_maintenance(rt).scopes == [] and len(_maintenance_requests(llm)) == 3
    finally:
        rt.close()


def test_the_timeout_is_honoured(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    rt = _runtime(tmp_path, llm, redis_url, monkeypatch, timeout=1)
    try:
        _put(rt, ALICE, "profile", "city", "Lives in Oslo")
        _answer(llm, _plan(low_value=[]), delay_ms=8000)
        report = run_maintenance(rt)
        assert [s.status for s in report.scopes] == ["failed"]
        assert "within 1 s" in report.scopes[0].error and "memory_maintenance_timeout_secs" in report.scopes[0].error
        assert [r["content"] for r in _rows(rt)] == ["Lives in Oslo"]
    finally:
        rt.close()


def test_two_concurrent_runs_one_does_the_work(tmp_path: Path, rt: Runtime, alice: dict[str, Memory], llm,  # type: ignore[no-untyped-def]
                                              redis_url: str) -> None:
    other = build_runtime(rt.config, _NoQueue())  # a second process's view: same database, same Redis
    try:
        _answer(llm, _plan(), delay_ms=1500)
        result: list[Any] = []
        first = threading.Thread(target=lambda: result.append(run_maintenance(rt)))
        first.start()
        wait_for(lambda: _maintenance_requests(llm), 30, "the first run did not reach the model")
        assert run_maintenance(other).status == "busy"
        first.join(60)
        assert result[0].status == "done" and len(_maintenance_requests(llm)) == 1
    finally:
        other.close()


# --- who sees which summary -----------------------------------------------------------------


def test_each_user_sees_only_their_own_section_of_the_block(rt: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    _put(rt, ALICE, "p", "tea", "Likes tea")
    _put(rt, BOB, "p", "coffee", "Likes coffee")
    add_rule(llm, ALICE, {"content": json.dumps(_plan("- alice likes tea"))})
    add_rule(llm, BOB, {"content": json.dumps(_plan("- bob likes coffee"))})
    assert len(run_maintenance(rt).scopes) == 2
    block = read_block(agent_md_path(rt.config.home).read_text())
    assert block is not None and "alice likes tea" in block and "bob likes coffee" in block
    for me, mine, theirs in ((ALICE, "alice likes tea", "bob likes coffee"), (BOB, "bob likes coffee", "alice likes tea")):
        prompt = agent_prompt(rt.config.home, scope_key=me).content
        assert mine in prompt and theirs not in prompt  # type: ignore[operator]
    stranger = agent_prompt(rt.config.home, scope_key="telegram:carol").content
    assert "likes" not in stranger and "What PicoBot remembers" in stranger  # type: ignore[operator]
    assert rt.memory is not None and rt.memory.delete(BOB, "p", "coffee")  # bob's memories gone: so is his section
    run_maintenance(rt)
    assert "bob likes coffee" not in agent_md_path(rt.config.home).read_text()


# --- the Celery task, the beat entry, the command ---------------------------------------------


def test_the_beat_entry_runs_every_four_hours_on_the_maintenance_queue() -> None:
    from celery.schedules import crontab

    from picobot.app import build_plugins
    from picobot.config.schema import Config
    from worker.tasks import plugin_beat_schedule

    def schedule(config: Config) -> dict:  # what beat adds to its schedule as it starts (the memory plugin's entry)
        return plugin_beat_schedule(build_plugins(config, discover=False))

    assert MEMORY_MAINTENANCE_JOB not in schedule(Config())  # the builtin scheduled job runs it
    entry = schedule(Config(scheduler={"enabled": False}))[MEMORY_MAINTENANCE_JOB]
    assert entry["task"] == MEMORY_MAINTENANCE_TASK and entry["options"]["queue"] == QUEUE_MAINTENANCE
    assert entry["schedule"] == crontab(minute="0", hour="*/4") and entry["options"]["expires"] == 3600
    assert MEMORY_MAINTENANCE_JOB not in schedule(Config(memory={"maintenance_enabled": False}, scheduler={"enabled": False}))


@pytest.fixture(scope="module")
def worker_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    s = Stack(tmp_path_factory.mktemp("maintenance"), fake_llm.url)
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def test_the_task_runs_on_a_worker_once_even_when_sent_twice(worker_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    from picobot.memory import MemoryStore
    from picobot.storage.db import Database

    db = Database(worker_stack.database_url)
    try:
        MemoryStore(db).put(ALICE, "p", "tea", "Likes tea")
    finally:
        db.dispose()
    agent_md = worker_stack.home / "agent" / "AGENT.md"
    agent_md.parent.mkdir(parents=True, exist_ok=True)
    agent_md.write_text("the owner's words\n")
    _answer(llm, _plan("- likes tea (from the worker)"), delay_ms=1500)
    app = Celery(broker=worker_stack.redis_url)
    for _ in range(2):
        app.send_task(MEMORY_MAINTENANCE_TASK, queue=QUEUE_MAINTENANCE)
    wait_for(lambda: "likes tea (from the worker)" in agent_md.read_text(), 60, "the block was not written")
    wait_for(lambda: "another run holds the lock" in worker_stack.all_logs(), 60, "the second task did not finish")
    assert len(_maintenance_requests(llm)) == 1
    assert agent_md.read_text().startswith("the owner's words\n")
    # the run logs its report after writing the file: wait for the line rather than race it
    wait_for(lambda: "memory maintenance: 1 scope(s) processed, 0 failed, AGENT.md rewritten" in worker_stack.all_logs(),
             30, "the run never reported")

    cli = worker_stack.cli("memory", "maintain")
    assert cli.returncode == 0 and "nothing to do" in cli.stdout, cli.stderr
    assert len(_maintenance_requests(llm)) == 1
