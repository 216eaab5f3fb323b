"""Usage reports where people read them, against a real web process and its database: `/usage` over the
socket, `picobot usage` as a subprocess, `GET /api/usage` over HTTP — hostile parameters included."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import insert

from picobot.storage.db import Database
from picobot.storage.models import UsageRow
from tests.stack import Stack, command_here
from tests.http_client import HTTP

pytestmark = pytest.mark.slow



def today() -> date:
    """The server's UTC day, read when a test runs (a module constant goes stale when the suite crosses midnight)."""
    return datetime.now(timezone.utc).date()


def day(ago: int) -> str:
    return (today() - timedelta(days=ago)).isoformat()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("usage"), fake_llm.url)
    try:
        s.start_web()  # commands and the API answer in the web process: no worker needed
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def db(stack: Stack) -> Iterator[Database]:
    d = Database(stack.database_url)
    yield d
    d.dispose()


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.http, headers={"Authorization": f"Bearer {stack.token}"}, timeout=20) as c:
        yield c


def seed(db: Database, *rows: dict[str, Any]) -> None:
    base = {"created_at": time.time(), "kind": "turn", "session_id": None, "turn_id": None, "run_id": None,
            "job_id": None, "channel": "cli_chat", "user": "", "agent": "default", "provider": "default",
            "model": "fake-model", "input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0, "cost_usd": 0.0}
    with db.begin() as conn:
        conn.execute(insert(UsageRow), [base | r for r in rows])


def test_usage_command_shows_this_dialog_and_this_user(stack: Stack, db: Database) -> None:
    c = stack.client()
    user, sid = f"cli_chat:{c.chat_id}", c.session_id
    month_start = today().replace(day=1)
    seed(db,
         {"day": day(0), "user": user, "session_id": sid, "input_tokens": 1200, "output_tokens": 300,
          "cached_input_tokens": 200, "cost_usd": 0.0125},
         {"day": day(0), "user": user, "session_id": sid, "kind": "subagent", "input_tokens": 100, "output_tokens": 10,
          "cost_usd": 0.001},
         # the same user in another dialog earlier this month (or today, on the 1st), and last month
         {"day": max(day(1), month_start.isoformat()), "user": user, "session_id": f"{sid}-other",
          "input_tokens": 5000, "output_tokens": 500, "cost_usd": 0.5},
         {"day": (month_start - timedelta(days=1)).isoformat(), "user": user, "session_id": sid,
          "input_tokens": 99999, "cost_usd": 99.0},
         {"day": day(0), "user": "cli_chat:someone-else", "session_id": "cli_chat:x:default", "input_tokens": 7,
          "cost_usd": 7.0})
    data = c.command("/usage --json")["data"]
    assert data["user"] == user and data["session_id"] == sid
    assert data["dialog"]["calls"] == 3 and data["dialog"]["input_tokens"] == 1200 + 100 + 99999
    assert data["month"]["month"] == today().isoformat()[:7]
    assert data["month"]["calls"] == 3 and data["month"]["cost_usd"] == pytest.approx(0.5135)
    today_calls = 3 if today().day == 1 else 2
    assert data["today"]["day"] == today().isoformat() and data["today"]["calls"] == today_calls
    text = c.command("/usage")["text"]
    assert f"This dialog ({sid.rsplit(':', 1)[1]}): 3 model call(s), 101,299 in, 200 of them cached" in text
    assert "You this month" in text and "$0.5135" in text and "$7" not in text
    bad = c.command("/usage everything please")
    assert bad["code"] == "usage" and "/usage [--json]" in bad["text"]
    assert "/usage" in c.command("/help")["text"]
    fresh = stack.client().command("/usage --json")["data"]  # a new chat: nothing spent, zeros, no error
    assert fresh["dialog"]["calls"] == 0 and fresh["today"]["cost_usd"] == 0.0
    c.close()


def usage_cli(stack: Stack, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return stack.cli("usage", *args, env=env)


def test_picobot_usage_prints_tables_json_and_refuses_bad_arguments(stack: Stack, db: Database,
                                                                    tmp_path: Path) -> None:
    agent = "cli-" + uuid.uuid4().hex[:6]
    seed(db, {"day": day(0), "user": "telegram:7", "agent": agent, "provider": "anthropic", "model": "claude-z",
              "input_tokens": 2000, "output_tokens": 100, "cost_usd": 0.02},
         {"day": day(2), "user": "web:\u7528\u6237\nnext", "agent": agent, "job_id": "nightly", "input_tokens": 10,
          "output_tokens": 1, "cost_usd": 0.001},
         {"day": day(20), "user": "telegram:7", "agent": agent, "input_tokens": 1, "cost_usd": 5.0})
    r = usage_cli(stack, "--by", "user,model", "--by", "job", "--since", "7d", "--agent", agent, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["by"] == ["user", "model", "job"] and report["filters"] == {"agent": agent}
    assert report["since"] == day(6) and report["until"] == day(0)
    assert [g["key"] for g in report["groups"]] == [
        {"user": "telegram:7", "model": "anthropic:claude-z", "job": None},
        {"user": "web:\u7528\u6237\nnext", "model": "default:fake-model", "job": "nightly"}]
    assert report["total"]["calls"] == 2 and report["total"]["cost_usd"] == pytest.approx(0.021)

    table = usage_cli(stack, "--by", "user", "--since", "30d", "--agent", agent).stdout.splitlines()
    assert table[0].startswith(f"Usage {day(29)} to {day(0)} (UTC days, agent {agent})")
    assert table[1].split() == ["USER", "CALLS", "INPUT", "CACHED", "OUTPUT", "COST"]
    assert table[2].split() == ["telegram:7", "2", "2,001", "0", "100", "$5.0200"]
    assert table[3].split() == ["web:\u7528\u6237", "next", "1", "10", "0", "1", "$0.0010"]  # one line per group
    assert table[4].split() == ["TOTAL", "3", "2,011", "0", "101", "$5.0210"]
    by_day = usage_cli(stack, "--agent", agent, "--user", "telegram:7", "--since", day(2)).stdout.splitlines()
    assert by_day[1].split()[0] == "DAY" and by_day[2].split()[:2] == [day(0), "1"]
    nothing = usage_cli(stack, "--agent", "nobody-at-all")
    assert nothing.returncode == 0 and "no model calls recorded" in nothing.stdout

    for args, words in [(["--by", "user,price"], "--by: 'price' is not one of user, agent, model, job, day, kind"),
                        (["--since", "2026-02-30"], "--since must be a date (YYYY-MM-DD)"),
                        (["--since", "today", "--until", "7d"], "is after --until"),
                        (["--since", "0d"], "--since: 0d must count 1 to 3660 days"),
                        (["--limit", "-1"], "--limit must be a whole number from 1 to 10000"),
                        (["--user", "web:a\x1b[31m"], "--user must be 1-512 printable characters")]:
        # the first as a subprocess, the rest by the command's own code in this process (an interpreter each: ~0.5 s)
        r = usage_cli(stack, *args) if args == ["--by", "user,price"] else command_here(stack, "usage", *args)
        assert r.returncode == 2 and r.stdout == "", (args, r.stdout)
        assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)

    home = tmp_path / "fresh-home"  # a home with no database yet: the schema is made, the answer is "nothing"
    home.mkdir()
    (home / "config.json").write_text((stack.home / "config.json").read_text())
    fresh = usage_cli(stack, "--json", env={**stack.env, "PICOBOT_HOME": str(home)})
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout)["total"]["calls"] == 0


def test_api_usage_groups_and_gives_the_daily_series(stack: Stack, db: Database, http: httpx.Client) -> None:
    agent = "api-" + uuid.uuid4().hex[:6]
    seed(db, {"day": day(1), "user": "web:a", "agent": agent, "job_id": "j1", "input_tokens": 300,
              "output_tokens": 30, "cost_usd": 0.03},
         {"day": day(1), "user": "web:b", "agent": agent, "input_tokens": 100, "output_tokens": 10, "cost_usd": 0.01})
    r = http.get("/api/usage", params={"by": "user", "since": "7d", "agent": agent})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [(g["key"]["user"], g["tokens"]) for g in body["groups"]] == [("web:a", 330), ("web:b", 110)]
    assert [d["day"] for d in body["days"]] == [day(n) for n in range(6, -1, -1)]
    assert [d["tokens"] for d in body["days"]] == [0, 0, 0, 0, 0, 440, 0]
    assert body["total"]["cost_usd"] == pytest.approx(0.04) and body["more"] is False
    both = http.get("/api/usage", params=[("by", "agent"), ("by", "job"), ("agent", agent), ("limit", "1")]).json()
    assert [g["key"] for g in both["groups"]] == [{"agent": agent, "job": "j1"}] and both["more"] is True
    assert http.get("/api/usage", params={"agent": agent}).json()["groups"] == []  # no by: totals and days only

    for params, words in [({"by": "cost"}, "by: 'cost' is not one of"), ({"since": "last week"}, "since must be"),
                          ({"until": "1999-01-01"}, "is after until"), ({"limit": "1e3"}, "limit must be"),
                          ({"user": "x" * 600}, "user must be"), ({"sort": "cost"}, "unknown parameter 'sort'")]:
        r = http.get("/api/usage", params=params)
        assert r.status_code == 400, (params, r.text)
        assert r.json()["error"] == "bad_request" and words in r.json()["message"], (params, r.text)
    assert HTTP.get(stack.http + "/api/usage", timeout=10).status_code == 401  # unpaired: nothing


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(by=st.lists(st.one_of(st.text(max_size=10), st.sampled_from(["user", "day", "model", "job,kind"])), max_size=3),
       since=st.one_of(st.text(max_size=12), st.from_regex(r"-?[0-9]{1,6}d", fullmatch=True),
                       st.dates().map(date.isoformat)),
       until=st.one_of(st.text(max_size=12), st.dates().map(date.isoformat)))
def test_hostile_api_parameters_get_a_400_or_an_answer(http: httpx.Client, by: list[str], since: str,
                                                       until: str) -> None:
    params = [("by", b) for b in by] + [("since", since), ("until", until)]
    r = http.get("/api/usage", params=params)
    assert r.status_code in (200, 400), (params, r.status_code, r.text[:300])
    body = r.json()
    if r.status_code == 400:
        assert body["error"] == "bad_request" and body["message"]
    else:
        assert body["since"] <= body["until"] and len(body["days"]) <= 3660
