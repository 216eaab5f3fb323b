"""Batched firing (picobot.scheduler.batch): many due times in one transaction, each exactly once.

In process, on a real SQLite database and a private redis-server (the task queue records what would
be sent); the burst through beat and a worker is in tests/test_scheduler_faults.py.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select, update

from picobot.app import App as Runtime
from picobot.runtime.task_names import QUEUE_SCHEDULED
from picobot.scheduler import redbeat_entries as entries
from picobot.scheduler.batch import claim, fire_batch, pairs_of
from picobot.scheduler.fire import input_id
from picobot.scheduler.manage import JobService
from picobot.scheduler.sync import push_job, rebuild
from picobot.storage import jobs as store
from picobot.storage.models import InboundRow, MessageRow
from tests.conftest import fresh_pg_schema
from tests.test_scheduler_fire import OWNER, _chat_texts, _job, _put, _runs, _runtime

DUE = 1_900_000_000.25  # the one instant every job of a test is due at


@pytest.fixture(params=["sqlite", "postgres"])
def rt(request: pytest.FixtureRequest, tmp_path, llm, redis_url: str,  # type: ignore[no-untyped-def]
       monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """The runtime on SQLite, then on a fresh PostgreSQL schema (savepoints and the one-statement
    claim behave alike on both)."""
    pg = fresh_pg_schema() if request.param == "postgres" else None
    url = next(pg) if pg is not None else None
    runtime = _runtime(tmp_path, llm, redis_url, monkeypatch)
    if url is not None:
        runtime.close()
        monkeypatch.setenv("DATABASE_URL", url)
        from picobot.app import build_runtime
        from picobot.config import load_config

        runtime = build_runtime(load_config(), type(runtime.queue)(), migrate=True)
        assert runtime.db.engine.dialect.name == "postgresql"
    try:
        yield runtime
    finally:
        runtime.close()
        if pg is not None:
            pg.close()


def _due_now(rt: Runtime, *job_ids: str, due: float = DUE) -> list[tuple[str, float]]:
    """As beat would find them: every job due at `due`, its entry waking then."""
    with rt.db.begin() as conn:
        for job_id in job_ids:
            store.set_next_due(conn, job_id, due)
    for job_id in job_ids:
        push_job(rt, job_id)
    return [(job_id, due) for job_id in job_ids]


def _next_after(rt: Runtime, job_id: str, due: float = DUE) -> float:
    """The job's due time after `due`, by its own schedule (an interval counts from its creation)."""
    from picobot.scheduler.schedules import next_due

    job = _job(rt, job_id)
    return pytest.approx(next_due(job.schedule, due, job.timezone or rt.config.time.timezone, job.created_at),
                         abs=1e-3)


def _entry(rt: Runtime, job_id: str) -> float | None:
    return rt.redis.zscore(entries.SCHEDULE_KEY, entries.entry_key(job_id))


def _outcomes(rt: Runtime, job_id: str) -> list[tuple[float, str]]:
    return [(r["due_at"], r["outcome"]) for r in _runs(rt, job_id)]


def _message_count(rt: Runtime) -> int:
    with rt.db.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(MessageRow)).scalar() or 0)


def test_a_batch_fires_every_kind_once_and_moves_each_schedule_on(rt: Runtime) -> None:
    for i in range(3):
        _put(rt, f"b.msg.{i}", chat="burst")
    _put(rt, "b.agent", kind="agent_task", prompt="do the thing", chat="agent-chat")
    pairs = _due_now(rt, "b.msg.0", "b.msg.1", "b.msg.2", "b.agent")
    assert fire_batch(rt, pairs) == {"ok": 3, "running": 1}
    assert sorted(_chat_texts(rt, "web", "burst")) == [f"hello from b.msg.{i}" for i in range(3)]
    for i in range(3):
        assert _outcomes(rt, f"b.msg.{i}") == [(DUE, "ok")]
        # moved past this due time; an interval counts from the job's creation, so the next one may be under a
        # second away (the test read `DUE + 1 <` and failed about once in 60 runs)
        assert DUE < _job(rt, f"b.msg.{i}").next_due_at == _next_after(rt, f"b.msg.{i}")
        assert _job(rt, f"b.msg.{i}").last_outcome == "ok"
        assert _entry(rt, f"b.msg.{i}") == _next_after(rt, f"b.msg.{i}")
    assert _outcomes(rt, "b.agent") == [(DUE, "running")]  # the turn's end records it
    with rt.db.connect() as conn:
        pending = conn.execute(select(InboundRow.session_id).where(
            InboundRow.platform_message_id == input_id("b.agent", DUE))).all()
    assert len(pending) == 1
    assert rt.queue.turns == [(pending[0].session_id, QUEUE_SCHEDULED)]  # type: ignore[attr-defined]


def test_a_pair_twice_in_a_batch_and_a_batch_delivered_twice_fire_once(rt: Runtime) -> None:
    _put(rt, "b.dup.a", chat="dup")
    _put(rt, "b.dup.b", chat="dup")
    pairs = _due_now(rt, "b.dup.a", "b.dup.b")
    assert fire_batch(rt, [*pairs, pairs[0], list(pairs[0])]) == {"ok": 2}
    assert fire_batch(rt, pairs) == {"duplicate": 2}  # the same task redelivered, or a second beat's
    assert _outcomes(rt, "b.dup.a") == [(DUE, "ok")] and _outcomes(rt, "b.dup.b") == [(DUE, "ok")]
    assert sorted(_chat_texts(rt, "web", "dup")) == ["hello from b.dup.a", "hello from b.dup.b"]
    assert _job(rt, "b.dup.a").next_due_at == _next_after(rt, "b.dup.a")  # advanced once, not twice


def test_a_run_claimed_elsewhere_is_a_duplicate_and_the_rest_still_fire(rt: Runtime) -> None:
    _put(rt, "b.race", chat="race")
    _put(rt, "b.free", chat="race")
    pairs = _due_now(rt, "b.race", "b.free")
    with rt.db.begin() as conn:
        store.claim_run(conn, "b.race", DUE)  # a single fire (or another batch) got there first
    assert fire_batch(rt, pairs) == {"duplicate": 1, "ok": 1}
    assert _chat_texts(rt, "web", "race") == ["hello from b.free"]


def test_jobs_paused_or_deleted_meanwhile_fire_nothing_and_the_others_do(rt: Runtime) -> None:
    for job_id in ("b.keep", "b.paused", "b.gone"):
        _put(rt, job_id, chat="mixed")
    pairs = _due_now(rt, "b.keep", "b.paused", "b.gone")
    JobService(rt).pause(OWNER, "b.paused")
    JobService(rt).delete(OWNER, "b.gone")
    assert fire_batch(rt, [*pairs, ("b.never.existed", DUE)]) == {"ok": 1, "inactive": 3}
    assert _chat_texts(rt, "web", "mixed") == ["hello from b.keep"]
    assert _runs(rt, "b.paused") == []
    with rt.db.connect() as conn:
        assert store.run_for(conn, "b.gone", DUE) is None


def test_a_job_whose_effect_fails_is_recorded_failed_and_the_others_fire(rt: Runtime) -> None:
    for job_id in ("b.good.1", "b.bad", "b.empty", "b.good.2"):
        _put(rt, job_id, chat="fails")
    pairs = _due_now(rt, "b.good.1", "b.bad", "b.empty", "b.good.2")
    with rt.db.begin() as conn:  # rows the job rules would refuse, as an older version may have stored
        conn.execute(update(store.JOBS).where(store.JOBS.c.id == "b.bad")
                     .values(target={"channel": "nosuch", "chat_id": "x"}))
        conn.execute(update(store.JOBS).where(store.JOBS.c.id == "b.empty").values(payload={"text": "  "}))
    before = _message_count(rt)
    assert fire_batch(rt, pairs) == {"ok": 2, "failed": 2}
    assert sorted(_chat_texts(rt, "web", "fails")) == ["hello from b.good.1", "hello from b.good.2"]
    assert _message_count(rt) == before + 2  # nothing of the failed ones was stored
    bad, = _runs(rt, "b.bad")
    assert bad["outcome"] == "failed" and "nosuch" in bad["error"] and bad["ended_at"] >= bad["started_at"]
    empty, = _runs(rt, "b.empty")
    assert empty["outcome"] == "failed" and empty["error"] == "payload.text is empty"
    assert _job(rt, "b.bad").last_outcome == "failed"
    assert _job(rt, "b.bad").next_due_at == _next_after(rt, "b.bad")  # a failed run still moves the schedule on


def _refuse_messages_containing(rt: Runtime, word: str) -> None:
    """A trigger in the database that refuses to store a message whose content holds `word`."""
    with rt.db.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql(f"CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN instr(NEW.content, '{word}') > 0 "
                                 "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        else:
            conn.exec_driver_sql(f"""CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN
                IF strpos(NEW.content::text, '{word}') > 0 THEN RAISE EXCEPTION 'refused by the test'; END IF;
                RETURN NEW; END $$ LANGUAGE plpgsql""")
            conn.exec_driver_sql("CREATE TRIGGER refuse BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION refuse()")


def test_a_chats_messages_are_stored_together_and_one_that_cannot_be_stored_fails_alone(rt: Runtime) -> None:
    """A burst's messages to one chat are one insert per dialog; when that fails, each is tried on its
    own, so only the job whose message the database refuses fails — in this chat and in no other."""
    ids = [f"b.together.{i}" for i in range(4)]
    for job_id in ids[:3]:
        _put(rt, job_id, chat="together")
    _put(rt, ids[3], chat="elsewhere")
    with rt.db.begin() as conn:
        conn.execute(update(store.JOBS).where(store.JOBS.c.id == ids[1]).values(payload={"text": "poison pill"}))
    _refuse_messages_containing(rt, "poison")
    pairs = _due_now(rt, *ids)
    before = _message_count(rt)
    assert fire_batch(rt, pairs) == {"ok": 3, "failed": 1}
    assert _chat_texts(rt, "web", "together") == ["hello from b.together.0", "hello from b.together.2"]
    assert _chat_texts(rt, "web", "elsewhere") == ["hello from b.together.3"]
    assert _message_count(rt) == before + 3
    bad, = _runs(rt, ids[1])
    assert bad["outcome"] == "failed" and "refused by the test" in bad["error"]
    assert _job(rt, ids[1]).last_outcome == "failed"
    assert [_outcomes(rt, job_id) for job_id in (ids[0], ids[2], ids[3])] == [[(DUE, "ok")]] * 3
    assert _job(rt, ids[1]).next_due_at == _next_after(rt, ids[1])  # its schedule moved on all the same


def test_a_burst_to_one_chat_reserves_its_positions_once_and_inserts_its_messages_once(rt: Runtime) -> None:
    """The dialog's row (its message positions) is written once per batch, at the end: batches to one
    chat then wait for each other only around that write (PostgreSQL row locks), not whole transactions."""
    from sqlalchemy import event

    ids = [f"b.once.{i:02d}" for i in range(12)]
    for job_id in ids:
        _put(rt, job_id, chat="one-chat")
    pairs = _due_now(rt, *ids)
    statements: list[str] = []

    def seen(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        statements.append(" ".join(statement.split()).upper())

    event.listen(rt.db.engine, "before_cursor_execute", seen)
    try:
        assert fire_batch(rt, pairs) == {"ok": 12}
    finally:
        event.remove(rt.db.engine, "before_cursor_execute", seen)
    assert len([q for q in statements if q.startswith("INSERT INTO MESSAGES")]) == 1
    assert len([q for q in statements if q.startswith("UPDATE SESSIONS")]) == 1
    assert sorted(_chat_texts(rt, "web", "one-chat")) == [f"hello from {job_id}" for job_id in ids]


def test_an_internal_event_in_a_batch_fires_on_its_own_and_a_one_shot_completes(rt: Runtime) -> None:
    JobService(rt).put(OWNER, {"id": "b.clean", "kind": "internal_event", "schedule": {"type": "interval", "seconds": 60},
                               "payload": {"event": "session_cleanup"}})
    _put(rt, "b.once", schedule={"type": "delay", "seconds": 30}, chat="once")
    pairs = _due_now(rt, "b.clean", "b.once")
    assert fire_batch(rt, pairs) == {"ok": 2}
    assert _outcomes(rt, "b.clean") == [(DUE, "ok")]
    assert _job(rt, "b.once").state == "completed"
    assert _entry(rt, "b.once") is None
    assert _entry(rt, "b.clean") == _next_after(rt, "b.clean")


def test_the_claim_stores_the_effect_in_the_same_commit_and_a_crash_after_it_is_recovered(rt: Runtime) -> None:
    """The worker dies right after the batch's commit: no entry re-written, no turn enqueued. The
    sync re-writes the entries from SQL and the session sweeper runs the stored input."""
    from picobot.runtime.sweeper import sweep

    _put(rt, "b.crash.msg", chat="crash")
    _put(rt, "b.crash.agent", kind="agent_task", prompt="after the crash", chat="crash-agent")
    now = time.time()
    pairs = _due_now(rt, "b.crash.msg", "b.crash.agent", due=now - 1)
    claim(rt, pairs)  # the commit; Batch.finish never runs
    assert _chat_texts(rt, "web", "crash") == ["hello from b.crash.msg"]  # visible with its run
    assert _outcomes(rt, "b.crash.msg") == [(now - 1, "ok")]
    assert rt.queue.turns == []  # type: ignore[attr-defined]
    for job_id in ("b.crash.msg", "b.crash.agent"):  # still the fired due time's wake-up
        assert _entry(rt, job_id) == pytest.approx(now - 1, abs=1e-3)
        assert _job(rt, job_id).next_due_at > now
    rebuild(rt)
    for job_id in ("b.crash.msg", "b.crash.agent"):
        assert _entry(rt, job_id) == pytest.approx(_job(rt, job_id).next_due_at, abs=1e-3)
    assert sweep(rt)["woken"] == 1
    session_id = rt.queue.turns[0][0]  # type: ignore[attr-defined]
    with rt.db.connect() as conn:
        row = conn.execute(select(InboundRow.session_id).where(
            InboundRow.platform_message_id == input_id("b.crash.agent", now - 1))).one()
    assert row.session_id == session_id
    assert fire_batch(rt, pairs) == {"duplicate": 2}  # and the redelivered task changes nothing


def test_a_disabled_scheduler_fires_no_batch(tmp_path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                             rt: Runtime) -> None:
    _put(rt, "b.off", chat="off")
    pairs = _due_now(rt, "b.off")
    off = _runtime(tmp_path / "off", llm, redis_url, monkeypatch, enabled=False)
    try:
        assert fire_batch(off, pairs) == {"disabled": 1}
    finally:
        off.close()
    assert _runs(rt, "b.off") == []


_junk = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                     max_leaves=20)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=_junk)
def test_a_malformed_batch_fires_nothing_and_raises_nothing(rt: Runtime, raw: Any) -> None:
    _put(rt, "b.junk", chat="junk")
    _due_now(rt, "b.junk")
    counts = fire_batch(rt, raw)
    assert set(counts) <= {"inactive", "stale"}  # pairs naming no job, or not its due time
    assert _runs(rt, "b.junk") == []
    assert pairs_of([["b.junk", True], ["b.junk"], "b.junk", [1, DUE], ["b.junk", DUE, 1],
                     ["b.junk", float("nan")], ["b.junk", float("inf")]]) == []


def test_a_job_that_cannot_be_claimed_in_the_batch_does_not_stop_the_others(rt: Runtime) -> None:
    _put(rt, "b.sane", chat="claim")
    _put(rt, "b.broken", chat="claim")
    pairs = _due_now(rt, "b.sane", "b.broken")
    with rt.db.begin() as conn:  # a schedule no version would accept: its next due time cannot be computed
        conn.execute(update(store.JOBS).where(store.JOBS.c.id == "b.broken")
                     .values(schedule={"type": "cron", "expression": "not a cron"}))
    assert fire_batch(rt, pairs) == {"ok": 1, "error": 1}
    assert _chat_texts(rt, "web", "claim") == ["hello from b.sane"]
    assert _runs(rt, "b.broken") == []  # not claimed: the sync's misfire handling sees it as due


def _sent_batches(rt: Runtime) -> list[list[tuple[str, float]]]:
    """The fire_batch tasks waiting in the `scheduled` queue (the broker is this Redis), as pair lists."""
    import base64
    import json

    from picobot.runtime.task_names import JOB_FIRE_BATCH_TASK

    out = []
    for raw in rt.redis.lrange(QUEUE_SCHEDULED, 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] == JOB_FIRE_BATCH_TASK:
            args = json.loads(base64.b64decode(message["body"]))[0]
            out.append([(job_id, due) for job_id, due in args[0]])
    return out


def test_beat_sends_a_ticks_due_jobs_as_batches_and_holds_them_back_when_the_queue_is_full(
        tmp_path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from worker.beat import PicoBeatScheduler
    from worker.celery_app import make_celery

    rt = _runtime(tmp_path, llm, redis_url, monkeypatch, worker_queue_capacity=2)
    try:
        ids = [f"b.beat.{i:03d}" for i in range(250)]
        for job_id in ids:
            _put(rt, job_id, chat="beat")
        pairs = _due_now(rt, *ids, due=time.time() - 0.5)
        beat = PicoBeatScheduler(app=make_celery(rt.config), lazy=True)
        beat.tick()
        batches = _sent_batches(rt)
        assert sorted(len(b) for b in batches) == [50, 200]  # FIRE_BATCH_MAX pairs a task
        assert sorted(p for b in batches for p in b) == sorted(pairs)  # the exact due times
        assert all(_entry(rt, job_id) == -1 for job_id in ids)  # sent: the fire writes the next one
        beat.tick()
        assert len(_sent_batches(rt)) == 2  # nothing sent twice
        _put(rt, "b.beat.held", chat="beat")
        held = _due_now(rt, "b.beat.held", due=time.time() - 0.5)
        beat.tick()  # two tasks wait and the capacity is 2: the job stays in the schedule
        assert len(_sent_batches(rt)) == 2 and _entry(rt, "b.beat.held") == pytest.approx(held[0][1], abs=1e-6)
        rt.redis.delete(QUEUE_SCHEDULED)  # the worker took them
        beat.tick()
        assert _sent_batches(rt) == [held]
    finally:
        rt.close()


def test_after_sending_due_jobs_beat_gathers_the_next_ones_but_wakes_on_time_for_a_job_when_idle(
        tmp_path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A burst goes out as a few large batches (beat waits BURST_GATHER_SECS after a tick that sent jobs);
    a job that comes due while beat sent nothing is waited for exactly. The gathering is stretched to 0.4 s
    here (beat's longest sleep in these tests is 0.5 s), so that due times 0.2 s ahead stay inside it on a
    slow machine too."""
    from worker import beat as beat_module
    from worker.beat import PicoBeatScheduler
    from worker.celery_app import make_celery

    monkeypatch.setattr(beat_module, "BURST_GATHER_SECS", 0.4)
    rt = _runtime(tmp_path, llm, redis_url, monkeypatch)
    try:
        for job_id in ("b.gather.now", "b.gather.soon", "b.gather.later"):
            _put(rt, job_id, chat="gather")
        beat = PicoBeatScheduler(app=make_celery(rt.config), lazy=True)
        beat.setup_schedule()
        # beat's own entries (the sweep, every second here) out of the way: each wake-up below is a job's
        statics = [k for k in rt.redis.zrange(entries.SCHEDULE_KEY, 0, -1) if entries.job_id_of_key(k) is None]
        rt.redis.zrem(entries.SCHEDULE_KEY, *statics)
        now = time.time()
        _due_now(rt, "b.gather.now", due=now - 0.5)
        _due_now(rt, "b.gather.soon", due=now + 0.2)
        assert beat.tick() >= 0.4  # sent one: the next, due in 0.2 s, waits for the gathering
        assert [p for b in _sent_batches(rt) for p in b] == [("b.gather.now", pytest.approx(now - 0.5))]
        time.sleep(max(0.0, now + 0.2 - time.time()) + 0.05)
        beat.tick()
        assert sorted(p for b in _sent_batches(rt) for p in b) == [("b.gather.now", pytest.approx(now - 0.5)),
                                                                   ("b.gather.soon", pytest.approx(now + 0.2))]
        rt.redis.delete(QUEUE_SCHEDULED)
        before = time.time()
        later = before + 0.2
        _due_now(rt, "b.gather.later", due=later)
        wait = beat.tick()  # nothing was due: beat wakes when the next job is, not after the gathering
        assert _sent_batches(rt) == [] and 0 < wait <= later - before + 0.001
    finally:
        rt.close()


def test_external_chats_get_outbox_rows_in_the_batch_and_a_crash_after_it_is_swept(
        tmp_path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """outbound_message to an external channel: the outbox row (key `j:<job>:<due>`) is committed with
    the run; one wake-up per lane after the commit; lost with the worker, the outbox sweeper wakes it."""
    from picobot.channels import delivery
    from picobot.storage.models import OutboxRow
    from tests.channel_sink import Sink, sink_channel
    from tests.test_channels import _runtime as channel_runtime

    sink = Sink()
    rt = channel_runtime(tmp_path, llm, redis_url, monkeypatch, {"sink": sink_channel(sink)})
    try:
        svc = JobService(rt)
        for job_id in ("b.ext.1", "b.ext.2", "b.ext.crash"):
            svc.put(OWNER, {"id": job_id, "kind": "outbound_message", "schedule": {"type": "interval", "seconds": 60},
                            "target": {"channel": "sink", "chat_id": "u_friend" if job_id != "b.ext.crash" else "u_late"},
                            "payload": {"text": f"from {job_id}"}})
        pairs = _due_now(rt, "b.ext.1", "b.ext.2")
        assert fire_batch(rt, pairs) == {"ok": 2}
        assert rt.queue.lanes == [("sink", "u_friend", 0)]  # type: ignore[attr-defined]  # once per lane
        crash = _due_now(rt, "b.ext.crash")
        claim(rt, crash)  # committed; the worker dies before waking the lane
        assert fire_batch(rt, crash) == {"duplicate": 1}  # redelivered: nothing twice
        with rt.db.connect() as conn:
            rows = conn.execute(select(OutboxRow.chat_id, OutboxRow.idempotency_key)).all()
        assert sorted(rows) == sorted([("u_friend", f"j:b.ext.1:{DUE!r}"), ("u_friend", f"j:b.ext.2:{DUE!r}"),
                                       ("u_late", f"j:b.ext.crash:{DUE!r}")])
        with rt.db.begin() as conn:  # as if the worker died a minute ago
            conn.execute(OutboxRow.__table__.update().values(created_at=time.time() - 60))
        rt.queue.lanes.clear()  # type: ignore[attr-defined]
        assert delivery.recover(rt) == 2  # both lanes have due rows and no lock holder
        assert sorted(rt.queue.lanes) == [("sink", "u_friend", 0), ("sink", "u_late", 0)]  # type: ignore[attr-defined]
    finally:
        rt.close()
        sink.stop()
