"""Scheduler faults with real processes: FLUSHALL, beat restarts, two beats, a Redis restart,
a worker killed mid job, failing agent jobs. Each stack has its own redis-server.

Jobs fire every 2 s with a 500 ms tick; the tests poll the run table with generous deadlines
and assert what happened (one run per due time, outcomes), never how fast.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import sqlalchemy

from picobot.cli.embedded_redis import start_embedded
from tests.conftest import add_rule
from tests.stack import Stack, base_config, wait_for

pytestmark = pytest.mark.slow

INTERVAL = 2
BEAT_LOCK_SECS = 5


def _config(llm_url: str, jobs: list[dict[str, Any]], **scheduler: Any) -> dict[str, Any]:
    cfg = base_config(llm_url, 0)
    # a killed beat's lock lapses after 5 s (default 30): the take-over tests wait for it
    cfg["scheduler"] = {"tick_resolution_ms": 500, "beat_lock_secs": BEAT_LOCK_SECS, "jobs": jobs, **scheduler}
    cfg["memory"] = {"enabled": False}
    return cfg


def _tick_job(job_id: str = "tick", chat: str = "jobs") -> dict[str, Any]:
    return {"id": job_id, "kind": "outbound_message", "schedule": {"type": "interval", "seconds": INTERVAL},
            "target": {"channel": "web", "chat_id": chat}, "payload": {"text": f"tick {job_id}"}}


@pytest.fixture
def make_stack(tmp_path: Path, fake_llm) -> Iterator:  # type: ignore[no-untyped-def]
    made: list[Stack] = []

    def make(jobs: list[dict[str, Any]], **scheduler: Any) -> Stack:
        stack = Stack(tmp_path / f"s{len(made)}", fake_llm.url, config=_config(fake_llm.url, jobs, **scheduler))
        cfg = json.loads((stack.home / "config.json").read_text())
        cfg["gateway"]["port"] = stack.port
        (stack.home / "config.json").write_text(json.dumps(cfg))
        made.append(stack)
        return stack

    yield make
    for stack in made:
        stack.stop()


def _runs(stack: Stack, job_id: str) -> list[dict[str, Any]]:
    eng = sqlalchemy.create_engine(stack.database_url)
    try:
        with eng.connect() as c:
            rows = c.exec_driver_sql(
                "SELECT due_at, outcome, error, turn_id FROM job_runs WHERE job_id = ? ORDER BY due_at",
                (job_id,)).mappings().all()
            return [dict(r) for r in rows]
    except sqlalchemy.exc.OperationalError:
        return []  # the table is not there until the stack migrated
    finally:
        eng.dispose()


def _ok_count(stack: Stack, job_id: str) -> int:
    return sum(1 for r in _runs(stack, job_id) if r["outcome"] == "ok")


def _assert_once_per_due_time(stack: Stack, job_id: str) -> None:
    runs = _runs(stack, job_id)
    dues = [r["due_at"] for r in runs]
    assert len(dues) == len(set(dues)), "a due time fired twice"
    # each run's due time is a due time of the schedule (created_at + k * INTERVAL), none skipped in between
    fired = [r["due_at"] for r in runs if r["outcome"] in ("ok", "running")]
    for a, b in zip(fired, fired[1:]):
        assert (b - a) == pytest.approx(round((b - a) / INTERVAL) * INTERVAL, abs=1e-3)


def _wait_ok(stack: Stack, job_id: str, more_than: int, timeout: float = 90) -> int:
    return wait_for(lambda: _ok_count(stack, job_id) > more_than and _ok_count(stack, job_id), timeout,
                    f"job {job_id} did not fire (ok runs: {_ok_count(stack, job_id)})")


def test_flushall_while_beat_runs_brings_every_job_back(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack([_tick_job("tick-a"), _tick_job("tick-b")])
    stack.start(workers=1)
    before = {j: _wait_ok(stack, j, 1) for j in ("tick-a", "tick-b")}
    stack.redis().flushall()
    for job_id, count in before.items():
        _wait_ok(stack, job_id, count + 2)
        _assert_once_per_due_time(stack, job_id)
    assert stack.procs["beat"].poll() is None


def test_beat_killed_and_restarted_around_a_due_time_fires_once(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack([{"id": "soon", "kind": "outbound_message", "schedule": {"type": "delay", "seconds": 8},
                         "target": {"channel": "web", "chat_id": "jobs"}, "payload": {"text": "once"}}])
    stack.start(workers=1)
    eng = sqlalchemy.create_engine(stack.database_url)
    try:
        due = wait_for(lambda: _next_due(eng, "soon"), 60, "the config job was not registered")
    finally:
        eng.dispose()
    while time.time() < due - 1.5:
        time.sleep(0.1)
    stack.kill("beat")  # SIGKILL: its lock stays in Redis until it expires
    while time.time() < due + 1:
        time.sleep(0.1)
    assert _runs(stack, "soon") == []
    stack.start_beat()
    wait_for(lambda: _ok_count(stack, "soon") == 1, 120, "the job never fired after the restart")
    time.sleep(3)
    assert [r["outcome"] for r in _runs(stack, "soon")] == ["ok"]


def _next_due(eng: sqlalchemy.Engine, job_id: str) -> float | None:
    try:
        with eng.connect() as c:
            return c.exec_driver_sql("SELECT next_due_at FROM scheduled_jobs WHERE id = ?", (job_id,)).scalar()
    except sqlalchemy.exc.OperationalError:
        return None


def test_two_beats_at_once_fire_each_due_time_once(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack([_tick_job()])
    stack.start(workers=2)
    stack._spawn("beat2", ["beat"])
    count = _wait_ok(stack, "tick", 2)  # both beats up for several ticks
    stack.kill("beat")  # the second one takes over once the first one's lock expires
    _wait_ok(stack, "tick", count + 2, timeout=120)
    _assert_once_per_due_time(stack, "tick")


def test_redis_restarted_under_a_running_beat_later_jobs_still_fire(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack([_tick_job()])
    stack.start(workers=1)
    count = _wait_ok(stack, "tick", 1)
    port = int(stack.redis_url.rsplit(":", 1)[1].split("/")[0])
    stack.redis_proc.terminate()
    stack.redis_proc.wait(timeout=10)
    time.sleep(3)
    # a Redis without persistence comes back empty: a new data directory on the same port
    stack.redis_proc, _ = start_embedded(stack.cwd / "redis-restarted", port=port)
    _wait_ok(stack, "tick", count + 2, timeout=120)
    _assert_once_per_due_time(stack, "tick")
    assert stack.procs["beat"].poll() is None


def test_worker_killed_during_an_agent_job_retries_and_records_it(make_stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "slow scheduled job", {"content": "first try", "delay_ms": 8000}, {"content": "job done"})
    stack = make_stack([{"id": "agent", "kind": "agent_task", "schedule": {"type": "delay", "seconds": 3},
                         "target": {"channel": "web", "chat_id": "agent-chat"},
                         "payload": {"prompt": "slow scheduled job"}}])
    stack.start(workers=1)
    wait_for(lambda: any("slow scheduled job" in str(r["body"].get("messages", [])[-1:]) for r in llm.requests()),
             60, "the model never saw the job's prompt")
    assert [r["outcome"] for r in _runs(stack, "agent")] == ["running"]
    stack.kill("w1")
    stack.start_worker("w2")
    wait_for(lambda: [r["outcome"] for r in _runs(stack, "agent")] == ["ok"], 120, "the killed run was not retried")
    assert _runs(stack, "agent")[0]["turn_id"]


def test_failing_agent_jobs_are_recorded_and_a_silent_one_notifies_once(make_stack, llm) -> None:  # type: ignore[no-untyped-def]
    boom = {"error": {"status": 400, "message": "the model refused", "type": "invalid_request_error"}}
    add_rule(llm, "loud failure", boom, repeat=True)
    add_rule(llm, "quiet failure", boom, repeat=True)
    stack = make_stack([
        {"id": "loud", "kind": "agent_task", "schedule": {"type": "delay", "seconds": 3},
         "target": {"channel": "web", "chat_id": "fail-chat"}, "payload": {"prompt": "loud failure"}},
        {"id": "quiet", "kind": "silent_agent_task", "schedule": {"type": "delay", "seconds": 3},
         "target": {"channel": "web", "chat_id": "notice-chat"}, "payload": {"prompt": "quiet failure"}},
    ])
    stack.start(workers=1)
    for job_id in ("loud", "quiet"):
        wait_for(lambda: [r["outcome"] for r in _runs(stack, job_id)] == ["failed"], 90, f"{job_id} not recorded")
        assert _runs(stack, job_id)[0]["error"]
    time.sleep(3)  # a second notice would have arrived by now
    eng = sqlalchemy.create_engine(stack.database_url)
    try:
        with eng.connect() as c:
            notices = c.exec_driver_sql(
                "SELECT m.content FROM messages m JOIN sessions s ON s.id = m.session_id "
                "WHERE s.channel = 'web' AND s.chat_id = 'notice-chat'").scalars().all()
    finally:
        eng.dispose()
    assert len([n for n in notices if "quiet" in str(n)]) == 1


def test_a_burst_of_300_jobs_due_at_one_instant_fires_each_exactly_once(make_stack) -> None:  # type: ignore[no-untyped-def]
    """300 jobs due at one instant (the config's jobs are stored with one creation time, so 5 s after it they are
    all due at once, as 300 jobs on `0 9 * * *` are at 9:00): beat sends them as batches (picobot.scheduler.fire_batch)."""
    count = 300
    jobs = [{"id": f"burst.{i}", "kind": "outbound_message", "schedule": {"type": "delay", "seconds": 5},
             "target": {"channel": "web", "chat_id": "burst"}, "payload": {"text": f"burst {i}"}} for i in range(count)]
    stack = make_stack(jobs)
    stack.start(workers=1)

    def fired() -> list[dict[str, Any]]:
        eng = sqlalchemy.create_engine(stack.database_url)
        try:
            with eng.connect() as c:
                return [dict(r) for r in c.exec_driver_sql(
                    "SELECT job_id, due_at, outcome FROM job_runs WHERE job_id LIKE 'burst.%'").mappings()]
        except sqlalchemy.exc.OperationalError:
            return []
        finally:
            eng.dispose()

    runs = wait_for(lambda: len({r["job_id"] for r in fired()}) == count and fired(), 240,
                    "not every job of the burst fired")
    first_due = min(r["due_at"] for r in runs)
    stack.kill("beat", signal.SIGTERM)
    time.sleep(3)  # anything still queued (a duplicate) lands
    runs = [r for r in fired() if r["due_at"] == first_due]
    assert len(runs) == count and {r["job_id"] for r in runs} == {f"burst.{i}" for i in range(count)}
    assert {r["outcome"] for r in runs} == {"ok"}
    every = fired()
    assert len({(r["job_id"], r["due_at"]) for r in every}) == len(every)  # (job, due time) once each
    eng = sqlalchemy.create_engine(stack.database_url)
    try:
        with eng.connect() as c:
            texts = [json.loads(row[0]) for row in c.exec_driver_sql(
                "SELECT content FROM messages WHERE marker = 'scheduled_message'")]
    finally:
        eng.dispose()
    assert len(texts) == sum(1 for r in every if r["outcome"] == "ok")  # one message per run, none twice
    assert set(texts) == {f"burst {i}" for i in range(count)}
