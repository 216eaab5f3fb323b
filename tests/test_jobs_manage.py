"""Scheduler core: job JSON checks, the jobs/runs SQL (SQLite and PostgreSQL), JobService permissions
and the config/builtin jobs. Real SQL and a private redis-server (the redbeat entries follow each change)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from picobot.config.schema import Config
from picobot.app import App as Runtime, build_plugins
from picobot.runtime.services import connect_redis
from picobot.runtime.task_names import MEMORY_MAINTENANCE_JOB
from picobot.scheduler import redbeat_entries as entries
from picobot.scheduler.config_jobs import SESSION_CLEANUP_JOB, upsert_config_jobs
from picobot.scheduler.jobs import JobError, parse_job
from picobot.scheduler.manage import Actor, JobForbidden, JobNotFound, JobService
from picobot.storage import jobs as store
from picobot.storage.db import Database

NOW = time.time()
OWNER = Actor(channel="web", chat_id="owner", owner=True)
ALICE = Actor(channel="web", chat_id="alice", sender_id="a")
BOB = Actor(channel="cli_chat", chat_id="bob", sender_id="b")


def job(**over: Any) -> dict[str, Any]:
    data = {"id": "agent.daily", "kind": "agent_task", "schedule": {"type": "cron", "expression": "30 18 * * *"},
            "target": {"channel": "web", "chat_id": "alice"},
            "payload": {"prompt": "summarise today", "agent": "default", "fresh_session": True,
                        "system_prompt": "be brief", "sender_id": "scheduler-daily", "metadata": {"k": "v"}}}
    data.update(over)
    return data


# --- parse_job -------------------------------------------------------------------------


def test_parse_job_accepts_the_seed_examples() -> None:
    cfg = Config()
    j = parse_job(job(timezone="Asia/Shanghai"), cfg, now=NOW)
    assert (j.id, j.kind, j.timezone, j.state) == ("agent.daily", "agent_task", "Asia/Shanghai", "active")
    assert j.payload["metadata"] == {"k": "v"} and j.target == {"channel": "web", "chat_id": "alice"}
    cleanup = parse_job({"id": "session.cleanup", "kind": "internal_event", "schedule": {"type": "interval",
                         "seconds": 300}, "payload": {"event": "session_cleanup"}}, cfg, now=NOW)
    assert cleanup.target is None
    at = parse_job(job(schedule={"type": "at", "at": "2099-01-01T09:00:00+08:00"}), cfg, now=NOW)
    assert at.schedule["at"] == "2099-01-01T01:00:00+00:00"  # stored as an instant in the job's zone


BAD = [
    ({"schedule": {"type": "cron", "expression": "61 * * * *"}}, "schedule.expression"),
    ({"schedule": {"type": "cron", "expression": "* * *"}}, "schedule.expression"),
    ({"schedule": {"type": "cron", "expression": "0 0 31 2 *"}}, "schedule.expression"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"schedule": {"type": "at", "at": "2001-01-01T00:00:00Z"}}, "schedule.at"),
    ({"schedule": {"type": "at", "at": "not a date"}}, "schedule.at"),
    ({"schedule": {"type": "interval", "seconds": 0}}, "schedule.seconds"),
    ({"schedule": {"type": "delay", "seconds": 1}}, "schedule.seconds"),  # under the 2000 ms tick below
    ({"schedule": {"type": "weekly"}}, "schedule"),
    ({"kind": "reminder"}, "kind"),
    ({"payload": {"prompt": "x", "agent": "nobody"}}, "payload.agent"),
    ({"payload": {"prompt": ""}}, "payload.prompt"),
    ({"payload": {"prompt": "x" * 2001}}, "payload.prompt"),
    ({"payload": {"prompt": "x", "fresh_session": "yes"}}, "payload.fresh_session"),
    ({"payload": {"prompt": "lone \ud800 surrogate"}}, "payload.prompt"),
    ({"payload": {"prompt": "x", "metadata": {"n": float("nan")}}}, "payload.metadata.n"),
    ({"payload": {"prompt": "x", "metadata": {"blob": "y" * 40000}}}, "payload"),
    ({"target": {"channel": "telegram", "chat_id": "1"}}, "target.channel"),
    ({"target": {"channel": "web"}}, "target.chat_id"),
    ({"id": "has space"}, "id"),
    ({"id": "x" * 129}, "id"),
    ({"id": None}, "id"),
    ({"surprise": 1}, "surprise"),
    ({"kind": "internal_event", "payload": {"event": "reboot"}}, "payload.event"),
    ({"kind": "outbound_message", "payload": {}}, "payload.text"),
]


@pytest.mark.parametrize("change,field", BAD, ids=[f for _, f in BAD])
def test_parse_job_names_the_bad_field(change: dict, field: str) -> None:
    cfg = Config(scheduler={"tick_resolution_ms": 2000}, gateway={"max_message_chars": 2000})
    with pytest.raises(JobError) as err:
        parse_job(job(**change), cfg, now=NOW)
    assert err.value.field == field and str(err.value).startswith(f"{field}: ")


def test_a_configured_channel_is_a_valid_target() -> None:
    cfg = Config(channels={"team": {"type": "custom", "enabled": True}})
    assert parse_job(job(target={"channel": "team", "chat_id": "g1"}), cfg, now=NOW).target["channel"] == "team"


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(),
                      st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1))
json_any = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=4),
                        st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=30)


def _deep(n: int) -> Any:
    v: Any = "x"
    for _ in range(n):
        v = {"a": [v]}
    return v


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(
    json_any,
    st.builds(lambda s, p, t, i: job(schedule=s, payload=p, target=t, id=i), json_any, json_any, json_any, json_any),
    st.builds(lambda sec: job(schedule={"type": "interval", "seconds": sec}),
              st.one_of(st.floats(), st.integers(-10 ** 30, 10 ** 30), st.text(), st.booleans())),
    st.builds(lambda at: job(schedule={"type": "at", "at": at}), st.one_of(st.text(), st.floats(), st.integers())),
    st.builds(lambda e: job(schedule={"type": "cron", "expression": e}), st.text(max_size=40)),
    st.builds(lambda tz: job(timezone=tz), st.one_of(st.text(max_size=30), st.integers())),
    st.just(job(payload={"prompt": "x", "metadata": _deep(3000)})),
    st.just(job(payload={"prompt": "x", "metadata": {"n": float("nan")}})),
    st.just(job(payload={"prompt": "\ud800"})),
))
@example(data={"": 2 ** 53 + 1})  # an empty key: the field is still named (`job[""]`)
def test_hostile_input_only_ever_raises_job_error(data: Any) -> None:
    try:
        j = parse_job(data, Config(), now=NOW)
    except JobError as e:
        assert e.field and e.message
        return
    json.dumps(j.row(), allow_nan=False, ensure_ascii=False).encode("utf-8")  # what is accepted stores cleanly


# --- storage: both databases -------------------------------------------------------------


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    d = Database(db_url)
    d.migrate()
    yield d
    d.dispose()


def _row(job_id: str = "j1", **over: Any) -> dict[str, Any]:
    return {"id": job_id, "kind": "outbound_message", "schedule": {"type": "interval", "seconds": 60},
            "target": {"channel": "web", "chat_id": "c"}, "payload": {"text": "hi"}, "next_due_at": 100.0,
            "created_at": 40.0, **over}


def test_store_jobs_and_runs(db: Database) -> None:
    with db.begin() as conn:
        first = store.upsert(conn, _row(), now=50.0)
        store.upsert(conn, _row("j2", next_due_at=500.0), now=50.0)
        store.upsert(conn, _row("j3", state="paused", next_due_at=10.0), now=50.0)
    assert (first["version"], first["state"], first["source"], first["created_at"]) == (1, "active", "user", 40.0)
    with db.begin() as conn:
        again = store.upsert(conn, {k: v for k, v in _row(payload={"text": "new"}).items() if k != "created_at"},
                             now=60.0)
    assert (again["version"], again["created_at"], again["payload"]) == (2, 40.0, {"text": "new"})
    with db.connect() as conn:
        assert [j["id"] for j in store.due(conn, 200.0)] == ["j1"]  # j2 later, j3 paused
        assert [j["id"] for j in store.list_jobs(conn, states=("active",))] == ["j1", "j2"]
    with db.begin() as conn:
        run_id = store.claim_run(conn, "j1", 100.0)
        assert run_id is not None
        assert store.claim_run(conn, "j1", 100.0) is None  # the same due time never runs twice
        assert store.record_missed(conn, "j1", 100.0) is None
        missed = store.record_missed(conn, "j1", 40.0, error="beat was down")
        assert missed is not None
        assert store.set_next_due(conn, "j1", 160.0, last_due_at=100.0, expect_next=100.0)
        assert not store.set_next_due(conn, "j1", 999.0, expect_next=100.0)  # compare-and-set lost
        store.set_run_session(conn, run_id, "web:c:d1")
        store.finish_run(conn, run_id, "ok", turn_id="t1")
    with db.connect() as conn:
        runs = store.runs(conn, "j1")
        got = store.get(conn, "j1")
    assert [(r["due_at"], r["outcome"]) for r in runs] == [(100.0, "ok"), (40.0, "missed")]
    assert runs[0]["turn_id"] == "t1" and runs[0]["session_id"] == "web:c:d1" and runs[1]["error"] == "beat was down"
    assert (got["next_due_at"], got["last_due_at"], got["last_outcome"], got["version"]) == (160.0, 100.0, "ok", 2)
    with db.begin() as conn:
        assert store.set_state(conn, "j1", "paused")
        assert store.delete_job(conn, "j1") and not store.delete_job(conn, "j1")
    with db.connect() as conn:
        assert store.get(conn, "j1") is None and store.runs(conn, "j1") == []


def test_claim_run_is_exactly_once_under_concurrency(db: Database) -> None:
    with db.begin() as conn:
        store.upsert(conn, _row())
    won: list[int] = []
    barrier = threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        with db.begin() as conn:
            run_id = store.claim_run(conn, "j1", 100.0)
        if run_id is not None:
            won.append(run_id)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1


# --- JobService and config jobs -------------------------------------------------------------


class _Queue:
    def __init__(self) -> None:
        self.jobs: list[tuple[str, float | None]] = []

    def enqueue_job(self, job_id: str, due_at: float | None) -> None:
        self.jobs.append((job_id, due_at))


def _runtime(tmp_path: Path, redis_url: str, **config: Any) -> Runtime:
    db = Database(f"sqlite:///{tmp_path / 'picobot.db'}")
    db.migrate()
    cfg = Config.model_validate({"memory": {"enabled": False}, **config})
    return Runtime(config=cfg, plugins=build_plugins(cfg, discover=False), db=db, redis=connect_redis(redis_url), queue=_Queue())  # type: ignore[arg-type]


@pytest.fixture
def rt(tmp_path: Path, redis_url: str) -> Iterator[Runtime]:
    runtime = _runtime(tmp_path, redis_url)
    yield runtime
    runtime.db.dispose()


def _count(rt: Runtime) -> int:
    with rt.db.connect() as conn:
        return store.count(conn)


def test_put_list_get_and_the_live_entry(rt: Runtime) -> None:
    svc = JobService(rt)
    made = svc.put(ALICE, {"id": "remind", "kind": "outbound_message", "schedule": {"type": "interval", "seconds": 300},
                           "payload": {"text": "stretch"}})
    assert made["target"] == {"channel": "web", "chat_id": "alice"}  # defaults to the actor's chat
    assert made["schedule_text"] == "every 5 minutes" and made["state"] == "active" and made["source"] == "user"
    assert made["owner_scope"] == "web:alice" and made["next_due_at"] == pytest.approx(made["created_at"] + 300)
    assert entries.scores(rt.redis) == {"remind": made["next_due_at"]}
    got = svc.get(ALICE, "remind")
    assert got["runs"] == [] and set(got) >= {"id", "kind", "schedule", "target", "payload", "timezone", "state",
                                              "source", "schedule_text", "next_due_at", "last_outcome",
                                              "created_at", "updated_at"}
    replaced = svc.put(ALICE, {**job(id="remind"), "target": None})
    assert replaced["version"] == 2 and replaced["kind"] == "agent_task"
    assert [j["id"] for j in svc.list(ALICE)] == ["remind"] and svc.list(BOB) == []
    assert [j["id"] for j in svc.list(OWNER)] == ["remind"]


def test_permissions(rt: Runtime) -> None:
    svc = JobService(rt)
    svc.put(ALICE, job(id="mine", target=None))
    with pytest.raises(JobForbidden):  # a non-owner cannot target another chat
        svc.put(BOB, job(id="sneaky", target={"channel": "web", "chat_id": "alice"}))
    with pytest.raises(JobForbidden):
        svc.put(BOB, {"id": "ev", "kind": "internal_event", "schedule": {"type": "interval", "seconds": 60},
                      "payload": {"event": "session_cleanup"}})
    for call in (svc.get, svc.delete, svc.pause, svc.resume, svc.run_now):
        with pytest.raises(JobNotFound):  # another chat's job looks absent
            call(BOB, "mine")
    with pytest.raises(JobForbidden):  # nor may its id be taken over
        svc.put(BOB, job(id="mine", target=None))
    assert _count(rt) == 1 and svc.get(ALICE, "mine")["version"] == 1
    owner_made = svc.put(OWNER, job(id="for-alice"))  # the owner may target any chat
    assert owner_made["owner_scope"] == "web:owner" and "for-alice" in [j["id"] for j in svc.list(ALICE)]


def test_bad_input_changes_nothing(rt: Runtime) -> None:
    svc = JobService(rt)
    for bad in (job(timezone="Nowhere/Land"), job(schedule={"type": "cron", "expression": "x"}), "not a job", None):
        with pytest.raises(JobError):
            svc.put(OWNER, bad)
    assert _count(rt) == 0 and entries.scores(rt.redis) == {}


def test_pause_resume_delete_run_now(rt: Runtime) -> None:
    svc = JobService(rt)
    svc.put(OWNER, job(id="j"))
    assert svc.pause(OWNER, "j")["state"] == "paused" and entries.scores(rt.redis) == {}
    with rt.db.begin() as conn:  # paused for long: its old due time is far in the past
        store.set_next_due(conn, "j", 5.0)
    resumed = svc.resume(OWNER, "j")
    assert resumed["state"] == "active" and resumed["next_due_at"] > time.time()
    assert entries.scores(rt.redis) == {"j": resumed["next_due_at"]}
    out = svc.run_now(ALICE, "j")
    assert rt.queue.jobs == [("j", out["queued_due_at"])]  # type: ignore[attr-defined]
    assert svc.delete(ALICE, "j")["deleted"] and _count(rt) == 0 and entries.scores(rt.redis) == {}
    with pytest.raises(JobNotFound):
        svc.get(OWNER, "j")


def test_config_and_builtin_jobs(tmp_path: Path, redis_url: str) -> None:
    daily = job(id="cfg.daily", target={"channel": "web", "chat_id": "alice"})
    cleanup = {"id": "cfg.cleanup", "kind": "internal_event", "schedule": {"type": "interval", "seconds": 300},
               "payload": {"event": "session_cleanup"}}
    rt = _runtime(tmp_path, redis_url, memory={"enabled": True}, scheduler={"jobs": [daily, cleanup]})
    stats = upsert_config_jobs(rt)
    svc = JobService(rt)
    ids = {j["id"]: j for j in svc.list(OWNER)}
    assert set(ids) == {"cfg.daily", "cfg.cleanup", MEMORY_MAINTENANCE_JOB} and stats["created"] == 3
    assert ids[MEMORY_MAINTENANCE_JOB]["source"] == "builtin" and ids["cfg.daily"]["source"] == "config"
    assert ids[MEMORY_MAINTENANCE_JOB]["schedule"] == {"type": "cron", "expression": "0 */4 * * *"}
    svc.pause(OWNER, "cfg.daily")  # allowed; put and delete are not
    for call in (lambda: svc.delete(OWNER, "cfg.daily"), lambda: svc.put(OWNER, job(id=MEMORY_MAINTENANCE_JOB))):
        with pytest.raises(JobForbidden, match="comes from"):
            call()
    # idempotent: state, next due and version kept
    again = upsert_config_jobs(rt)
    assert again["unchanged"] == 3
    after = {j["id"]: j for j in svc.list(OWNER)}
    assert after["cfg.daily"]["state"] == "paused"
    assert after["cfg.cleanup"]["next_due_at"] == ids["cfg.cleanup"]["next_due_at"]
    assert after["cfg.cleanup"]["version"] == ids["cfg.cleanup"]["version"]
    # the file changes: one job edited, one removed, session TTL set, memory maintenance off
    changed = {**cleanup, "schedule": {"type": "interval", "seconds": 600}}
    rt.config = Config.model_validate({"memory": {"enabled": True, "maintenance_enabled": False},
                                       "gateway": {"session_ttl_secs": 3600}, "scheduler": {"jobs": [changed]}})
    upsert_config_jobs(rt)
    final = {j["id"]: j for j in svc.list(OWNER)}
    assert set(final) == {"cfg.cleanup", SESSION_CLEANUP_JOB}
    assert final["cfg.cleanup"]["schedule"]["seconds"] == 600 and final["cfg.cleanup"]["version"] == 2
    assert final[SESSION_CLEANUP_JOB]["payload"] == {"event": "session_cleanup"}
    rt.db.dispose()


@pytest.mark.parametrize(("data", "field"), [
    ({"": 2 ** 53 + 1}, 'job[""]'),
    (job(payload={"prompt": "x", "metadata": {"a b": float("inf")}}), 'payload.metadata["a b"]'),
    (job(payload={"prompt": "x", "metadata": {"k" * 100: float("nan")}}), "payload.metadata[\"" + "k" * 61 + '..."]'),
])
def test_an_odd_key_is_named_readably_in_the_error(data: dict[str, Any], field: str) -> None:
    with pytest.raises(JobError) as e:
        parse_job(data, Config(), now=NOW)
    assert e.value.field == field
