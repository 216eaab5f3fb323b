"""Inbound webhooks through the real stack (web, worker, beat, Redis, the fake LLM): a signed POST
becomes an agent run stored before its 202, its result is read back, delivered and called back."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from typing import Iterator

import httpx
import pytest
from sqlalchemy import create_engine, text

from scripts.fake_llm import FakeLLM
from scripts.fake_telegram import FakeTelegram
from tests.hook_sink import (
    SECRET, TELEGRAM_CHAT, TELEGRAM_TOKEN, CallbackSink, count_runs, hooks_config, model_calls_with, post,
)
from tests.stack import Stack, wait_for
from tests.http_client import HTTP


@pytest.fixture(scope="module")
def sink() -> Iterator[CallbackSink]:
    s = CallbackSink()
    yield s
    s.close()


@pytest.fixture(scope="module")
def telegram() -> Iterator[FakeTelegram]:
    fake = FakeTelegram([TELEGRAM_TOKEN]).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def hstack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM, sink: CallbackSink,
           stack_database: str | None, telegram: FakeTelegram) -> Iterator[Stack]:
    """The stack, on SQLite and on PostgreSQL (the run's statements differ by dialect: ON CONFLICT, ||)."""
    from picobot.cli.embedded_redis import free_port

    port = free_port()
    s = Stack(tmp_path_factory.mktemp("hooks"), fake_llm.url, database_url=stack_database,
              config=hooks_config(fake_llm.url, port, sink, telegram.base_url))
    s.port = port
    try:
        s.start()
        yield s
    finally:
        s.stop()


def run_of(stack: Stack, run_id: str) -> dict:
    r = HTTP.get(f"{stack.http}/hooks/runs/{run_id}", headers={"Authorization": f"Bearer {stack.token}"}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def wait_status(stack: Stack, run_id: str, *statuses: str, timeout: float = 60) -> dict:
    return wait_for(lambda: (lambda run: run if run["status"] in statuses else None)(run_of(stack, run_id)),
                    timeout, f"run {run_id} never reached {statuses}")


def order(marker: str) -> dict:
    return {"order": {"id": marker}, "items": ["tea", "cups"], "note": {"gift": True}}


def test_signed_post_runs_and_result_is_read_back(hstack: Stack, llm: FakeLLM, sink: CallbackSink) -> None:
    marker = "ord" + uuid.uuid4().hex[:8]
    before = count_runs(hstack.database_url)
    r = post(hstack.http, "orders", order(marker))
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    assert count_runs(hstack.database_url) == before + 1  # stored before the 202
    run = wait_status(hstack, run_id, "completed", "failed")
    assert run["status"] == "completed", run
    # the template rendered dicts as JSON and list items by index; the fake model echoes its input
    assert f'Order {marker} of tea: {{"gift":true}}' in run["result"]
    assert model_calls_with(llm.url, marker) == 1
    # the callback got the result, signed with the hook's secret over "<timestamp>." + body
    wait_for(lambda: sink.at("/orders") and run_of(hstack, run_id)["callback"]["status"] == "delivered", 30,
             "no callback")
    got = [c for c in sink.at("/orders") if json.loads(c["body"])["run_id"] == run_id]
    assert len(got) == 1
    headers, body = got[0]["headers"], got[0]["body"]
    expected = hmac.new(SECRET.encode(), headers["X-PicoBot-Timestamp"].encode() + b"." + body, hashlib.sha256)
    assert headers["X-PicoBot-Signature"] == "sha256=" + expected.hexdigest()
    assert json.loads(body)["result"] == run["result"]


def test_idempotency_key_repeat_returns_the_same_run(hstack: Stack, llm: FakeLLM) -> None:
    marker = "idem" + uuid.uuid4().hex[:8]
    key = "delivery-" + marker
    first = post(hstack.http, "orders", order(marker), **{"Idempotency-Key": key})
    assert first.status_code == 202
    runs_after_first = count_runs(hstack.database_url)
    second = post(hstack.http, "orders", order(marker), **{"Idempotency-Key": key})  # a fresh signature
    assert second.status_code == 202
    assert second.json() == first.json()
    assert second.headers.get("Idempotent-Replayed") == "true"
    assert count_runs(hstack.database_url) == runs_after_first
    wait_status(hstack, first.json()["run_id"], "completed")
    third = post(hstack.http, "orders", order(marker), **{"Idempotency-Key": key})  # after it ran, too
    assert third.json() == first.json()
    assert model_calls_with(llm.url, marker) == 1


def test_agent_task_runs_in_the_target_chat_and_answers_there(hstack: Stack, llm: FakeLLM) -> None:
    marker = "chat" + uuid.uuid4().hex[:8]
    client = hstack.client("hook-chat")
    try:
        r = post(hstack.http, "chat", order(marker))
        assert r.status_code == 202
        done = client.recv_until(lambda f: f["type"] == "turn_completed" and marker in (f.get("final_text") or ""))
        assert done["session_id"] == client.session_id  # the run's dialog is the chat's current one
        run = wait_status(hstack, r.json()["run_id"], "completed")
        assert run["result"] == done["final_text"]
        assert run["callback"] is None
    finally:
        client.close()


def test_agent_task_to_an_external_chat_goes_out_through_the_outbox(hstack: Stack, llm: FakeLLM,
                                                                     telegram: FakeTelegram) -> None:
    marker = "tg" + uuid.uuid4().hex[:8]
    r = post(hstack.http, "alerts", order(marker), **{"Idempotency-Key": marker})
    run = wait_status(hstack, r.json()["run_id"], "completed")
    wait_for(lambda: any(marker in m["text"] for m in telegram.sent_to(TELEGRAM_CHAT, TELEGRAM_TOKEN)), 30,
             "the answer did not reach the Telegram chat")
    sent = [m["text"] for m in telegram.sent_to(TELEGRAM_CHAT, TELEGRAM_TOKEN) if marker in m["text"]]
    assert sent == [run["result"]]
    engine = create_engine(hstack.database_url)

    def statuses() -> list[str]:
        with engine.connect() as conn:
            return [row[0] for row in conn.execute(
                text("SELECT status FROM outbox WHERE channel = 'telegram' AND chat_id = :c"), {"c": TELEGRAM_CHAT})]

    try:  # marked sent once the platform answered: a moment after the chat shows the message
        wait_for(lambda: statuses() and all(s == "sent" for s in statuses()), 30,
                 "the outbox rows were not marked sent")
    finally:
        engine.dispose()


def test_callback_is_retried_after_a_500(hstack: Stack, llm: FakeLLM, sink: CallbackSink) -> None:
    sink.statuses["/flaky"] = [500]
    r = post(hstack.http, "flaky", order("flaky" + uuid.uuid4().hex[:6]))
    run_id = r.json()["run_id"]
    wait_for(lambda: (run_of(hstack, run_id)["callback"] or {}).get("status") == "delivered", 60,
             "the callback was not retried")
    run = run_of(hstack, run_id)
    assert run["callback"]["attempts"] == 2
    assert run["callback"]["last_error"] == "HTTP 500"
    assert [json.loads(c["body"])["run_id"] for c in sink.at("/flaky")].count(run_id) == 2


def test_callback_to_a_private_address_is_refused_by_the_network_guard(hstack: Stack, llm: FakeLLM) -> None:
    r = post(hstack.http, "private", order("priv" + uuid.uuid4().hex[:6]))
    run_id = r.json()["run_id"]
    wait_for(lambda: (run_of(hstack, run_id)["callback"] or {}).get("status") == "refused", 60, "not refused")
    run = run_of(hstack, run_id)
    assert run["status"] == "completed"
    assert run["callback"]["attempts"] == 1  # a refusal is final: no retry
    assert "tools.network.allow" in run["callback"]["last_error"]


def test_run_status_needs_a_paired_device(hstack: Stack, llm: FakeLLM) -> None:
    r = post(hstack.http, "orders", order("auth" + uuid.uuid4().hex[:6]))
    resp = HTTP.get(f"{hstack.http}/hooks/runs/{r.json()['run_id']}", timeout=10)
    assert resp.status_code == 401
    assert resp.json()["error"] == "not_paired"
    assert HTTP.get(f"{hstack.http}/api/hooks", timeout=10).status_code == 401


def test_runs_appear_in_the_jobs_page_history(hstack: Stack, llm: FakeLLM) -> None:
    r = post(hstack.http, "orders", order("jobs" + uuid.uuid4().hex[:6]))
    run_id = r.json()["run_id"]
    wait_status(hstack, run_id, "completed")
    data = HTTP.get(f"{hstack.http}/api/hooks", headers={"Authorization": f"Bearer {hstack.token}"}, timeout=10).json()
    assert {h["name"] for h in data["hooks"]} == {"orders", "chat", "flaky", "private", "small", "alerts"}
    listed = [x for x in data["runs"] if x["run_id"] == run_id]
    assert listed and listed[0]["status"] == "completed" and listed[0]["hook"] == "orders"


def test_secret_never_in_answers_logs_or_database(hstack: Stack, llm: FakeLLM) -> None:
    post(hstack.http, "orders", order("sec" + uuid.uuid4().hex[:6]))
    post(hstack.http, "orders", b"{not json")
    data = HTTP.get(f"{hstack.http}/api/hooks", headers={"Authorization": f"Bearer {hstack.token}"}, timeout=10)
    assert SECRET not in data.text
    assert SECRET not in hstack.all_logs()
    engine = create_engine(hstack.database_url)
    try:
        with engine.connect() as conn:
            for table in ("hook_runs", "inbound", "messages", "sessions"):
                rows = conn.execute(text(f"SELECT * FROM {table}")).all()
                assert SECRET not in repr(rows), table
    finally:
        engine.dispose()


def test_accepted_run_survives_a_dead_worker_and_a_redis_flush(hstack: Stack, llm: FakeLLM) -> None:
    marker = "crash" + uuid.uuid4().hex[:6]
    hstack.kill("w1")
    try:
        r = post(hstack.http, "orders", order(marker))
        assert r.status_code == 202  # accepted with no worker: it is stored
        run_id = r.json()["run_id"]
        hstack.redis().flushall()  # the turn task is gone with the broker's queues
        assert run_of(hstack, run_id)["status"] == "accepted"
    finally:
        hstack.start_worker("w1")
    run = wait_status(hstack, run_id, "completed", "failed", timeout=90)  # the sweeper re-enqueued it
    assert run["status"] == "completed"
    assert marker in run["result"]
