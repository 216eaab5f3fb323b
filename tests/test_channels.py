"""The channel layer in process: registry, access, outbox recording, the delivery loop, the event inbox.

A real SQLite database, a private redis-server and a loopback HTTP sink as the platform (the
test channel type in tests/channel_sink.py); the task queue records what would be sent and the
test runs deliver_lane / process itself. Flows across Celery are in tests/test_delivery.py.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from sqlalchemy import func, select

from picobot.channels import delivery, events, outbound
from picobot.config.access import agent_for, allowed
from picobot.channels.registry import ChannelError
from picobot.config import load_config
from picobot.gateway.inbound import InboundMessage
from picobot.gateway.intake import Gateway
from picobot.runtime import attempts, turn_runner
from picobot.agent.loop import LoopResult
from picobot.domain.messages import ChatMessage, Usage
from picobot.app import App as Runtime, build_runtime
from picobot.runtime.session_messages import SessionMessenger
from picobot.storage import outbox, turns
from picobot.storage.models import ChannelEventRow, InboundRow, OutboxRow, SessionRow
from tests.channel_sink import Sink, sink_channel
from tests.conftest import add_rule
from tests.stack import base_config


class _Queue:
    """The TaskQueue seam, recording instead of sending."""

    def __init__(self) -> None:
        self.turns: list[str] = []
        self.lanes: list[tuple[str, str, float]] = []
        self.events: list[int] = []

    def enqueue_turn(self, session_id: str, queue: str = "turns") -> None:
        self.turns.append(session_id)

    def enqueue_compaction(self, session_id: str, force: bool = False) -> None:
        pass

    def enqueue_subagent(self, run_id: str) -> None:
        pass

    def enqueue_job(self, job_id: str, due_at: float | None) -> None:
        pass

    def enqueue_delivery(self, channel: str, chat_id: str, countdown: float = 0) -> None:
        self.lanes.append((channel, chat_id, countdown))

    def enqueue_channel_event(self, event_id: int) -> None:
        self.events.append(event_id)


@pytest.fixture
def sink() -> Iterator[Sink]:
    s = Sink()
    yield s
    s.stop()


def _runtime(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch, channels: dict) -> Runtime:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cfg = base_config(llm.url, 1)
    cfg["agents"]["helper"] = {"provider": "default", "model": "default"}
    cfg["memory"] = {"enabled": False}
    cfg["channels"] = channels
    (home / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-channels-secret")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return build_runtime(load_config(), _Queue(), migrate=True)


@pytest.fixture
def rt(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch, sink: Sink) -> Iterator[Runtime]:  # type: ignore[no-untyped-def]
    runtime = _runtime(tmp_path, llm, redis_url, monkeypatch, {
        "sink": sink_channel(sink, agent="helper", allow_from=["u_friend", "u_other"]),
        "off": sink_channel(sink, enabled=False),
        "ghost": {"type": "matrix", "enabled": True},
        "web": {"allow_from": ["*"]},
    })
    yield runtime
    runtime.close()


def _record(rt: Runtime, chat: str, *texts: str, channel: str = "sink") -> None:
    with rt.db.begin() as conn:
        for text in texts:
            outbound.record_message(conn, channel, chat, text)


def _rows(rt: Runtime, chat: str | None = None) -> list[Any]:
    with rt.db.read() as s:
        q = select(OutboxRow).order_by(OutboxRow.id)
        if chat:
            q = q.where(OutboxRow.chat_id == chat)
        return list(s.scalars(q))


def _count(rt: Runtime, model: Any) -> int:
    with rt.db.read() as s:
        return s.scalar(select(func.count()).select_from(model)) or 0


# --- registry and access -----------------------------------------------------------------


def test_registry_knows_external_channels_and_builds_adapters_lazily(rt: Runtime) -> None:
    reg = rt.channels
    assert reg.external("sink") and not reg.external("off") and not reg.external("nope")
    assert not reg.external("web") and not reg.external("cli_chat")  # socket channels never use the outbox
    adapter = reg.get("sink")
    assert adapter is not None and adapter is reg.get("sink") and adapter.name == "sink"
    assert reg.get("off") is None and reg.get("web") is None
    with pytest.raises(ChannelError, match="unknown channel type 'matrix'"):
        reg.adapter("ghost")


def test_delivery_keys_are_deterministic_and_short() -> None:
    assert outbound.delivery_key("t:" + "a" * 32) == "t:" + "a" * 32
    long = outbound.delivery_key("e:" + "x" * 300)
    assert len(long) <= 50 and long == outbound.delivery_key("e:" + "x" * 300) != outbound.delivery_key("e:" + "y" * 300)


def test_allow_from_rejects_before_anything_is_stored(rt: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "picobot.gateway")
    reply = Gateway(rt).submit(InboundMessage("sink", "c1", "u_stranger", "secret plans", "om_1"))
    assert reply.kind == "rejected" and reply.code == "forbidden"
    cmd = Gateway(rt).submit(InboundMessage("sink", "c1", "u_stranger", "/new", "om_2"))
    assert cmd.kind == "rejected" and cmd.code == "forbidden"  # commands too
    assert _count(rt, SessionRow) == 0 and _count(rt, InboundRow) == 0
    assert "secret plans" not in caplog.text and "u_stranger" in caplog.text
    assert allowed(rt.config, "web", "anyone") and allowed(rt.config, "cli_chat", "anyone")  # unconfigured: everyone
    ok = Gateway(rt).submit(InboundMessage("sink", "c1", "u_friend", "hello", "om_3"))
    assert ok.kind == "accepted"


def test_new_dialogs_of_a_channel_get_its_agent(rt: Runtime) -> None:
    assert agent_for(rt.config, "sink") == "helper" and agent_for(rt.config, "cli_chat") == "default"
    a = Gateway(rt).submit(InboundMessage("sink", "c2", "u_friend", "hi", "om_10"))
    b = Gateway(rt).submit(InboundMessage("sink", "c2", "u_friend", "/new second", "om_11"))
    c = Gateway(rt).submit(InboundMessage("cli_chat", "c2", "me", "hi"))
    with rt.db.read() as s:
        assert s.get(SessionRow, a.session_id).agent == "helper"
        assert s.get(SessionRow, b.session_id).agent == "helper"
        assert s.get(SessionRow, c.session_id).agent == "default"


# --- the delivery loop -------------------------------------------------------------------


def test_a_lane_delivers_in_order(rt: Runtime, sink: Sink) -> None:
    _record(rt, "a", "one", "two", "three")
    out = delivery.deliver_lane(rt, "sink", "a")
    assert out == {"sent": 3, "failed": 0, "state": "done"}
    assert sink.texts("a") == ["one", "two", "three"]
    rows = _rows(rt, "a")
    assert [r.status for r in rows] == ["sent"] * 3 and rows[0].result == {"message_ids": ["sm_1"]}
    assert delivery.deliver_lane(rt, "sink", "a")["sent"] == 0  # nothing twice
    assert not rt.redis.exists(delivery.lane_key("sink", "a"))  # the lock is released


def test_a_transient_error_stops_the_lane_and_backs_off(rt: Runtime, sink: Sink) -> None:
    _record(rt, "b", "first", "second")
    sink.fail("b", (503, None))
    out = delivery.deliver_lane(rt, "sink", "b")
    assert out["state"] == "waiting" and out["sent"] == 0
    first, second = _rows(rt, "b")
    assert first.status == "pending" and first.attempts == 1 and first.error_code == "503"
    assert first.next_attempt_at > time.time() and second.attempts == 0
    assert rt.queue.lanes[-1][:2] == ("sink", "b") and 0 < rt.queue.lanes[-1][2] <= 1.0
    assert delivery.deliver_lane(rt, "sink", "b")["sent"] == 0  # still backing off: the second waits too
    assert sink.texts("b") == []
    time.sleep(max(0.0, first.next_attempt_at - time.time()) + 0.05)
    assert delivery.deliver_lane(rt, "sink", "b")["sent"] == 2
    assert sink.texts("b") == ["first", "second"]


def test_backoff_doubles_and_is_capped() -> None:
    assert [delivery.backoff(n, None) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert delivery.backoff(0, 7.5) == 7.5


def test_retry_after_is_honoured(rt: Runtime, sink: Sink) -> None:
    _record(rt, "c", "later")
    sink.fail("c", (429, 30))
    before = time.time()
    delivery.deliver_lane(rt, "sink", "c")
    [row] = _rows(rt, "c")
    assert row.status == "pending" and row.next_attempt_at >= before + 30
    assert rt.queue.lanes[-1][2] > 29
    assert delivery.deliver_lane(rt, "sink", "c")["sent"] == 0 and sink.texts("c") == []


def test_a_permanent_error_is_recorded_once_and_the_lane_moves_on(rt: Runtime, sink: Sink,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "picobot.channels")
    _record(rt, "d", "bad", "good")
    sink.fail("d", (400, None))
    out = delivery.deliver_lane(rt, "sink", "d")
    assert out == {"sent": 1, "failed": 1, "state": "done"}
    bad, good = _rows(rt, "d")
    assert bad.status == "failed" and bad.error_code == "400" and "400" in bad.last_error and bad.attempts == 1
    assert good.status == "sent" and sink.texts("d") == ["good"]
    delivery.deliver_lane(rt, "sink", "d")
    assert caplog.text.count("failed permanently") == 1 and len(sink.posts) == 2


def test_a_delivery_failing_for_a_day_gives_up_and_a_retry_by_hand_starts_again(rt: Runtime, sink: Sink) -> None:
    _record(rt, "old", "late", "next")
    first = _rows(rt, "old")[0]
    with rt.db.begin() as conn:
        conn.execute(OutboxRow.__table__.update().where(OutboxRow.__table__.c.id == first.id).values(
            created_at=time.time() - delivery.GIVE_UP_SECS - 1, attempts=delivery.MIN_ATTEMPTS_BEFORE_GIVING_UP))
    sink.fail("old", (503, None))
    assert delivery.deliver_lane(rt, "sink", "old") == {"sent": 1, "failed": 1, "state": "done"}
    late, nxt = _rows(rt, "old")
    assert late.status == "failed" and late.error_code == "gave_up" and "503" in late.last_error
    assert nxt.status == "sent"  # the lane moves on
    sink.fail("old", (503, None))
    with rt.db.begin() as conn:
        assert outbox.retry(conn, late.id) is not None
    delivery.deliver_lane(rt, "sink", "old")  # a retry by hand gets fresh attempts, not an instant give-up
    late = _rows(rt, "old")[0]
    assert late.status == "pending" and late.attempts == 1 and late.error_code == "503"


def test_delivery_errors_are_stored_redacted(rt: Runtime, sink: Sink) -> None:
    _record(rt, "red", "x")
    sink.fail("red", (400, None, "bad token sk-test-channels-secret in request"))
    delivery.deliver_lane(rt, "sink", "red")
    [row] = _rows(rt, "red")
    assert row.status == "failed" and "sk-test-channels-secret" not in row.last_error and "bad token" in row.last_error


def test_an_unusable_channel_fails_its_rows_with_a_clear_error(rt: Runtime) -> None:
    with rt.db.begin() as conn:
        outbox.add(conn, "off", "x", outbound.payload("hi"), "k-off")
        outbox.add(conn, "ghost", "x", outbound.payload("hi"), "k-ghost")
    delivery.deliver_lane(rt, "off", "x")
    delivery.deliver_lane(rt, "ghost", "x")
    off, ghost = _rows(rt, "x")
    assert off.status == ghost.status == "failed"
    assert "not a configured, enabled external channel" in off.last_error
    assert "unknown channel type 'matrix'" in ghost.last_error


def test_a_held_lane_is_left_to_its_holder(rt: Runtime, sink: Sink) -> None:
    _record(rt, "e", "x")
    lock = delivery.LaneLock(rt.redis, "sink", "e")
    assert lock.acquire()
    try:
        assert delivery.deliver_lane(rt, "sink", "e")["state"] == "busy"
    finally:
        lock.release()
    assert sink.texts("e") == []


def test_the_sweeper_wakes_lanes_whose_task_was_lost(rt: Runtime, sink: Sink) -> None:
    _record(rt, "f", "lost")
    assert delivery.recover(rt) == 0  # fresh: its own wake-up is on the way
    with rt.db.begin() as conn:  # as if recorded long ago and its task lost
        conn.execute(OutboxRow.__table__.update().values(created_at=time.time() - 60))
    lock = delivery.LaneLock(rt.redis, "sink", "f")
    assert lock.acquire()
    assert delivery.recover(rt) == 0  # a holder works on it
    lock.release()
    rt.queue.lanes.clear()
    assert delivery.recover(rt) == 1 and rt.queue.lanes == [("sink", "f", 0.0)]
    assert delivery.recover(rt) == 0  # not again at once


def test_flushall_loses_no_delivery(rt: Runtime, sink: Sink) -> None:
    _record(rt, "z", "one", "two")  # their wake-up tasks die with Redis' data (here: never sent)
    old = delivery.LaneLock(rt.redis, "sink", "z")
    assert old.acquire()  # a worker was working on the lane
    rt.redis.flushall()  # the private redis-server of this test: the lock and every queued task are gone
    with rt.db.begin() as conn:
        conn.execute(OutboxRow.__table__.update().values(created_at=time.time() - 60))
    rt.queue.lanes.clear()
    assert delivery.recover(rt) == 1 and rt.queue.lanes == [("sink", "z", 0.0)]
    new = delivery.LaneLock(rt.redis, "sink", "z")
    assert new.acquire()
    old.release()  # compare-and-delete: the old holder cannot free the new holder's lock
    assert rt.redis.get(delivery.lane_key("sink", "z")) == new.token
    new.release()
    assert delivery.deliver_lane(rt, "sink", "z")["sent"] == 2 and sink.texts("z") == ["one", "two"]


# --- recording in the producers' transactions ----------------------------------------------


def _claim(rt: Runtime, chat: str, text: str, pmid: str) -> tuple[str, Any]:
    reply = Gateway(rt).submit(InboundMessage("sink", chat, "u_friend", text, pmid))
    claimed = turn_runner._claim(rt, reply.session_id)
    assert isinstance(claimed, turn_runner._Claimed)
    return reply.session_id, claimed


def _done(text: str) -> LoopResult:
    return LoopResult(messages=[ChatMessage(role="assistant", content=text)], usage=Usage())


def test_a_committed_turn_writes_its_reply_to_the_outbox(rt: Runtime) -> None:
    sid, claimed = _claim(rt, "g", "question", "om_q1")
    assert turn_runner._commit(rt, claimed, sid, _done("the answer"))
    [row] = _rows(rt, "g")
    assert row.kind == "reply" and row.turn_id == claimed.turn_id and row.session_id == sid
    assert row.payload == {"text": "the answer", "format": "markdown", "reply_to": "om_q1",
                           "turn_id": claimed.turn_id, "session_id": sid}
    assert len(row.idempotency_key) <= 50
    assert ("sink", "g", 0) in rt.queue.lanes


def test_a_fenced_out_commit_writes_no_delivery(rt: Runtime) -> None:
    sid, claimed = _claim(rt, "h", "question", "om_q2")
    with rt.db.begin() as conn:  # the sweeper declared the turn dead
        assert turns.interrupt(conn, claimed.turn_id, "test")
    assert not turn_runner._commit(rt, claimed, sid, _done("too late"))
    assert _rows(rt, "h") == [] and rt.queue.lanes == []


def test_failed_and_stopped_turns_send_a_plain_notice(rt: Runtime) -> None:
    sid, claimed = _claim(rt, "i", "q", "om_q3")
    failed = LoopResult(messages=[], usage=Usage(), status="failed", error="the model is down")
    assert turn_runner._commit(rt, claimed, sid, failed)
    [row] = _rows(rt, "i")
    assert row.kind == "notice" and row.payload["format"] == "plain" and "the model is down" in row.payload["text"]
    assert outbound.turn_text("cancelled", "half an ans", None) == ("notice", "half an ans\n\n(stopped)", "plain")
    assert outbound.turn_text("completed", "", None) is None


def test_an_input_given_up_on_sends_a_notice(rt: Runtime) -> None:
    sid, claimed = _claim(rt, "j", "poison", "om_q4")
    with rt.db.begin() as conn:
        assert turns.interrupt(conn, claimed.turn_id, "dead")
        ended = attempts.give_back(conn, sid, claimed.turn_id, 1, "the worker died", ports=rt)
    assert ended is not None and ended["status"] == "failed"
    [row] = _rows(rt, "j")
    assert row.kind == "notice" and row.payload["reply_to"] == "om_q4" and "the worker died" in row.payload["text"]


def test_send_session_message_to_an_external_chat_goes_through_the_outbox(rt: Runtime) -> None:
    send = SessionMessenger(rt, "cli_chat:me:default", "cli_chat", "me")
    send("reminder: tea", channel="sink", chat_id="k")
    [row] = _rows(rt, "k")
    assert row.kind == "message" and row.payload["text"] == "reminder: tea" and ("sink", "k", 0) in rt.queue.lanes
    send("to myself")  # a socket channel: no outbox row
    assert len(_rows(rt)) == 1


# --- the event inbox -----------------------------------------------------------------------


def _event(chat: str, text: str, message_id: str, sender: str = "u_friend") -> dict:
    return {"chat_id": chat, "sender_id": sender, "text": text, "message_id": message_id}


def test_a_redelivered_event_becomes_one_input(rt: Runtime) -> None:
    first = events.record(rt.db, "sink", "om_e1", _event("l", "hello", "om_e1"))
    again = events.record(rt.db, "sink", "om_e1", _event("l", "hello", "om_e1"))
    assert first[1] and not again[1] and first[0] == again[0]
    assert events.process(rt, first[0]) == "done"
    assert events.process(rt, first[0]) == "done"  # a second run changes nothing
    assert _count(rt, InboundRow) == 1 and len(rt.queue.turns) == 1
    # the same platform message under another event key (e.g. the other Feishu mode): still one input
    other, _ = events.record(rt.db, "sink", "evt_other", _event("l", "hello", "om_e1"))
    assert events.process(rt, other) == "done" and _count(rt, InboundRow) == 1


def test_a_command_event_is_answered_through_the_outbox_once(rt: Runtime) -> None:
    event_id, _ = events.record(rt.db, "sink", "om_c1", _event("m", "/help", "om_c1"))
    assert events.process(rt, event_id) == "done"
    with rt.db.begin() as conn:  # as if the task ran again after a crash before it marked the event
        conn.execute(ChannelEventRow.__table__.update().values(status="pending"))
    events.process(rt, event_id)
    [row] = _rows(rt, "m")
    assert row.kind == "command" and row.payload["reply_to"] == "om_c1" and "/new" in row.payload["text"]


def test_a_command_event_processed_again_after_a_crash_does_not_run_twice(rt: Runtime) -> None:
    event_id, _ = events.record(rt.db, "sink", "om_n1", _event("nn", "/new", "om_n1"))
    assert events.process(rt, event_id) == "done"
    dialogs = _count(rt, SessionRow)
    with rt.db.begin() as conn:  # the task died after the command ran, before it marked the event
        conn.execute(ChannelEventRow.__table__.update().values(status="pending"))
    assert events.process(rt, event_id) == "done"
    assert _count(rt, SessionRow) == dialogs  # no second new dialog
    assert len(_rows(rt, "nn")) == 1


def test_events_of_strangers_and_empty_events_are_ignored(rt: Runtime) -> None:
    a, _ = events.record(rt.db, "sink", "om_s1", _event("n", "let me in", "om_s1", sender="u_stranger"))
    b, _ = events.record(rt.db, "sink", "om_s2", {"ignore": True})
    assert events.process(rt, a) == "ignored" and events.process(rt, b) == "ignored"
    assert _count(rt, InboundRow) == 0 and _count(rt, SessionRow) == 0 and _rows(rt) == []


def test_an_unreadable_event_is_retried_boundedly_then_failed(rt: Runtime) -> None:
    event_id, _ = events.record(rt.db, "sink", "om_bad", {"chat_id": "o"})  # no text: normalize raises
    for _ in range(events.MAX_ATTEMPTS - 1):
        assert events.process(rt, event_id) == "pending"
    assert events.process(rt, event_id) == "failed"
    with rt.db.read() as s:
        row = s.get(ChannelEventRow, event_id)
        assert row.status == "failed" and "KeyError" in row.error and row.attempts == events.MAX_ATTEMPTS


def test_an_outage_while_reading_an_event_does_not_use_up_its_attempts(rt: Runtime, sink: Sink) -> None:
    # the platform's API down for longer than MAX_ATTEMPTS sweeps: the event waits, then is answered
    sink.fail("o_out", *[(503, None)] * (events.MAX_ATTEMPTS + 3))
    event_id, _ = events.record(rt.db, "sink", "om_out", {**_event("o_out", "hi", "om_out"), "lookup": True})
    for _ in range(events.MAX_ATTEMPTS + 3):
        assert events.process(rt, event_id) == "pending"
    assert events.process(rt, event_id) == "done" and _count(rt, InboundRow) == 1
    with rt.db.read() as s:
        assert s.get(ChannelEventRow, event_id).attempts == 1


def test_an_outage_older_than_a_day_fails_the_event(rt: Runtime, sink: Sink) -> None:
    sink.fail("o_old", (503, None))
    event_id, _ = events.record(rt.db, "sink", "om_old", {**_event("o_old", "hi", "om_old"), "lookup": True})
    with rt.db.begin() as conn:
        conn.execute(ChannelEventRow.__table__.update().values(received_at=time.time() - events.TRANSIENT_GIVE_UP_SECS - 1))
    assert events.process(rt, event_id) == "failed" and _count(rt, InboundRow) == 0


def test_the_sweeper_re_enqueues_stale_events(rt: Runtime) -> None:
    event_id, _ = events.record(rt.db, "sink", "om_st", _event("p", "hi", "om_st"))
    assert events.recover(rt) == 0
    with rt.db.begin() as conn:
        conn.execute(ChannelEventRow.__table__.update().values(received_at=time.time() - 60))
    assert events.recover(rt) == 1 and rt.queue.events == [event_id]


def test_a_full_turn_for_an_external_chat_is_delivered(rt: Runtime, sink: Sink, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "what is two plus two", {"content": "four"})
    event_id, _ = events.record(rt.db, "sink", "om_f1", _event("q", "what is two plus two", "om_f1"))
    events.process(rt, event_id)
    [sid] = rt.queue.turns
    assert turn_runner.drain_session(rt, sid) == 1
    assert delivery.deliver_lane(rt, "sink", "q")["sent"] == 1
    [post] = sink.delivered("q")
    assert post["kind"] == "reply" and post["payload"]["text"] == "four" and post["payload"]["reply_to"] == "om_f1"


def test_the_outbox_and_event_sql_on_both_databases(db_url: str) -> None:
    from picobot.storage import channel_events
    from picobot.storage.db import Database

    db = Database(db_url)
    try:
        db.migrate()
        with db.begin() as conn:
            assert outbox.add(conn, "sink", "c", outbound.payload("a"), "k1")
            assert not outbox.add(conn, "sink", "c", outbound.payload("again"), "k1")
            assert outbox.add(conn, "sink", "c", outbound.payload("b"), "k2")
            first, second = outbox.lane(conn, "sink", "c")
            assert outbox.mark_retry(conn, first.id, "slow", "503", time.time() + 60)
            assert outbox.due_lanes(conn, time.time(), time.time() + 1) == [("sink", "c")]  # the second is due
            assert outbox.mark_failed(conn, second.id, "gone", "230002")
            assert not outbox.mark_sent(conn, second.id, None)  # failed is final
            assert outbox.retry(conn, second.id).status == "pending"
            assert outbox.mark_sent(conn, second.id, {"message_ids": ["x"]})
            assert outbox.counts(conn) == {"sink": {"pending": 1, "sent": 1}}
            assert outbox.totals(conn) == {"pending": 1, "failed": 0}
            assert [r.idempotency_key for r in outbox.latest(conn, "sent")] == ["k2"]
        assert channel_events.record is not None
        first_id, created = events.record(db, "sink", "om_1", {"x": 1})
        again_id, created_again = events.record(db, "sink", "om_1", {"x": 2})
        assert created and not created_again and first_id == again_id
        with db.begin() as conn:
            assert channel_events.start_attempt(conn, first_id) == 1
            assert channel_events.finish(conn, first_id, "done")
            assert channel_events.start_attempt(conn, first_id) is None
            assert channel_events.stale(conn, time.time() + 1) == []
    finally:
        db.dispose()
