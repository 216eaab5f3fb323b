"""Feishu end to end: signed, encrypted events into a real stack (web + worker + beat), replies into the fake Feishu.

Each test uses its own chat, so the module shares one stack. Exactly-once is checked after the outbox has
settled (every delivery of the chat sent), never by waiting a fixed time.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

import pytest
import sqlalchemy

from scripts.fake_feishu import EventSender, FakeFeishu
from tests.stack import Stack, wait_for

pytestmark = pytest.mark.slow

FRIEND = "ou_friend"          # in allow_from
STRANGER = "ou_stranger"      # not


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeFeishu]:
    f = FakeFeishu(app_id="cli_e2e", app_secret="secret_e2e", rate_limit_qps=None).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def fstack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any, fake: FakeFeishu) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("feishu"), fake_llm.url)
    cfg_path = s.home / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["channels"] = {"feishu": {"enabled": True, "app_id": fake.app_id, "app_secret": fake.app_secret,
                                  "domain": fake.base_url, "verification_token": "vtok", "encrypt_key": "ekey",
                                  "allow_from": [FRIEND]}}
    cfg_path.write_text(json.dumps(cfg, indent=2))
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture
def sender(fstack: Stack, fake: FakeFeishu, llm: Any) -> Iterator[EventSender]:
    snd = EventSender(f"{fstack.http}/feishu/events", "vtok", "ekey", app_id=fake.app_id, fake=fake)
    yield snd
    snd.close()


def chat() -> str:
    return "oc_" + uuid.uuid4().hex[:16]


def db(stack: Stack) -> sqlalchemy.Engine:
    if getattr(stack, "_engine", None) is None:
        stack._engine = sqlalchemy.create_engine(stack.database_url)  # type: ignore[attr-defined]
    return stack._engine  # type: ignore[attr-defined]


def outbox(stack: Stack, chat_id: str) -> list[dict[str, Any]]:
    with db(stack).connect() as c:
        rows = c.execute(sqlalchemy.text("SELECT id, status, kind FROM outbox WHERE channel = 'feishu' "
                                         "AND chat_id = :c ORDER BY id"), {"c": chat_id})
        return [dict(r._mapping) for r in rows]


def event_status(stack: Stack, message_id: str) -> str | None:
    with db(stack).connect() as c:
        row = c.execute(sqlalchemy.text("SELECT status FROM channel_events WHERE event_key = :k"),
                        {"k": message_id}).first()
        return row[0] if row else None


def inbound_has(stack: Stack, message_id: str) -> bool:
    with db(stack).connect() as c:
        return c.execute(sqlalchemy.text("SELECT 1 FROM inbound WHERE channel = 'feishu' AND platform_message_id = :m"),
                         {"m": message_id}).first() is not None


def settled(stack: Stack, fake: FakeFeishu, chat_id: str, timeout: float = 90) -> list[dict[str, Any]]:
    """Wait until every delivery of the chat is sent; return the fake's messages for it."""
    wait_for(lambda: (rows := outbox(stack, chat_id)) and all(r["status"] == "sent" for r in rows),
             timeout, f"deliveries of {chat_id} did not settle: {outbox(stack, chat_id)}")
    return fake.messages_for(chat_id)


def msg_id(event: dict[str, Any]) -> str:
    return event["event"]["message"]["message_id"]


def test_p2p_message_gets_one_card_reply(fstack: Stack, fake: FakeFeishu, sender: EventSender) -> None:
    c = chat()
    ev = sender.message(chat_id=c, text="hello e2e", sender_open_id=FRIEND)
    assert sender.post(ev).status_code == 200
    fake.wait_sent(1, c, timeout=60)
    sent = settled(fstack, fake, c)
    assert len(sent) == 1
    assert sent[0]["msg_type"] == "interactive"
    assert sent[0]["reply_to"] == msg_id(ev)
    assert "hello e2e" in fake.text_of(sent[0])


def test_redelivered_five_times_one_reply(fstack: Stack, fake: FakeFeishu, sender: EventSender) -> None:
    c = chat()
    ev = sender.message(chat_id=c, text="five times", sender_open_id=FRIEND)
    sender.post(ev, duplicates=4)
    fake.wait_sent(1, c, timeout=60)
    sender.post(ev, duplicates=1)      # a late retry after the answer went out changes nothing
    assert len(settled(fstack, fake, c)) == 1
    assert event_status(fstack, msg_id(ev)) is not None


def test_redelivery_across_web_restart(fstack: Stack, fake: FakeFeishu, sender: EventSender) -> None:
    c = chat()
    ev = sender.message(chat_id=c, text="across a restart", sender_open_id=FRIEND)
    sender.post(ev)
    fstack.kill("web")
    fstack.start_web()
    sender.post(ev, duplicates=3)
    fake.wait_sent(1, c, timeout=60)
    assert len(settled(fstack, fake, c)) == 1


@pytest.mark.timeout(420)  # the dead worker's lane lock (60 s) must lapse before the sweeper hands the lane on
def test_worker_killed_mid_delivery(fstack: Stack, fake: FakeFeishu, sender: EventSender) -> None:
    c = chat()
    ev = sender.message(chat_id=c, text="kill the worker", sender_open_id=FRIEND)
    held_before = fake.held
    fake.hold(True)
    try:
        sender.post(ev, duplicates=1)
        wait_for(lambda: fake.held > held_before, 60, "no delivery reached the fake")
        fstack.kill("w1")                      # SIGKILL while the send is in flight
    finally:
        fake.hold(False)                       # Feishu accepts the orphaned send: the retry must not double it
    fstack.start_worker("w1")
    sender.post(ev, duplicates=2)
    assert len(settled(fstack, fake, c, timeout=300)) == 1


SENDS = "/open-apis/im/v1/messages"   # sends, replies, reactions; not bot info or tokens


def tried_while_failing(fake: FakeFeishu, since: int, status: int) -> bool:
    with fake.lock:
        return any(c["status"] == status and c["path"].startswith(SENDS) for c in fake.calls[since:])


@pytest.mark.timeout(400)  # retries back off while the API is away
def test_api_down_replies_arrive_in_order(fstack: Stack, fake: FakeFeishu, sender: EventSender) -> None:
    c = chat()
    mark = len(fake.calls)
    fake.fail(status=500, times=10**6, path=SENDS)      # replies cannot go out; each message still makes a turn
    try:
        events = []
        for i in range(3):
            ev = sender.message(chat_id=c, text=f"while down {i}", sender_open_id=FRIEND)
            sender.post(ev)
            events.append(ev)
            wait_for(lambda: len(outbox(fstack, c)) > i, 60, f"turn {i} made no delivery")
        wait_for(lambda: tried_while_failing(fake, mark, 500), 60, "no delivery was tried while sends failed")
        mark = len(fake.calls)
        fake.down(True)                                # then the whole API, tokens too
        wait_for(lambda: tried_while_failing(fake, mark, 503), 60, "no delivery was tried while Feishu was down")
    finally:
        fake.fail(times=0)
        fake.down(False)
    sent = settled(fstack, fake, c, timeout=180)
    assert [m["reply_to"] for m in sent] == [msg_id(e) for e in events]


@pytest.mark.timeout(400)  # retries back off while the API is away
def test_events_wait_for_the_api(fstack: Stack, fake: FakeFeishu, sender: EventSender) -> None:
    c = chat()
    mark = len(fake.calls)
    fake.down(True)                                    # reading the event may need Feishu (bot info, parents)
    try:
        ev = sender.message(chat_id=c, text="sent while Feishu is down", sender_open_id=FRIEND)
        assert sender.post(ev).status_code == 200      # recorded and acknowledged all the same
        wait_for(lambda: any(x["status"] == 503 for x in fake.calls[mark:]), 60, "nothing tried the API")
    finally:
        fake.down(False)
    fake.wait_sent(1, c, timeout=120)
    assert [m["reply_to"] for m in settled(fstack, fake, c)] == [msg_id(ev)]


@pytest.mark.timeout(400)  # retries back off while the API is away
def test_flushall_loses_no_pending_delivery(fstack: Stack, fake: FakeFeishu, sender: EventSender) -> None:
    c = chat()
    mark = len(fake.calls)
    fake.fail(status=500, times=10**6, path=SENDS)
    try:
        ev = sender.message(chat_id=c, text="survive flushall", sender_open_id=FRIEND)
        sender.post(ev)
        wait_for(lambda: outbox(fstack, c), 60, "the turn made no delivery")
        wait_for(lambda: tried_while_failing(fake, mark, 500), 60, "no delivery was tried")
        fstack.redis().flushall()              # the stack's own redis-server, not the shared one
    finally:
        fake.fail(times=0)
    sent = settled(fstack, fake, c, timeout=180)
    assert [m["reply_to"] for m in sent] == [msg_id(ev)]


def test_group_needs_mention(fstack: Stack, fake: FakeFeishu, sender: EventSender) -> None:
    c = chat()
    quiet = sender.message(chat_id=c, chat_type="group", text="just chatting", sender_open_id=FRIEND)
    sender.post(quiet)
    asked = sender.message(chat_id=c, chat_type="group", text="@_user_1 what now", sender_open_id=FRIEND,
                           mentions=[sender.bot_mention()])
    sender.post(asked)
    fake.wait_sent(1, c, timeout=60)
    wait_for(lambda: event_status(fstack, msg_id(quiet)) not in (None, "pending"), 60, "the quiet event stayed pending")
    sent = settled(fstack, fake, c)
    assert [m["reply_to"] for m in sent] == [msg_id(asked)]
    assert not inbound_has(fstack, msg_id(quiet)) and inbound_has(fstack, msg_id(asked))


def test_sender_not_allowed_is_ignored(fstack: Stack, fake: FakeFeishu, sender: EventSender) -> None:
    c, other = chat(), chat()
    stranger = sender.message(chat_id=c, text="let me in", sender_open_id=STRANGER)
    assert sender.post(stranger).status_code == 200
    wait_for(lambda: event_status(fstack, msg_id(stranger)) not in (None, "pending"), 60, "stranger's event pending")
    friend = sender.message(chat_id=other, text="hi bot", sender_open_id=FRIEND)
    sender.post(friend)
    assert [m["reply_to"] for m in settled(fstack, fake, other)] == [msg_id(friend)]
    assert not inbound_has(fstack, msg_id(stranger))          # never became input: no turn, no reply
    assert fake.messages_for(c) == [] and outbox(fstack, c) == []
