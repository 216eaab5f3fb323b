"""WeChat end to end: the fake iLink, a real stack (web, worker, beat) and `picobot wechat`, all processes.

The module shares one stack and one poller; each test has its own WeChat user. The first test starts
without a login (the channel waits: login_required) and logs in through `picobot channels login`.
Exactly-once is checked after the outbox has settled, never by waiting a fixed time.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scripts.fake_wechat import FakeWeChat
from tests.channel_sink import Sink, sink_channel
from tests.stack import ROOT, Stack, wait_for
from tests.http_client import HTTP

pytestmark = pytest.mark.slow

OWNER = "owner@im.wechat"


def user() -> str:
    return f"u{uuid.uuid4().hex[:10]}@im.wechat"


FRIENDS = [OWNER, *(f"f{i}@im.wechat" for i in range(8))]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeWeChat]:
    f = FakeWeChat(hold_secs=1.0, qr_hold_secs=0.2).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def sink() -> Iterator[Sink]:
    s = Sink()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def wstack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any, fake: FakeWeChat, sink: Sink) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("wechat"), fake_llm.url)
    s.env["PYTHONPATH"] = str(ROOT)  # the worker imports the test channel type (the owner's other channel)
    cfg_path = s.home / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["channels"] = {"wechat": {"type": "wechat", "enabled": True, "base_url": fake.base_url,
                                  "cdn_base_url": fake.cdn_url, "allow_from": FRIENDS, "poll_timeout_secs": 1,
                                  "owner_chat": "sink:owner-chat"},
                       "sink": sink_channel(sink)}
    cfg_path.write_text(json.dumps(cfg, indent=2))
    try:
        s.start()
        s._spawn("wechat", ["wechat"])
        yield s
    finally:
        s.stop()


def db(stack: Stack) -> sqlalchemy.Engine:
    if getattr(stack, "_engine", None) is None:
        stack._engine = sqlalchemy.create_engine(stack.database_url)  # type: ignore[attr-defined]
    return stack._engine  # type: ignore[attr-defined]


def sql(stack: Stack, query: str, **params: Any) -> list[dict[str, Any]]:
    with db(stack).connect() as c:
        return [dict(r._mapping) for r in c.execute(sqlalchemy.text(query), params)]


def outbox(stack: Stack, chat_id: str) -> list[dict[str, Any]]:
    return sql(stack, "SELECT id, status, kind FROM outbox WHERE channel = 'wechat' AND chat_id = :c ORDER BY id",
               c=chat_id)


def settled(stack: Stack, fake: FakeWeChat, chat_id: str, n: int, timeout: float = 90) -> list[str]:
    """Wait for n messages to the user and every delivery of the chat sent; the texts it got."""
    fake.wait_sent(n, chat_id, timeout=timeout)
    wait_for(lambda: (rows := outbox(stack, chat_id)) and all(r["status"] == "sent" for r in rows),
             timeout, f"deliveries of {chat_id} did not settle: {outbox(stack, chat_id)}")
    return fake.texts(chat_id)


def channel_health(stack: Stack) -> dict[str, Any]:
    return stack.health()["checks"]["channel:wechat"]


def login(stack: Stack, fake: FakeWeChat, *args: str) -> Any:
    fake.qr_plan = ["scaned", "confirmed"]
    done = stack.cli("channels", "login", "wechat", *args, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def logged_in(wstack: Stack, fake: FakeWeChat) -> Stack:
    if not fake.tokens:
        login(wstack, fake)
    wait_for(lambda: channel_health(wstack).get("state") == "polling", 30, "the poller did not start polling")
    return wstack


def test_waits_for_a_login_then_polls(wstack: Stack, fake: FakeWeChat) -> None:
    assert not fake.tokens
    # /health answers 200 while the channel waits for its login (a check may read degraded for a moment while
    # the stack's processes start on a busy machine: the wait asks for both at once)
    wait_for(lambda: wstack._http_ok("/health") and wstack.health()["status"] == "ok"
             and channel_health(wstack).get("state") == "login_required", 30, "no login_required state with /health ok")
    r = wstack.cli("health")
    assert "login_required" in r.stdout + r.stderr
    done = login(wstack, fake)
    assert "Logged in" in done.stdout
    path = wstack.home / "wechat" / "credentials.json"
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    wait_for(lambda: channel_health(wstack).get("state") == "polling", 30, "the poller did not pick up the login")
    again = wstack.cli("channels", "login", "wechat")
    assert again.returncode == 0 and "logged in already" in again.stdout


def test_one_message_one_reply_with_typing(logged_in: Stack, fake: FakeWeChat, llm: Any) -> None:
    u = FRIENDS[1]
    msg = fake.message(u, "hello wechat")
    fake.offer(msg)
    [reply] = settled(logged_in, fake, u, 1)
    assert "hello wechat" in reply
    sent = [m for m in fake.sent if m["to_user_id"] == u][0]
    assert sent["context_token"] == msg["context_token"]           # the user's latest token, kept in SQL
    assert sent["client_id"].startswith("pb-") and sent["message_type"] == 2
    wait_for(lambda: [t["status"] for t in fake.typing if t["user"] == u] == [1, 2], 20, f"typing: {fake.typing}")
    cursor = sql(logged_in, "SELECT value FROM channel_state WHERE channel = 'wechat' AND key = 'cursor'")
    assert cursor and json.loads(cursor[0]["value"])["buf"]        # persisted in SQL, non-empty


def test_replayed_five_times_one_reply(logged_in: Stack, fake: FakeWeChat, llm: Any) -> None:
    u = FRIENDS[2]
    msg = fake.message(u, "replayed hello")
    renamed = {**msg, "message_id": msg["message_id"] + 10**6}   # a replay under a new message_id (same client_id)
    bare = {k: v for k, v in msg.items() if k not in ("message_id", "client_id")}  # seq only
    fake.offer(msg, msg, renamed, bare, msg)
    settled(logged_in, fake, u, 1)
    fake.offer(msg)                                                # a late replay after the answer changes nothing
    later = fake.message(u, "and now something new")
    fake.offer(later)
    texts = settled(logged_in, fake, u, 2)
    assert len(texts) == 2 and "replayed hello" in texts[0] and "something new" in texts[1]
    rows = sql(logged_in, "SELECT COUNT(*) AS n FROM inbound WHERE channel = 'wechat' AND sender_id = :u", u=u)
    assert rows[0]["n"] == 2


def test_stranger_stores_nothing(logged_in: Stack, fake: FakeWeChat, llm: Any) -> None:
    stranger = user()
    fake.offer(fake.message(stranger, "let me in"))
    u = FRIENDS[3]
    fake.offer(fake.message(u, "after the stranger"))
    settled(logged_in, fake, u, 1)                                 # the poller got past the stranger's message
    assert fake.texts(stranger) == []
    for table, column in (("inbound", "sender_id"), ("outbox", "chat_id")):
        assert not sql(logged_in, f"SELECT 1 FROM {table} WHERE {column} = :s", s=stranger)
    assert not sql(logged_in, "SELECT 1 FROM channel_state WHERE key LIKE :k", k=f"%{stranger}%")
    assert not [e for e in sql(logged_in, "SELECT payload FROM channel_events") if stranger in str(e["payload"])]


def test_held_message_released_when_the_user_writes(logged_in: Stack, fake: FakeWeChat, llm: Any) -> None:
    u = FRIENDS[4]
    fake.offer(fake.message(u, "first contact"))
    settled(logged_in, fake, u, 1)
    fake.close_window(u)                                           # iLink answers -2 from now on
    job = {"id": f"held-{uuid.uuid4().hex[:6]}", "kind": "outbound_message", "schedule": {"type": "interval",
           "seconds": 86400}, "target": {"channel": "wechat", "chat_id": u}, "payload": {"text": "your daily report"}}
    job_file = logged_in.cwd / f"{job['id']}.json"
    job_file.write_text(json.dumps(job))
    assert logged_in.cli("jobs", "add", str(job_file)).returncode == 0
    ran = logged_in.cli("jobs", "run", job["id"])
    assert ran.returncode == 0, ran.stdout + ran.stderr
    wait_for(lambda: [r["status"] for r in outbox(logged_in, u)][-1:] == ["deferred"], 60,
             f"not held: {outbox(logged_in, u)}")
    seen = httpx_deliveries(logged_in)
    assert any(r.get("status") == "deferred" and r.get("chat_id") == u for r in seen), seen
    assert len(fake.texts(u)) == 1
    fake.offer(fake.message(u, "I am back"))
    texts = settled(logged_in, fake, u, 3)
    assert "your daily report" in texts[1] and "held since" in texts[1]
    assert "I am back" in texts[2]


def httpx_deliveries(stack: Stack) -> list[dict[str, Any]]:
    import httpx

    r = HTTP.get(stack.http + "/api/deliveries", headers={"Authorization": f"Bearer {stack.token}"}, timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    return body.get("latest") or body.get("rows") or body.get("deliveries") or []


def test_session_expired_then_login_again_resumes(logged_in: Stack, fake: FakeWeChat, sink: Sink, llm: Any) -> None:
    fake.expire_session()
    wait_for(lambda: channel_health(logged_in).get("state") == "login_required", 30, "-14 not seen")
    wait_for(lambda: any("channels login wechat" in t for t in sink.texts("owner-chat")), 30,
             "the owner was not told on the other channel")
    assert logged_in.health()["status"] == "ok"                   # /health answers 200, the channel waits
    u = FRIENDS[5]
    fake.offer(fake.message(u, "while logged out"))
    login(logged_in, fake)                                         # no --force needed: the old login is marked expired
    wait_for(lambda: channel_health(logged_in).get("state") == "polling", 30, "polling did not resume")
    texts = settled(logged_in, fake, u, 1)
    assert "while logged out" in texts[0]
    assert logged_in.procs["wechat"].poll() is None                # the same poller process: no restart
    assert len(sink.texts("owner-chat")) == 1                       # told once per expired login
    logs = logged_in.all_logs()
    with db(logged_in).connect() as c:
        dump = "\n".join(str(tuple(r)) for t in ("channel_state", "channel_events", "outbox", "inbound")
                         for r in c.execute(sqlalchemy.text(f"SELECT * FROM {t}")))
    assert len(fake.issued) == 2 and not any(t in logs or t in dump for t in fake.issued)  # secrets stay secret


# ---- hostile updates --------------------------------------------------------------------------

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                       max_size=3), max_leaves=8)
HOSTILE = "f7@im.wechat"  # allowed: garbage from a friend gets past allow_from and must fail on its own


@st.composite
def garbage(draw: Any) -> Any:
    """A message nobody can answer: wrong types, unknown or empty items, giant text, or no message at all."""
    base = {"message_type": 1, "from_user_id": HOSTILE, "message_id": draw(json_values), "seq": draw(json_values),
            "context_token": "ctx-h", "item_list": [{"type": 1, "text_item": {"text": "unreachable"}}]}
    how = draw(st.sampled_from(["value", "type", "items", "unknown", "empty", "giant", "textkind"]))
    if how == "value":
        return draw(json_values.filter(lambda v: not isinstance(v, dict)))
    if how == "type":
        return {**base, "message_type": draw(json_values.filter(lambda v: v != 1 or isinstance(v, bool)))}
    if how == "items":
        return {**base, "item_list": draw(json_values.filter(lambda v: not isinstance(v, list)) | st.just([]))}
    if how == "unknown":
        kind = draw(st.integers(6, 10**9) | st.text(max_size=5))
        return {**base, "item_list": [{"type": kind, "x": draw(json_values)}]}
    if how == "empty":
        return {**base, "item_list": [{"type": 1, "text_item": {"text": draw(st.sampled_from(["", " ", "\n\t"]))}}]}
    if how == "giant":
        return {**base, "item_list": [{"type": 1, "text_item": {"text": "x" * 100_001}}]}
    return {**base, "item_list": [{"type": 1, "text_item": {"text": draw(json_values.filter(
        lambda v: not isinstance(v, str)))}}]}


def test_hostile_updates_no_crash_no_reply(logged_in: Stack, fake: FakeWeChat, llm: Any) -> None:
    batch: list[Any] = []

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(garbage())
    def collect(msg: Any) -> None:
        batch.append(msg)

    collect()
    base = {"message_type": 1, "from_user_id": HOSTILE, "context_token": "ctx-h"}
    batch += [{**base, "message_type": True, "message_id": 91, "item_list": [{"type": 1, "text_item": {"text": "a"}}]},
              {**base, "message_id": 92, "item_list": [{"type": True, "text_item": {"text": "b"}}]},
              {**base, "message_id": 93, "item_list": [{"type": 12345, "mystery_item": {}}]},
              {**base, "message_id": 94, "item_list": [{"type": 1, "text_item": {"text": "x" * 100_001}}]}]
    fake.offer(*batch)
    odd = fake.message(HOSTILE, "odd \ud800 text \u0000 here")     # lone surrogate and NUL: repaired, answered
    fake.offer(odd)
    texts = settled(logged_in, fake, HOSTILE, 1)
    assert len(texts) == 1 and "odd" in texts[0] and "here" in texts[0]
    inputs = sql(logged_in, "SELECT content FROM inbound WHERE channel = 'wechat' AND sender_id = :u", u=HOSTILE)
    assert len(inputs) == 1, inputs                                # no garbage reached the model
    assert logged_in.procs["wechat"].poll() is None
    assert channel_health(logged_in).get("state") == "polling"
    assert "Traceback" not in (logged_in.logs / "wechat.log").read_text(errors="replace")


def test_force_login_discards_the_login_and_cursor(logged_in: Stack, fake: FakeWeChat, llm: Any) -> None:
    path = logged_in.home / "wechat" / "credentials.json"
    old = json.loads(path.read_text())["token"]
    assert sql(logged_in, "SELECT 1 FROM channel_state WHERE channel = 'wechat' AND key = 'cursor'")
    answered = len(fake.sent)
    done = login(logged_in, fake, "--force")
    assert "discarded" in done.stdout
    assert json.loads(path.read_text())["token"] != old
    u = FRIENDS[6]
    fake.offer(fake.message(u, "after a fresh login"))
    texts = settled(logged_in, fake, u, 1)
    assert texts == [t for t in texts if "after a fresh login" in t] and len(texts) == 1
    # the empty cursor made iLink hand over its whole backlog again: the replay keys kept every old
    # message from being answered twice
    assert len(fake.sent) == answered + 1


def test_a_replay_after_the_poller_is_killed_is_not_answered_again(logged_in: Stack, fake: FakeWeChat,
                                                                   llm: Any) -> None:
    u = OWNER
    msg = fake.message(u, "before the crash")
    fake.offer(msg)
    settled(logged_in, fake, u, 1)
    logged_in.kill("wechat")                                       # SIGKILL: its lease lapses after 10 s
    logged_in._spawn("wechat", ["wechat"])
    fake.offer(msg, {**msg, "message_id": msg["message_id"] + 5})  # replays, one under a new id
    fake.offer(fake.message(u, "after the crash"))
    texts = settled(logged_in, fake, u, 2, timeout=120)
    assert len(texts) == 2 and "after the crash" in texts[1]
