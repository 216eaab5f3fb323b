"""Outbound delivery across real processes: web, a Celery worker and beat on their own redis-server.

The platform is the loopback HTTP sink of tests/channel_sink.py (the test channel type
`tests.channel_sink:SinkAdapter`); the test writes outbox rows and events straight into the
stack's database and sends tasks through its broker, as the web process would.
"""

from __future__ import annotations

from typing import Iterator

import httpx
import pytest
from celery import Celery
from sqlalchemy import func, select

from picobot.channels import events, outbound
from picobot.runtime.task_names import CHANNEL_EVENT_TASK, DELIVER_TASK, QUEUE_OUTBOUND
from picobot.storage.db import Database
from picobot.storage.models import ChannelEventRow, InboundRow, OutboxRow
from tests.channel_sink import Sink, sink_channel
from tests.conftest import add_rule
from tests.stack import ROOT, Stack, base_config, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sink() -> Iterator[Sink]:
    s = Sink()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def cstack(tmp_path_factory: pytest.TempPathFactory, fake_llm, sink: Sink) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    cfg = base_config(fake_llm.url, 0)
    cfg["memory"] = {"enabled": False}
    cfg["channels"] = {"sink": sink_channel(sink, allow_from=["u_friend"])}
    s = Stack(tmp_path_factory.mktemp("chstack"), fake_llm.url, config=cfg)
    s.env["PYTHONPATH"] = str(ROOT)  # the worker imports the test channel type
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def db(cstack: Stack) -> Iterator[Database]:
    d = Database(cstack.database_url)
    yield d
    d.dispose()


@pytest.fixture(scope="module")
def broker(cstack: Stack) -> Iterator[Celery]:
    app = Celery(broker=cstack.redis_url)
    yield app
    app.close()


def _record(db: Database, chat: str, *texts: str) -> None:
    with db.begin() as conn:
        for text in texts:
            outbound.record_message(conn, "sink", chat, text)


def _wake(broker: Celery, chat: str) -> None:
    broker.send_task(DELIVER_TASK, args=["sink", chat], queue=QUEUE_OUTBOUND)


def _statuses(db: Database, chat: str) -> list[str]:
    with db.read() as s:
        return list(s.scalars(select(OutboxRow.status).where(OutboxRow.chat_id == chat).order_by(OutboxRow.id)))


def _keys_once(sink: Sink) -> None:
    keys = [p["key"] for p in sink.delivered()]
    assert len(keys) == len(set(keys)), "a delivery was sent twice"


def test_order_per_chat_under_transient_failures_and_parallel_chats(db: Database, broker: Celery, sink: Sink) -> None:
    chats = [f"ord{i}" for i in range(4)]
    for i, chat in enumerate(chats):
        sink.fail(chat, *[(503, None)] * i)  # chat i fails i times first
        _record(db, chat, *[f"{chat}-{n}" for n in range(5)])
    for chat in chats:
        _wake(broker, chat)
    wait_for(lambda: all(len(sink.texts(c)) == 5 for c in chats), 60, "not every chat was delivered")
    for chat in chats:
        assert sink.texts(chat) == [f"{chat}-{n}" for n in range(5)]
        assert _statuses(db, chat) == ["sent"] * 5
    _keys_once(sink)


def test_a_lost_task_is_replaced_by_the_sweeper(db: Database, sink: Sink) -> None:
    _record(db, "lost1", "nobody woke me", "me neither")  # no task sent at all
    wait_for(lambda: len(sink.texts("lost1")) == 2, 40, "the sweeper never re-enqueued the lane")
    assert sink.texts("lost1") == ["nobody woke me", "me neither"]


def _unsent(db: Database) -> int:
    with db.read() as s:
        return int(s.scalar(select(func.count()).select_from(OutboxRow).where(OutboxRow.status != "sent")) or 0)


def test_flushall_loses_no_delivery(cstack: Stack, db: Database, broker: Celery, sink: Sink) -> None:
    # the earlier tests' last deliveries marked sent first: a worker killed between the platform's answer and
    # that mark sends the delivery again after its restart (at least once, by design), which is not this test's
    wait_for(lambda: _unsent(db) == 0, 30, "an earlier delivery was never marked sent")
    cstack.kill("w1")  # no worker: the wake-up tasks wait in Redis …
    _record(db, "flush1", "before", "after")
    _wake(broker, "flush1")
    cstack.redis().flushall()  # … and are gone with its data (the stack's own redis-server)
    cstack.start_worker("w1")
    wait_for(lambda: len(sink.texts("flush1")) == 2, 60, "a delivery was lost with Redis' data")
    assert sink.texts("flush1") == ["before", "after"]
    _keys_once(sink)


def test_an_event_becomes_one_input_and_its_answer_is_delivered(db: Database, broker: Celery, sink: Sink, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "stack question", {"content": "stack answer"})
    event = {"chat_id": "ev1", "sender_id": "u_friend", "text": "stack question", "message_id": "om_stack1"}
    event_id, created = events.record(db, "sink", "om_stack1", event)
    again, created_again = events.record(db, "sink", "om_stack1", event)  # the platform redelivers
    assert created and not created_again and again == event_id
    broker.send_task(CHANNEL_EVENT_TASK, args=[event_id], queue=QUEUE_OUTBOUND)
    broker.send_task(CHANNEL_EVENT_TASK, args=[event_id], queue=QUEUE_OUTBOUND)
    wait_for(lambda: sink.texts("ev1"), 60, "the answer never reached the sink")
    [post] = sink.delivered("ev1")
    assert post["kind"] == "reply" and post["payload"]["text"] == "stack answer"
    assert post["payload"]["reply_to"] == "om_stack1"
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(InboundRow).where(InboundRow.session_id.like("sink:ev1:%"))) == 1


def test_a_stranger_s_event_stores_nothing(db: Database, broker: Celery, sink: Sink) -> None:
    event = {"chat_id": "ev2", "sender_id": "u_stranger", "text": "hi", "message_id": "om_stack2"}
    event_id, _ = events.record(db, "sink", "om_stack2", event)
    broker.send_task(CHANNEL_EVENT_TASK, args=[event_id], queue=QUEUE_OUTBOUND)

    def settled() -> str | None:
        with db.read() as s:
            status = s.get(ChannelEventRow, event_id, populate_existing=True).status
            return status if status != "pending" else None

    assert wait_for(settled, 30, "the event was never processed") == "ignored"
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(InboundRow).where(InboundRow.session_id.like("sink:ev2:%"))) == 0
    assert sink.texts("ev2") == []


def test_api_deliveries_lists_and_retries(cstack: Stack, db: Database, sink: Sink) -> None:
    sink.fail("api1", (400, None))
    _record(db, "api1", "rejected once")
    wait_for(lambda: _statuses(db, "api1") == ["failed"], 40, "the row never failed")
    with httpx.Client(base_url=cstack.http, headers={"Authorization": f"Bearer {cstack.token}"}, timeout=20) as c:
        body = c.get("/api/deliveries").json()
        assert body["counts"]["sink"]["failed"] >= 1 and len(body["deliveries"]) <= 50
        failed = c.get("/api/deliveries", params={"status": "failed"}).json()["deliveries"]
        [row] = [d for d in failed if d["chat_id"] == "api1"]
        assert row["error_code"] == "400" and row["text"] == "rejected once" and row["attempts"] == 1
        assert c.get("/api/deliveries", params={"status": "nope"}).status_code == 400
        assert c.post("/api/deliveries/999999/retry").status_code == 404
        r = c.post(f"/api/deliveries/{row['id']}/retry")
        assert r.status_code == 200 and r.json()["status"] == "pending"
        wait_for(lambda: sink.texts("api1") == ["rejected once"], 30, "the retried row was not delivered")
        assert c.post(f"/api/deliveries/{row['id']}/retry").status_code == 409  # sent: nothing to retry
        health = c.get("/health").json()["checks"]["deliveries"]
        assert health["ok"] and health["pending"] == 0 and "failed" in health["detail"]
    with httpx.Client(base_url=cstack.http, timeout=20) as anon:  # behind the pairing guard
        assert anon.get("/api/deliveries", headers={"X-Forwarded-For": "203.0.113.9"}).status_code in (401, 403)
