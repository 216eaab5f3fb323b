"""Automatic dialog titles (`titles`): written once, in the background, after a dialog's first answer.

A real stack (web, worker, Redis, SQLite) and the fake LLM: the title request is told apart from the
turn's by its user message (`Conversation to title:` then `User: <first message>`), so a rule matching
`User: <token>` answers only it. The sanitiser is also checked on its own with hypothesis.
"""

from __future__ import annotations

import json
import unicodedata
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import sqlalchemy as sa
from celery import Celery
from hypothesis import example, given, settings
from hypothesis import strategies as st

from picobot.errors import ConfigError
from picobot.titles import TITLE_TASK
from picobot.titles.prompt import INSTRUCTION, REQUEST_HEAD, sanitise
from tests.conftest import add_rule
from tests.stack import API_KEY, Stack, WsClient, base_config, wait_for
from tests.test_config import load_error
from tests.http_client import HTTP

TITLE_MARK = INSTRUCTION.split(".")[0]  # "You name conversations"


@pytest.fixture(scope="module")
def titles_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    from picobot.cli.embedded_redis import free_port

    tmp = tmp_path_factory.mktemp("titles")
    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["models"]["light"] = {"model_id": "light-model"}
    cfg["titles"] = {"model": "light", "max_chars": 40}  # provider: the agent's
    s = Stack(tmp, fake_llm.url, config=cfg)
    s.port = port
    s.start(workers=1, beat=False)
    yield s
    s.stop()


def _title_requests(llm, token: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The title calls the fake received for the dialog whose first message holds `token`."""
    found = HTTP.get(llm.url + "/_fake/requests").json()["requests"]
    out = []
    for r in found:
        messages = (r.get("body") or {}).get("messages", [])
        if any(TITLE_MARK in json.dumps(m.get("content")) for m in messages if m.get("role") == "system") \
                and token in json.dumps(messages[-1].get("content")):
            out.append(r)
    return out


def _row(stack: Stack, session_id: str) -> Any:
    engine = sa.create_engine(stack.database_url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT title, title_source, title_attempted_at FROM sessions WHERE id = :i"),
                                {"i": session_id}).one()
    finally:
        engine.dispose()


def _outcome(stack: Stack, session_id: str, outcome: str) -> None:
    """Wait for the worker's line saying how the title task of the dialog ended."""
    wait_for(lambda: f"title of {session_id}: {outcome}" in stack.all_logs(), 60,
             f"title task of {session_id} ending {outcome}")


def _client(stack: Stack) -> WsClient:
    return stack.client(f"titles-{uuid.uuid4().hex[:10]}")


def test_the_title_is_written_once_in_the_background_after_the_first_answer(titles_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    token = uuid.uuid4().hex[:8]
    # the title answers late: the dialog goes on meanwhile (it is no part of any turn)
    add_rule(llm, f"User: {token}", {"content": "Weekend in Lisbon", "delay_ms": 4000})
    client = _client(titles_stack)
    assert client.ask(f"{token} plan a weekend in Lisbon")["status"] == "completed"
    assert client.ask(f"{token} and what about Porto?")["status"] == "completed"
    assert not [f for f in client.frames if f["type"] == "session_updated"]  # still being written
    update = client.recv_until(lambda f: f["type"] == "session_updated")
    assert update == {"type": "session_updated", "session_id": client.session_id, "title": "Weekend in Lisbon",
                      "title_source": "auto"}
    calls = _title_requests(llm, token)
    assert len(calls) == 1 and calls[0]["body"]["model"] == "light-model"  # titles.model, the agent's provider
    prompt = calls[0]["body"]["messages"][-1]["content"]
    assert prompt.startswith(REQUEST_HEAD) and f"User: {token} plan a weekend in Lisbon" in prompt
    assert "Assistant: You said:" in prompt and "Porto" not in prompt  # the first exchange only
    assert "Weekend in Lisbon" in client.command("/sessions")["text"]
    row = _row(titles_stack, client.session_id)
    assert (row.title, row.title_source) == ("Weekend in Lisbon", "auto")

    client.ask(f"{token} and Faro?")
    other = _client(titles_stack)  # a later dialog's title: the maintenance queue got past anything enqueued before
    other.ask(f"{uuid.uuid4().hex[:8]} hello")
    _outcome(titles_stack, other.session_id, "titled")
    assert len(_title_requests(llm, token)) == 1  # not again after later answers
    assert _row(titles_stack, client.session_id).title == "Weekend in Lisbon"
    client.close()
    other.close()


def _title_calls_in_metrics(stack: Stack, outcome: str) -> float:
    """`picobot_model_calls_total` of the light model (only title calls use it here), once a sample arrived."""
    from prometheus_client.parser import text_string_to_metric_families

    text = HTTP.get(stack.http + "/metrics", timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "picobot_model_calls_total" and s.labels.get("model") == "light-model"
               and s.labels.get("provider") == "default" and s.labels.get("outcome") == outcome)


def test_the_title_call_is_reported_like_any_model_call(titles_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    """Through `picobot_model_call` (kind `title`): metrics count it, and a usage ledger can record it."""
    token = uuid.uuid4().hex[:8]
    add_rule(llm, f"User: {token}", {"content": "Counted", "usage": {"input_tokens": 70, "output_tokens": 2}})
    client = _client(titles_stack)
    client.ask(f"{token} count me")
    _outcome(titles_stack, client.session_id, "titled")
    wait_for(lambda: _title_calls_in_metrics(titles_stack, "ok") >= 1, 30, "the title call in /metrics")
    client.close()


def test_a_rename_before_the_title_call_ends_wins(titles_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    token = uuid.uuid4().hex[:8]
    add_rule(llm, f"User: {token}", {"content": "Automatic Name", "delay_ms": 5000})
    client = _client(titles_stack)
    client.ask(f"{token} hello there")
    wait_for(lambda: _title_requests(llm, token), 30, "the title call to start")
    assert client.command("/rename My own name")["data"]["title"] == "My own name"
    _outcome(titles_stack, client.session_id, "renamed")
    row = _row(titles_stack, client.session_id)
    assert (row.title, row.title_source) == ("My own name", "user")
    assert "My own name" in client.command("/sessions")["text"]
    assert not [f for f in client.frames if f["type"] == "session_updated"]
    client.close()


def test_a_dialog_named_with_new_gets_no_automatic_title(titles_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    token = uuid.uuid4().hex[:8]
    client = _client(titles_stack)
    client.command("/new Named by hand")
    client.session_id = client.frames[-1]["session_id"]
    client.ask(f"{token} hi")
    _outcome(titles_stack, client.session_id, "skipped")
    assert _title_requests(llm, token) == []
    assert _row(titles_stack, client.session_id).title == "Named by hand"
    client.close()


def test_a_failing_title_call_leaves_the_preview_and_is_not_retried(titles_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    token = uuid.uuid4().hex[:8]
    add_rule(llm, f"User: {token}", {"error": {"status": 500, "message": "title model down"}}, repeat=True)
    client = _client(titles_stack)
    client.ask(f"{token} first question")
    _outcome(titles_stack, client.session_id, "failed")
    row = _row(titles_stack, client.session_id)
    assert row.title == "" and row.title_source == "" and row.title_attempted_at is not None
    assert len(_title_requests(llm, token)) == 1  # no retries inside the attempt either

    # the task delivered again (a broker re-delivery, a restarted worker): the attempt is spent
    Celery(broker=titles_stack.redis_url).send_task(TITLE_TASK, args=[client.session_id], queue="maintenance")
    _outcome(titles_stack, client.session_id, "skipped")
    client.ask(f"{token} second question")
    assert len(_title_requests(llm, token)) == 1
    sessions = HTTP.get(f"{titles_stack.http}/api/sessions", params={"chat_id": client.chat_id, "channel": "cli_chat"},
                         headers={"Authorization": f"Bearer {titles_stack.token}"}, timeout=10).json()["sessions"]
    assert [(s["title"], s["preview"]) for s in sessions] == [("", f"{token} first question")]
    listed = client.command("/sessions")  # every channel's list names it by its first message
    assert f"“{token} first question”" in listed["text"]
    assert listed["data"]["sessions"][0]["preview"] == f"{token} first question"
    assert API_KEY not in titles_stack.all_logs()
    client.close()


def test_hostile_model_output_is_sanitised(titles_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    token = uuid.uuid4().hex[:8]
    hostile = '## **"Ti\ud800tle\x1b[31m\u202e 标题"**\nsecond line\n' + "x" * 100_000
    # json.dumps escapes the lone surrogate (\\ud800): the fake streams it back as the SDK parses it
    HTTP.post(llm.url + "/_fake/rules", content=json.dumps({"match": f"User: {token}", "responses": [
        {"content": hostile}]}), headers={"Content-Type": "application/json"}).raise_for_status()
    client = _client(titles_stack)
    client.ask(f"{token} hello")
    update = client.recv_until(lambda f: f["type"] == "session_updated")
    assert update["title"] == "Title 标题"
    assert _row(titles_stack, client.session_id).title == "Title 标题"
    client.close()

    token = uuid.uuid4().hex[:8]
    add_rule(llm, f"User: {token}", {"content": "word " * 5_000})
    client = _client(titles_stack)
    client.ask(f"{token} hello")
    title = client.recv_until(lambda f: f["type"] == "session_updated")["title"]
    assert len(title) <= 40 and title.endswith("…") and "\n" not in title
    client.close()


# --- the sanitiser on its own ------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(reply=st.text(max_size=500), max_chars=st.integers(min_value=8, max_value=256))
@example(reply="0*.", max_chars=8)  # markup uncovered by stripping the final punctuation
@example(reply="«Title».*", max_chars=8)
def test_any_reply_becomes_one_clean_line_within_the_cap(reply: str, max_chars: int) -> None:
    title = sanitise(reply, max_chars)
    assert len(title) <= max_chars
    assert title == title.strip() and "\n" not in title and "\r" not in title
    assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in title)
    assert not title.startswith(('"', "'", "“", "*", "#", "`")) and not title.endswith(('"', "'", "”", "*", "`"))
    title.encode("utf-8")  # no lone surrogates: storable and sendable as is


@pytest.mark.parametrize("reply, title", [
    ('"Trip to Paris"', "Trip to Paris"),
    ("Title: Plans for the week.\nMore", "Plans for the week"),
    ("# 巴黎旅行计划", "巴黎旅行计划"),
    ("«Voyage à Paris»", "Voyage à Paris"),
    ("\n\n  \n", ""),
    ('""', ""),
])
def test_typical_model_habits_are_removed(reply: str, title: str) -> None:
    assert sanitise(reply, 60) == title


# --- config ------------------------------------------------------------------------------


PROVIDERS: dict[str, Any] = {
    "providers": {"default": {"type": "openai", "api_key": "sk-test-0123456789abcdef"}},
    "models": {"default": {"model_id": "gpt-test"}, "light": {"model_id": "gpt-light"}},
}


@pytest.mark.parametrize("titles, where", [
    ({"provider": "nope"}, "titles.provider"),
    ({"model": "heavy"}, "titles.model"),
    ({"model": 5}, "titles.model"),
    ({"max_chars": -1}, "titles.max_chars"),
    ({"max_chars": 0}, "titles.max_chars"),
    ({"max_chars": 10**12}, "titles.max_chars"),
    ({"max_chars": True}, "titles.max_chars"),
    ({"max_chars": "sixty"}, "titles.max_chars"),
    ({"max_chars": 12.5}, "titles.max_chars"),
    ({"timeout_secs": 0}, "titles.timeout_secs"),
    ({"timeout_secs": -3}, "titles.timeout_secs"),
    ({"timeout_secs": 1e308}, "titles.timeout_secs"),
    ({"timeout_secs": "\ud800"}, "titles.timeout_secs"),
    ({"enabled": [1]}, "titles.enabled"),
    ({"colour": "blue"}, "titles.colour"),
    ("on", "titles"),
])
def test_config_junk_is_rejected_with_its_key_path(tmp_path: Path, titles: Any, where: str) -> None:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    error = load_error(home, cwd, {**PROVIDERS, "titles": titles})
    assert error.key_path == where, error
    assert isinstance(error, ConfigError)


def test_a_valid_titles_section_is_accepted(tmp_path: Path) -> None:
    from tests.test_config import load

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    cfg = load(home, cwd, data={**PROVIDERS, "titles": {"provider": "default", "model": "light", "max_chars": 80,
                                                         "timeout_secs": 10, "enabled": False}})
    assert (cfg.titles.provider, cfg.titles.model, cfg.titles.max_chars, cfg.titles.enabled) == (
        "default", "light", 80, False)
    assert load(home, cwd, data=PROVIDERS).titles.enabled is True  # on by default


# --- the SQL on SQLite and PostgreSQL ------------------------------------------------------


def test_the_attempt_and_the_conditional_write_on_both_databases(db_url: str) -> None:
    import time

    from picobot.storage import sessions
    from picobot.storage import titles as sql
    from picobot.storage.db import Database
    from picobot.storage.models import MessageRow

    d = Database(db_url)
    try:
        d.migrate()
        with d.write() as s:
            auto = sessions.create(s, "web", "t-sql", agent="default")
            named = sessions.create(s, "web", "t-sql", title="By hand")
            fresh = sessions.create(s, "web", "t-sql")
            s.add_all([MessageRow(session_id=auto.id, position=0, role="user", content="  hello\n there ",
                                  created_at=time.time()),
                       MessageRow(session_id=auto.id, position=1, role="assistant", content="", created_at=time.time(),
                                  tool_calls=[{"id": "c1", "name": "get_time", "arguments": "{}"}]),
                       MessageRow(session_id=auto.id, position=2, role="assistant",
                                  content=[{"type": "text", "text": "Hi!"}], created_at=time.time())])
            ids = (auto.id, named.id, fresh.id)
        with d.begin() as conn:
            assert sql.first_exchange(conn, ids[0]) == ("  hello\n there ", "Hi!")  # the answer after the tool call
            assert sql.claim_attempt(conn, ids[0], time.time()) is True
            assert sql.claim_attempt(conn, ids[0], time.time()) is False  # one attempt
            assert sql.claim_attempt(conn, ids[1], time.time()) is False  # a person named it
            assert sql.write_auto(conn, ids[1], "Auto") is False
            assert sql.write_auto(conn, ids[2], "Auto") is True
            assert sql.write_auto(conn, ids[2], "Again") is False  # written once
        with d.write() as s:
            sessions.rename(s, sessions.get(s, ids[0]), "Renamed first")
        with d.begin() as conn:
            assert sql.write_auto(conn, ids[0], "Auto") is False  # the rename came first and wins
        with d.read() as s:
            assert [(r.title, r.title_source) for r in map(lambda i: sessions.get(s, i), ids)] == [
                ("Renamed first", "user"), ("By hand", "user"), ("Auto", "auto")]
            assert sessions.previews(s, list(ids)) == {ids[0]: "hello there"}
    finally:
        d.dispose()
