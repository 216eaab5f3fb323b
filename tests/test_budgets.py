"""Budgets through a real stack (web, two workers, beat, Redis, the fake LLM): a call that would cross a
limit is never sent and its turn ends `budget_exceeded`; a FLUSHALL does not reset spend; concurrent
turns of one user on two workers overshoot by at most one call's estimate; a sub-agent run counts
toward its parent's dialog; a scheduled job over its budget is recorded and its chat told once.

Sizes: every call is estimated at >= 20000 tokens (budgets.output_estimate_tokens, the fake model
has no max_tokens) plus its input, and the fake reports the usage each rule says.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import uuid
from typing import Any, Iterator

import httpx
import pytest
import sqlalchemy

from tests.conftest import add_rule
from tests.stack import Stack, base_config, command_here, wait_for
from tests.http_client import HTTP

OUTPUT_ESTIMATE = 20000
BUDGETS = {"session": {"tokens": 40000}, "user": {"daily_tokens": 60000}, "job": {"daily_tokens": 30000},
           "output_estimate_tokens": OUTPUT_ESTIMATE}


@pytest.fixture(scope="module")
def bstack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("budgets")
    cfg = base_config(fake_llm.url, 0, max_message_chars=200_000,
                      openai_api={"enabled": True, "timeout_secs": 60})
    cfg["budgets"] = BUDGETS
    s = Stack(tmp, fake_llm.url, config=cfg)
    cfg["gateway"]["port"] = s.port
    (s.home / "config.json").write_text(json.dumps(cfg))
    try:
        s.start(workers=2)
        yield s
    finally:
        s.stop()


def sql(stack: Stack, query: str, *params: Any) -> list[Any]:
    eng = sqlalchemy.create_engine(stack.database_url)
    try:
        with eng.connect() as c:
            return list(c.exec_driver_sql(query, params).all())
    finally:
        eng.dispose()


def sent(llm, text: str) -> int:  # type: ignore[no-untyped-def]
    """How many chat requests the fake received whose last user message holds `text`."""
    reqs = HTTP.get(llm.url + "/_fake/requests").json()["requests"]
    n = 0
    for r in reqs:
        body = r.get("body") or {}
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        if users and text in json.dumps(users[-1].get("content")):
            n += 1
    return n


def estimate_of(error: str) -> int:
    """The estimate a refusal names ("this call needs about 23,456")."""
    return int(re.search(r"needs about ([\d,]+)", error).group(1).replace(",", ""))  # type: ignore[union-attr]


def test_the_call_that_would_cross_the_session_limit_is_never_sent_even_after_a_flushall(bstack, llm) -> None:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:6]
    add_rule(llm, f"spend-{tag}", {"content": "spent", "usage": {"input_tokens": 1000, "output_tokens": 29000}})
    add_rule(llm, f"cross-{tag}", {"content": "must never be sent"}, repeat=True)
    c = bstack.client(f"sess-{tag}")
    first = c.ask(f"spend-{tag}")
    assert first["status"] == "completed", first
    over = c.ask(f"cross-{tag} one")
    assert over["status"] == "budget_exceeded", over
    assert "budgets.session.tokens" in over["error"] and "30,000 of 40,000 tokens" in over["error"], over
    assert "/new" in over["error"]  # a dialog's budget never resets
    assert sent(llm, f"cross-{tag}") == 0
    [(status, error)] = sql(bstack, "SELECT status, error FROM turns WHERE id = ?", over["turn_id"])
    assert status == "budget_exceeded" and "budgets.session.tokens" in error
    stored = sql(bstack, "SELECT content FROM messages WHERE session_id = ? ORDER BY position", c.session_id)
    assert "budgets.session.tokens" in stored[-1][0]  # the dialog shows why

    bstack.redis().flushall()
    again = c.ask(f"cross-{tag} two", timeout=90)
    assert again["status"] == "budget_exceeded" and "30,000 of 40,000" in again["error"], again
    assert sent(llm, f"cross-{tag}") == 0
    [(rows, tokens)] = sql(bstack, "SELECT COUNT(*), SUM(input_tokens + output_tokens) FROM usage_records "
                                   "WHERE session_id = ?", c.session_id)
    assert (rows, tokens) == (1, 30000)  # the ledger: one row for the one call made
    c.close()

    def refusals() -> float:  # /metrics: the worker's samples arrive with its next heartbeat
        from prometheus_client.parser import text_string_to_metric_families

        text = HTTP.get(bstack.http + "/metrics", timeout=10).text
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "picobot_budget_refusals_total" and s.labels.get("channel") == "cli_chat")

    wait_for(lambda: refusals() >= 2, 30, "the two refusals in /metrics")


def test_concurrent_turns_of_one_user_on_two_workers_overshoot_by_at_most_one_estimate(bstack, llm) -> None:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:6]
    # each call uses 22000 tokens, no more than its estimate (>= 20000 + the 8000-character input / 4)
    add_rule(llm, f"race-{tag}", {"content": "raced", "delay_ms": 2500,
                                  "usage": {"input_tokens": 2000, "output_tokens": 20000}}, repeat=True)
    chat = f"race-{tag}"
    c = bstack.client(chat)
    accepted = []
    for i in range(5):  # five dialogs of one user (sender = the chat): their turns run at once
        if i:
            assert c.command("/new")["type"] == "command"
        acc = c.say(f"race-{tag} {i} " + "x" * 8000)
        assert acc["type"] == "accepted", acc
        accepted.append(acc["seq"])
    sessions = sorted({f["session_id"] for f in c.frames if f.get("type") == "accepted"})
    assert len(sessions) == 5
    marks = ", ".join("?" * len(sessions))

    def finished() -> list[Any]:  # a socket follows one dialog: read the five turns' outcomes from SQL
        rows = sql(bstack, f"SELECT status, error, worker FROM turns WHERE session_id IN ({marks})", *sessions)
        return rows if len(rows) == 5 and all(r[0] != "running" for r in rows) else []

    done = [{"status": st, "error": err, "worker": w} for st, err, w in wait_for(finished, 90, "the turns never ended")]
    statuses = sorted(d["status"] for d in done)
    refused = [d for d in done if d["status"] == "budget_exceeded"]
    assert refused and "completed" in statuses, statuses
    assert all("budgets.user.daily_tokens" in d["error"] for d in refused), refused
    assert all("resets at" in d["error"] and "00:00 UTC" in d["error"] for d in refused)
    estimate = max(estimate_of(d["error"]) for d in refused)
    [(spent,)] = sql(bstack, "SELECT SUM(input_tokens + output_tokens) FROM usage_records WHERE user = ?",
                     f"cli_chat:{chat}")
    assert spent <= BUDGETS["user"]["daily_tokens"] + estimate, (spent, estimate, statuses)
    assert sent(llm, f"race-{tag}") == statuses.count("completed")
    assert {d["worker"] for d in done}  # which workers ran them is the broker's choice; usually both
    c.close()


def test_a_sub_agent_run_counts_toward_its_parent_dialog(bstack, llm) -> None:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:6]
    task = {"name": "task", "arguments": {"description": "count", "prompt": f"child-{tag}: count"}}
    add_rule(llm, f"parent-{tag}", {"tool_calls": [task], "usage": {"input_tokens": 100, "output_tokens": 10}},
             {"content": "parent final: must never be sent"})
    add_rule(llm, f"child-{tag}", {"content": "child says 7", "usage": {"input_tokens": 0, "output_tokens": 20000}})
    c = bstack.client(f"sub-{tag}")
    done = c.ask(f"parent-{tag}", timeout=90)
    # 110 (parent) + 20000 (its sub-agent) + the next call's >= 20000 estimate > 40000
    assert done["status"] == "budget_exceeded" and "budgets.session.tokens" in done["error"], done
    assert "20,110 of 40,000" in done["error"], done
    assert sent(llm, f"parent-{tag}") == 1 and sent(llm, f"child-{tag}") == 1
    rows = sql(bstack, "SELECT kind, run_id, output_tokens FROM usage_records WHERE session_id = ? ORDER BY id",
               c.session_id)
    assert [(k, o) for k, _r, o in rows] == [("turn", 10), ("subagent", 20000)], rows
    [(run_id,)] = sql(bstack, "SELECT id FROM agent_runs WHERE session_id = ?", c.session_id)
    assert rows[1][1] == run_id
    c.close()


def _jobs(stack: Stack, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return stack.cli("jobs", *args, stdin=stdin)


def _run_job(stack: Stack, job_id: str, runs_before: int) -> dict[str, Any]:
    r = _jobs(stack, "run", job_id)
    assert r.returncode == 0, r.stderr

    def ended() -> list[dict[str, Any]]:  # read in this process: a poll per interpreter start cost ~1 s of CPU
        out = json.loads(command_here(stack, "jobs", "show", job_id, "--json").stdout)["runs"]
        done = [x for x in out if x["outcome"] != "running"] if len(out) > runs_before else []
        return done if len(done) > runs_before else []

    return wait_for(ended, 90, "the job run never ended")[0]


def test_a_job_over_its_budget_is_recorded_and_its_chat_told_once(bstack, llm) -> None:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:6]
    chat, job_id = f"jobchat-{tag}", f"budget.{tag}"
    add_rule(llm, f"job-{tag}", {"content": "job ran", "usage": {"input_tokens": 0, "output_tokens": 20000}},
             repeat=True)
    job = {"id": job_id, "kind": "agent_task", "schedule": {"type": "cron", "expression": "0 3 1 1 *"},
           "target": {"channel": "cli_chat", "chat_id": chat},
           "payload": {"prompt": f"job-{tag} go", "fresh_session": True}}
    assert _jobs(bstack, "add", "-", stdin=json.dumps(job)).returncode == 0
    first = _run_job(bstack, job_id, 0)
    assert first["outcome"] == "ok", first  # 20000 of the job's 30000 a day
    second = _run_job(bstack, job_id, 1)  # 20000 + >= 20000 estimate > 30000
    assert second["outcome"] == "budget_exceeded" and "budgets.job.daily_tokens" in second["error"], second
    third = _run_job(bstack, job_id, 2)
    assert third["outcome"] == "budget_exceeded", third
    assert sent(llm, f"job-{tag}") == 1  # the refused runs sent nothing
    told = sql(bstack, "SELECT m.content FROM messages m JOIN sessions s ON s.id = m.session_id "
                       "WHERE s.chat_id = ? AND m.marker = 'scheduled_failure'", chat)
    assert len(told) == 1 and job_id in told[0][0] and "budgets.job.daily_tokens" in told[0][0], told
    [(job_rows,)] = sql(bstack, "SELECT COUNT(*) FROM usage_records WHERE job_id = ?", job_id)
    assert job_rows == 1
    assert _jobs(bstack, "rm", job_id).returncode == 0


def test_the_openai_compatible_api_answers_a_refused_call_with_429_budget_exceeded(bstack, llm) -> None:  # type: ignore[no-untyped-def]
    import openai

    tag = uuid.uuid4().hex[:6]
    r = bstack.cli("apikeys", "create", f"budget-{tag}", "--json")
    assert r.returncode == 0, r.stderr
    api = openai.OpenAI(base_url=bstack.http + "/v1", api_key=json.loads(r.stdout)["key"], max_retries=0, timeout=60)
    big = f"v1-{tag} " + "y" * 100_000  # 25000 tokens of input + the 20000 output estimate > the dialog's 40000
    with pytest.raises(openai.RateLimitError) as exc:
        api.chat.completions.create(model="picobot", messages=[{"role": "user", "content": big}])
    assert exc.value.body["code"] == "budget_exceeded", exc.value.body  # type: ignore[index]
    assert "budgets.session.tokens" in exc.value.body["message"]  # type: ignore[index]
    assert sent(llm, f"v1-{tag}") == 0


def test_a_sub_agent_of_a_job_run_is_charged_to_the_job(bstack, llm) -> None:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:6]
    job_id = f"delegating.{tag}"
    task = {"name": "task", "arguments": {"description": "sum", "prompt": f"jobchild-{tag}: add"}}
    add_rule(llm, f"jobparent-{tag}", {"tool_calls": [task], "usage": {"input_tokens": 10, "output_tokens": 1}},
             {"content": "job done", "usage": {"input_tokens": 20, "output_tokens": 2}})
    add_rule(llm, f"jobchild-{tag}", {"content": "3", "usage": {"input_tokens": 100, "output_tokens": 5}})
    job = {"id": job_id, "kind": "silent_agent_task", "schedule": {"type": "cron", "expression": "0 3 1 1 *"},
           "target": {"channel": "cli_chat", "chat_id": f"owner-{tag}"}, "payload": {"prompt": f"jobparent-{tag}"}}
    assert _jobs(bstack, "add", "-", stdin=json.dumps(job)).returncode == 0
    assert _run_job(bstack, job_id, 0)["outcome"] == "ok"
    rows = sql(bstack, "SELECT kind, job_id, input_tokens FROM usage_records WHERE turn_id = "
                       "(SELECT turn_id FROM job_runs WHERE job_id = ?) ORDER BY id", job_id)
    assert rows == [("turn", job_id, 10), ("subagent", job_id, 100), ("turn", job_id, 20)], rows
    assert _jobs(bstack, "rm", job_id).returncode == 0
