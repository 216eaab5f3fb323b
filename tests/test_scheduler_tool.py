"""The scheduler_manage tool through the real agent loop, in process: the gateway records the input,
`drain_session` runs the turn against the fake LLM, a private Redis and SQLite; the fake LLM scripts
the tool calls and the test reads back what the tool answered (as the model saw it) and SQL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from picobot.config.loader import load_config
from picobot.gateway.inbound import InboundMessage
from picobot.gateway.intake import Gateway
from picobot.app import App as Runtime, build_runtime
from picobot.runtime.turn_runner import drain_session
from picobot.scheduler.manage import Actor, JobService
from tests.conftest import add_rule
from tests.stack import base_config

OWNER = Actor(channel="web", chat_id="admin", owner=True)


class _NoQueue:
    def enqueue_turn(self, session_id: str) -> None:  # the test drains by itself
        pass

    def enqueue_job(self, job_id: str, due_at: float | None) -> None:
        pass


@pytest.fixture
def runtime(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir()
    cfg = base_config(llm.url, 1)
    cfg["channels"] = {"feishu": {"enabled": False}}  # configured (a known target), never started
    (home / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-scheduler-tool")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PICOBOT_WORKSPACE", str(tmp_path / "ws"))
    rt = build_runtime(load_config(), _NoQueue(), migrate=True)
    yield rt
    rt.close()


def call(action: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "scheduler_manage", "arguments": {"action": action, **args}}]}


def turn(rt: Runtime, channel: str, chat_id: str, text: str) -> None:
    reply = Gateway(rt).submit(InboundMessage(channel, chat_id, "u1", text))
    assert reply.kind == "accepted", reply
    assert drain_session(rt, reply.session_id) == 1


def tool_results(llm, word: str) -> list[str]:  # type: ignore[no-untyped-def]
    """What the tool answered in the latest turn started by `word`, in call order."""
    bodies = [r["body"] for r in llm.requests() if r["path"].endswith("/chat/completions")]
    last = [b for b in bodies if any(m["role"] == "user" and word in json.dumps(m["content"]) for m in b["messages"])][-1]
    start = max(i for i, m in enumerate(last["messages"]) if m["role"] == "user")
    return [m["content"] for m in last["messages"][start:] if m["role"] == "tool"]


DAILY = {"id": "t.daily", "kind": "agent_task", "schedule": {"type": "cron", "expression": "0 9 * * *"},
         "payload": {"prompt": "say good morning"}}


def test_put_list_get_pause_resume_delete_from_a_web_chat(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "sched-all", call("put", job=DAILY), call("list"), call("get", job_id="t.daily"),
             call("pause", job_id="t.daily"), call("resume", job_id="t.daily"), call("delete", job_id="t.daily"),
             call("list"), {"content": "done"})
    turn(runtime, "web", "w-home", "sched-all please")
    put, listed, got, paused, resumed, deleted, after = tool_results(llm, "sched-all")
    saved = json.loads(put)
    assert saved["id"] == "t.daily" and saved["target"] == {"channel": "web", "chat_id": "w-home"}, saved
    assert saved["state"] == "active" and "09:00" in saved["schedule_text"]
    assert isinstance(saved["next_due_at"], str) and saved["next_due_at"][:2] == "20"  # ISO text for the model
    assert [j["id"] for j in json.loads(listed)] == ["t.daily"]
    assert json.loads(got)["runs"] == []
    assert json.loads(paused)["state"] == "paused" and json.loads(resumed)["state"] == "active"
    assert json.loads(deleted)["id"] == "t.daily"
    assert after == "No jobs."
    assert JobService(runtime).list(OWNER) == []


def test_a_feishu_chat_sees_and_changes_only_its_own_jobs(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    service = JobService(runtime)
    service.put(Actor(channel="web", chat_id="w-owner", owner=True), {**DAILY, "id": "web.job"})
    add_rule(llm, "fs-try", call("list"), call("get", job_id="web.job"), call("pause", job_id="web.job"),
             call("delete", job_id="web.job"), call("put", job={**DAILY, "id": "fs.job"}), call("list"),
             {"content": "ok"})
    turn(runtime, "feishu", "oc_team", "fs-try now")
    listed, got, paused, deleted, put, mine = tool_results(llm, "fs-try")
    assert listed == "No jobs."
    for refused in (got, paused, deleted):
        assert not refused.startswith("{") and "web.job" in refused, refused
    assert json.loads(put)["target"] == {"channel": "feishu", "chat_id": "oc_team"}
    assert [j["id"] for j in json.loads(mine)] == ["fs.job"]
    web_job = service.get(OWNER, "web.job")
    assert web_job["state"] == "active"  # the refused pause and delete changed nothing
    assert sorted(j["id"] for j in service.list(OWNER)) == ["fs.job", "web.job"]


def test_bad_arguments_name_the_field_and_store_nothing(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    bad_cron = {**DAILY, "schedule": {"type": "cron", "expression": "61 25 * * *"}}
    bad_zone = {**DAILY, "timezone": "Mars/Olympus"}
    bad_kind = {**DAILY, "kind": "rocket_launch"}
    add_rule(llm, "sched-bad", call("put"), call("put", job=bad_cron), call("put", job=bad_zone), call("put", job=bad_kind),
             call("get"), call("pause", job_id=""), call("explode", job_id="x"), call("get", job_id="nope"),
             call("put", job_id="other", job=DAILY), {"content": "ok"})
    turn(runtime, "web", "w-bad", "sched-bad go")
    results = tool_results(llm, "sched-bad")
    expected = ["job:", "schedule.expression", "timezone", "kind", "job_id:", "job_id:", "action", "nope", "job.id:"]
    assert len(results) == len(expected)
    for text, field in zip(results, expected):
        assert not text.startswith(("{", "[")) and field in text, (field, text)
    assert JobService(runtime).list(OWNER) == []
