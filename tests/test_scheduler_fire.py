"""Scheduler runtime, in process: redbeat entries from SQL, firing exactly once, misfires, the kinds.

A real SQLite database and a private redis-server; the task queue records what would be sent
(turns are drained here, by the real turn runner, against the fake LLM).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import select, update

from picobot.config import load_config
from picobot.app import App as Runtime, build_runtime
from picobot.runtime.task_names import JOB_FIRE_TASK, QUEUE_SCHEDULED
from picobot.runtime.turn_runner import drain_session
from picobot.scheduler import redbeat_entries as entries
from picobot.scheduler.fire import fire, input_id, parse_input_id
from picobot.scheduler.manage import Actor, JobService
from picobot.scheduler.sync import LATE_OK_SECS, push_job, rebuild
from picobot.storage import jobs as store
from picobot.storage import messages, sessions
from picobot.storage.models import InboundRow, SessionRow
from tests.conftest import add_rule
from tests.stack import base_config

OWNER = Actor(channel="web", chat_id="owner", owner=True)


class _Queue:
    """The TaskQueue seam, recording instead of sending (the test drains turns itself)."""

    def __init__(self) -> None:
        self.turns: list[tuple[str, str]] = []
        self.jobs: list[tuple[str, float | None]] = []

    def enqueue_turn(self, session_id: str, queue: str = "turns") -> None:
        self.turns.append((session_id, queue))

    def enqueue_compaction(self, session_id: str, force: bool = False) -> None:
        pass

    def enqueue_subagent(self, run_id: str) -> None:
        pass

    def enqueue_job(self, job_id: str, due_at: float | None) -> None:
        self.jobs.append((job_id, due_at))

    def enqueue_delivery(self, channel: str, chat_id: str, countdown: float = 0) -> None:
        pass

    def enqueue_channel_event(self, event_id: int) -> None:
        pass


def _runtime(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch, **scheduler: Any) -> Runtime:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    cfg = base_config(llm.url, 1, session_ttl_secs=3600)
    cfg["scheduler"] = {"tick_resolution_ms": 500, **scheduler}
    cfg["memory"] = {"enabled": False}
    (home / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-scheduler")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return build_runtime(load_config(), _Queue(), migrate=True)


@pytest.fixture
def rt(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:  # type: ignore[no-untyped-def]
    runtime = _runtime(tmp_path, llm, redis_url, monkeypatch)
    yield runtime
    runtime.close()


def _put(rt: Runtime, job_id: str, kind: str = "outbound_message", schedule: dict | None = None,
         chat: str = "c1", **payload: Any) -> dict:
    data: dict[str, Any] = {"id": job_id, "kind": kind, "schedule": schedule or {"type": "interval", "seconds": 60},
                            "payload": payload or {"text": f"hello from {job_id}"}}
    if kind != "internal_event":
        data["target"] = {"channel": "web", "chat_id": chat}
    return JobService(rt).put(OWNER, data)


def _job(rt: Runtime, job_id: str) -> Any:
    from picobot.scheduler.fire import job_view

    with rt.db.connect() as conn:
        return job_view(store.get(conn, job_id))


def _runs(rt: Runtime, job_id: str) -> list[dict]:
    return JobService(rt).get(OWNER, job_id, runs=500)["runs"]


def _chat_texts(rt: Runtime, channel: str, chat_id: str) -> list[str]:
    with rt.db.read() as s:
        row = sessions.current(s, channel, chat_id)
        return [] if row is None else [str(m.content) for m in messages.load_rows(s, row.id)]


def _backdate(rt: Runtime, job_id: str, due: float, created_at: float) -> None:
    """As if the job was created at `created_at` and nothing fired since `due` (beat was down)."""
    with rt.db.begin() as conn:
        conn.execute(update(store.JOBS).where(store.JOBS.c.id == job_id).values(created_at=created_at))
        store.set_next_due(conn, job_id, due)


# --- the redbeat entry ---------------------------------------------------------------------------


def test_an_entry_is_what_redbeat_itself_reads_and_beat_waits_for_its_exact_due_time(rt: Runtime) -> None:
    from redbeat.schedulers import RedBeatSchedulerEntry

    from worker.beat import PicoBeatScheduler
    from worker.celery_app import make_celery

    _put(rt, "j.entry")
    due = float(_job(rt, "j.entry").next_due_at)
    from redbeat.schedulers import ensure_conf

    app = make_celery(rt.config)
    assert ensure_conf(app).schedule_key == entries.SCHEDULE_KEY
    entry = RedBeatSchedulerEntry.from_key(entries.entry_key("j.entry"), app=app)
    assert entry.task == JOB_FIRE_TASK and entry.args == ["j.entry", due]
    assert entry.options["queue"] == QUEUE_SCHEDULED
    assert rt.redis.zscore(entries.SCHEDULE_KEY, entries.entry_key("j.entry")) == pytest.approx(due)
    # redbeat's own rrule would say "due" a fraction of a second early; beat goes by the due time
    beat = PicoBeatScheduler.__new__(PicoBeatScheduler)
    beat.app = app
    is_due, wait = beat._job_due(entry)
    assert not is_due and 0 < wait <= 61


# --- firing exactly once -------------------------------------------------------------------------


def test_a_due_time_fires_once_and_the_schedule_moves_on(rt: Runtime) -> None:
    _put(rt, "j.once")
    due = float(_job(rt, "j.once").next_due_at)
    assert fire(rt, "j.once", due) == "ok"
    assert fire(rt, "j.once", due) == "duplicate"  # a second beat, a restart, a redelivery
    assert fire(rt, "j.once", due + 30) == "stale"  # a wake-up the job no longer has (edited meanwhile)
    job = _job(rt, "j.once")
    assert job.next_due_at == pytest.approx(due + 60)
    assert rt.redis.zscore(entries.SCHEDULE_KEY, entries.entry_key("j.once")) == pytest.approx(due + 60)
    runs = _runs(rt, "j.once")
    assert [(r["due_at"], r["outcome"]) for r in runs] == [(pytest.approx(due), "ok")]
    assert _chat_texts(rt, "web", "c1") == ["hello from j.once"]


def test_a_one_shot_completes_and_leaves_the_live_schedule(rt: Runtime) -> None:
    _put(rt, "j.delay", schedule={"type": "delay", "seconds": 5})
    due = float(_job(rt, "j.delay").next_due_at)
    assert rt.redis.zscore(entries.SCHEDULE_KEY, entries.entry_key("j.delay")) is not None
    assert fire(rt, "j.delay", due) == "ok"
    assert _job(rt, "j.delay").state == "completed"
    assert rt.redis.zscore(entries.SCHEDULE_KEY, entries.entry_key("j.delay")) is None
    assert not rt.redis.exists(entries.entry_key("j.delay"))


def test_paused_missing_and_disabled_jobs_fire_nothing(tmp_path: Path, llm, redis_url: str,
                                                        monkeypatch: pytest.MonkeyPatch, rt: Runtime) -> None:  # type: ignore[no-untyped-def]
    _put(rt, "j.paused")
    due = float(_job(rt, "j.paused").next_due_at)
    JobService(rt).pause(OWNER, "j.paused")
    assert fire(rt, "j.paused", due) == "inactive"
    assert fire(rt, "no.such.job", due) == "inactive"
    assert _runs(rt, "j.paused") == []
    off = _runtime(tmp_path / "off", llm, redis_url, monkeypatch, enabled=False)
    try:
        assert fire(off, "j.paused", due) == "disabled"
    finally:
        off.close()


def test_a_due_time_claimed_by_another_fire_is_not_run_again(rt: Runtime) -> None:
    _put(rt, "j.race")
    due = float(_job(rt, "j.race").next_due_at)
    with rt.db.begin() as conn:
        store.claim_run(conn, "j.race", due)  # a second beat's fire got there first
    assert fire(rt, "j.race", due) == "duplicate"
    assert _chat_texts(rt, "web", "c1") == []
    assert _job(rt, "j.race").next_due_at == pytest.approx(due)  # the winner advances it, not this one


def test_run_now_is_a_run_of_its_own_and_leaves_the_schedule(rt: Runtime) -> None:
    _put(rt, "j.now")
    due = float(_job(rt, "j.now").next_due_at)
    now = time.time()
    assert fire(rt, "j.now", now, manual=True) == "ok"
    assert _job(rt, "j.now").next_due_at == pytest.approx(due)
    assert fire(rt, "j.now", due) == "ok"


# --- rebuild -------------------------------------------------------------------------------------


def test_rebuild_makes_the_entries_exactly_match_sql(rt: Runtime) -> None:
    for i in range(3):
        _put(rt, f"j.r{i}")
    JobService(rt).pause(OWNER, "j.r2")
    rt.redis.flushdb()  # Redis lost everything
    with rt.redis.pipeline() as pipe:
        entries.write(pipe, "j.gone", time.time() + 30)  # an entry of a job SQL does not know
        pipe.execute()
    stats = rebuild(rt)
    live = entries.scores(rt.redis)
    assert set(live) == {"j.r0", "j.r1", "builtin.session_cleanup"}  # the builtin one: gateway.session_ttl_secs
    for job_id in ("j.r0", "j.r1"):
        assert live[job_id] == pytest.approx(float(_job(rt, job_id).next_due_at))
    assert stats["removed"] == 1 and stats["pushed"] >= 2
    assert rebuild(rt)["pushed"] == 0  # already in sync: nothing rewritten


def test_skip_records_each_missed_due_time_and_fires_nothing_old(rt: Runtime) -> None:
    _put(rt, "j.skip", schedule={"type": "interval", "seconds": 120})
    created = time.time() - 120 * 5 - 90  # due times created+120 … created+600 passed, the newest 90 s ago
    _backdate(rt, "j.skip", created + 120, created)
    rebuild(rt)
    runs = _runs(rt, "j.skip")
    assert sorted(r["outcome"] for r in runs) == ["missed"] * 5
    assert sorted(r["due_at"] for r in runs) == [pytest.approx(created + 120 * k) for k in range(1, 6)]
    assert _job(rt, "j.skip").next_due_at == pytest.approx(created + 720)  # 30 s ahead: nothing old fires
    assert rebuild(rt)["missed"] == 0  # recorded once


def test_a_due_time_late_by_less_than_a_minute_still_fires(rt: Runtime) -> None:
    _put(rt, "j.late", schedule={"type": "interval", "seconds": 60})
    created = time.time() - 60 * 3 - 20  # the newest due time 20 s ago (a beat restart), two older ones
    _backdate(rt, "j.late", created + 60, created)
    rebuild(rt)
    assert sorted(r["outcome"] for r in _runs(rt, "j.late")) == ["missed", "missed"]
    assert _job(rt, "j.late").next_due_at == pytest.approx(created + 180)
    assert rt.redis.zscore(entries.SCHEDULE_KEY, entries.entry_key("j.late")) == pytest.approx(created + 180)


def test_run_once_catches_up_once_within_the_grace(tmp_path: Path, llm, redis_url: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    rt = _runtime(tmp_path, llm, redis_url, monkeypatch, misfire_policy="run_once", misfire_grace_secs=3600)
    try:
        _put(rt, "j.catch", schedule={"type": "interval", "seconds": 600})
        created = time.time() - 600 * 3 - 120
        _backdate(rt, "j.catch", created + 600, created)  # three due times passed, the newest 120 s ago
        rebuild(rt)
        catch_up = float(_job(rt, "j.catch").next_due_at)
        assert catch_up == pytest.approx(created + 1800)  # the newest missed one, woken now
        assert rt.redis.zscore(entries.SCHEDULE_KEY, entries.entry_key("j.catch")) == pytest.approx(catch_up)
        assert fire(rt, "j.catch", catch_up) == "ok"
        outcomes = sorted(r["outcome"] for r in _runs(rt, "j.catch"))
        assert outcomes == ["missed", "missed", "ok"]
        assert _job(rt, "j.catch").next_due_at > time.time()
    finally:
        rt.close()


# --- agent kinds ---------------------------------------------------------------------------------


def test_agent_task_runs_a_turn_on_the_scheduled_queue_and_records_it(rt: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "daily report please", {"content": "here is the report"})
    _put(rt, "j.agent", kind="agent_task", prompt="daily report please", system_prompt="be brief")
    due = float(_job(rt, "j.agent").next_due_at)
    assert fire(rt, "j.agent", due) == "running"
    (session_id, queue), = rt.queue.turns  # type: ignore[attr-defined]
    assert queue == QUEUE_SCHEDULED and session_id.startswith("web:c1:")
    assert drain_session(rt, session_id) == 1
    run, = _runs(rt, "j.agent")
    assert run["outcome"] == "ok" and run["turn_id"] and run["session_id"] == session_id
    with rt.db.read() as s:
        stored = messages.load_rows(s, session_id)
    assert [m.marker for m in stored if m.role == "system"][-1:] == ["scheduled_system_prompt"]
    assert "here is the report" in [str(m.content) for m in stored]


def test_failing_agent_task_is_recorded_with_its_error(rt: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "doomed job", {"error": {"status": 400, "message": "the model refused", "type": "invalid_request_error"}},
             repeat=True)
    _put(rt, "j.fail", kind="agent_task", prompt="doomed job")
    assert fire(rt, "j.fail", float(_job(rt, "j.fail").next_due_at)) == "running"
    drain_session(rt, rt.queue.turns[-1][0])  # type: ignore[attr-defined]
    run, = _runs(rt, "j.fail")
    assert run["outcome"] == "failed" and run["error"]


def test_failing_silent_task_sends_exactly_one_notice_and_stays_in_its_own_session(rt: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    from picobot.scheduler.fire import on_turn_finished

    add_rule(llm, "silent doomed", {"error": {"status": 400, "message": "nope", "type": "invalid_request_error"}},
             repeat=True)
    _put(rt, "j.silent", kind="silent_agent_task", prompt="silent doomed", chat="notify-me")
    due = float(_job(rt, "j.silent").next_due_at)
    fire(rt, "j.silent", due)
    session_id = rt.queue.turns[-1][0]  # type: ignore[attr-defined]
    assert session_id.startswith("scheduler:j.silent:")
    drain_session(rt, session_id)
    on_turn_finished(rt, [input_id("j.silent", due)], "again", "failed", "again")  # a repeated report
    notices = [t for t in _chat_texts(rt, "web", "notify-me") if "j.silent" in t]
    assert len(notices) == 1 and "failed" in notices[0]
    assert _runs(rt, "j.silent")[0]["outcome"] == "failed"


def test_agent_input_of_a_dead_worker_is_settled_from_its_turn(rt: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    from picobot.scheduler.recovery import settle_stale_runs

    add_rule(llm, "settle me", {"content": "settled"})
    _put(rt, "j.settle", kind="agent_task", prompt="settle me")
    due = float(_job(rt, "j.settle").next_due_at)
    fire(rt, "j.settle", due)
    session_id = rt.queue.turns[-1][0]  # type: ignore[attr-defined]
    assert settle_stale_runs(rt, now=time.time() + 3600) == 0  # input still pending: the turn machinery owns it
    # the turn commits but its worker dies before recording the run: no hook ran
    with rt.db.begin() as conn:
        conn.execute(update(InboundRow).where(InboundRow.platform_message_id == input_id("j.settle", due))
                     .values(platform_message_id=input_id("j.settle", due) + "x"))
    drain_session(rt, session_id)
    with rt.db.begin() as conn:
        conn.execute(update(InboundRow).where(InboundRow.platform_message_id == input_id("j.settle", due) + "x")
                     .values(platform_message_id=input_id("j.settle", due)))
    assert _runs(rt, "j.settle")[0]["outcome"] == "running"
    assert settle_stale_runs(rt, now=time.time() + 3600) == 1
    assert _runs(rt, "j.settle")[0]["outcome"] == "ok"


def test_a_non_agent_run_of_a_dead_worker_is_reported_failed(rt: Runtime) -> None:
    from picobot.scheduler.recovery import WORKER_STOPPED, settle_stale_runs

    _put(rt, "j.dead")
    due = float(_job(rt, "j.dead").next_due_at)
    with rt.db.begin() as conn:
        assert store.claim_run(conn, "j.dead", due) is not None  # claimed, then the worker was killed
    assert settle_stale_runs(rt, now=time.time() + 3600) == 1
    run, = _runs(rt, "j.dead")
    assert run["outcome"] == "failed" and run["error"] == WORKER_STOPPED


# --- internal events, ids ------------------------------------------------------------------------


def test_session_cleanup_archives_idle_dialogs_only(rt: Runtime) -> None:
    from picobot.scheduler.cleanup import cleanup_sessions

    with rt.db.write() as s:
        sessions.get_or_create_current(s, "web", "idle")
        sessions.get_or_create_current(s, "web", "busy")
    with rt.db.begin() as conn:
        conn.execute(update(SessionRow).values(updated_at=time.time() - 7200).where(SessionRow.chat_id == "idle"))
    JobService(rt).put(OWNER, {
        "id": "j.clean", "kind": "internal_event", "schedule": {"type": "interval", "seconds": 60},
        "payload": {"event": "session_cleanup"}})
    assert fire(rt, "j.clean", float(_job(rt, "j.clean").next_due_at)) == "ok"
    with rt.db.connect() as conn:
        archived = dict(conn.execute(select(SessionRow.chat_id, SessionRow.archived_at)).all())
    assert archived["idle"] is not None and archived["busy"] is None
    assert cleanup_sessions(rt) == 0


def test_input_ids_round_trip_with_colons_in_job_ids() -> None:
    due = 1767225600.123456
    assert parse_input_id(input_id("team:a.b", due)) == ("team:a.b", due)
    assert parse_input_id("feishu-msg-1") is None and parse_input_id("job:nodue") is None


def test_push_job_of_a_deleted_job_removes_its_entry(rt: Runtime) -> None:
    _put(rt, "j.del")
    assert entries.scores(rt.redis).get("j.del") is not None
    with rt.db.begin() as conn:
        store.delete_job(conn, "j.del")
    push_job(rt, "j.del")
    assert "j.del" not in entries.scores(rt.redis)
