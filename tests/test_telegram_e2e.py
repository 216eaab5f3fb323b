"""Telegram end to end: the fake Bot API, a real stack (web + worker + beat) and real `picobot telegram` pollers.

Two channels on one stack: `telegram` polls bot A (getUpdates), `tghook` takes bot B's updates on the
web process's webhook (the web process calls setWebhook itself). Each test talks in its own private
chat. Exactly-once is checked after the outbox has settled (every delivery of the chat sent) and the
fake has handed out every update, never by waiting a fixed time.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from typing import Any, Iterator

import httpx
import pytest
import sqlalchemy

from picobot.channels.telegram.split import MAX_UNITS
from scripts.fake_telegram import FakeTelegram, parse_html, u16
from tests.conftest import add_rule
from tests.stack import Stack, wait_for
from tests.http_client import HTTP

pytestmark = pytest.mark.slow

TOKEN_A = "111111111:AAPollingBotTokenForTheE2eTests_xyz"
TOKEN_B = "222222222:AAWebhookBotTokenForTheE2eTests_xyz"
SECRET = "e2e-webhook-secret_123"
FRIENDS = [str(8000 + i) for i in range(100)]
STRANGER = 9999
_chats = itertools.count(8000)


def chat() -> int:
    return next(_chats)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeTelegram]:
    f = FakeTelegram([TOKEN_A, TOKEN_B]).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def tg(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any, fake: FakeTelegram) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("telegram"), fake_llm.url)
    cfg_path = s.home / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["channels"] = {
        "telegram": {"enabled": True, "token": TOKEN_A, "base_url": fake.base_url, "allow_from": FRIENDS,
                     "poll_timeout_secs": 5},
        "tghook": {"type": "telegram", "enabled": True, "token": TOKEN_B, "base_url": fake.base_url,
                   "mode": "webhook", "webhook_secret": SECRET, "webhook_url": f"{s.http}/telegram/tghook"},
    }
    cfg_path.write_text(json.dumps(cfg, indent=2))
    try:
        s.start()
        start_poller(s, "tg1")
        yield s
    finally:
        s.stop()


def start_poller(stack: Stack, name: str) -> Any:
    proc = stack._spawn(name, ["telegram", "--channel", "telegram"])
    wait_for(lambda: "this process polls bot" in log(stack, name) or "standing by" in log(stack, name), 60,
             f"poller {name} did not start:\n{log(stack, name)[-3000:]}")
    return proc


def log(stack: Stack, name: str) -> str:
    path = stack.logs / f"{name}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def pollers(stack: Stack) -> list[str]:
    return [n for n in stack.procs if n.startswith("tg")]


def db(stack: Stack) -> sqlalchemy.Engine:
    if getattr(stack, "_engine", None) is None:
        stack._engine = sqlalchemy.create_engine(stack.database_url)  # type: ignore[attr-defined]
    return stack._engine  # type: ignore[attr-defined]


def sql(stack: Stack, query: str, **params: Any) -> list[dict[str, Any]]:
    with db(stack).connect() as c:
        return [dict(r._mapping) for r in c.execute(sqlalchemy.text(query), params)]


def settled(stack: Stack, fake: FakeTelegram, chat_id: int, channel: str = "telegram", timeout: float = 120,
            token: str = TOKEN_A) -> list[dict[str, Any]]:
    """Wait until every delivery of the chat is sent and every update was handed out; the chat's messages."""
    def done() -> bool:
        rows = sql(stack, "SELECT status FROM outbox WHERE channel = :ch AND chat_id = :c", ch=channel, c=str(chat_id))
        return bool(rows) and all(r["status"] == "sent" for r in rows) and fake.pending(token) == 0
    query = "SELECT id, status, attempts, last_error FROM outbox WHERE chat_id = :c"
    wait_for(done, timeout, f"deliveries of {chat_id} did not settle: {sql(stack, query, c=str(chat_id))}")
    return fake.sent_to(chat_id, token)


def long_answer() -> str:
    part = ("## Step {n}\n\nThis is **bold with *nested* text**, `inline <code>` and ~~old~~ [docs](https://e.com/{n}).\n\n"
            "```python\n" + "\n".join(f"value_{{n}}_{j} = compute({j})  # <&>" for j in range(10)) + "\n```\n\n"
            "- first point\n- second point with **emphasis**\n\n> a note\n\n")
    return "".join(part.format(n=n) for n in range(25))


# --- one message, one reply -------------------------------------------------------------------


def test_one_message_gets_one_threaded_reply_with_typing(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    c = chat()
    add_rule(llm, "hello e2e", {"content": "Hi **there**", "delay_ms": 2500})
    update = fake.message(chat_id=c, text="hello e2e")
    [reply] = settled(tg, fake, c)
    assert reply["text"] == "Hi there" and reply["entities"][0]["type"] == "bold"
    assert reply["reply_to"] == update["message"]["message_id"]
    assert any(a["action"] == "typing" for a in fake.actions_in(c))


def test_the_bot_menu_is_set_at_start(tg: Stack, fake: FakeTelegram) -> None:
    names = {c["command"] for c in fake.bot(TOKEN_A).commands}
    assert {"new", "stop", "help", "sessions"} <= names


def test_a_command_is_answered_once(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    c = chat()
    update = fake.message(chat_id=c, text="/help@picobot_fake_bot")
    fake.push(update, copies=2)
    [answer] = settled(tg, fake, c)
    assert "/new" in answer["text"] and answer["reply_to"] == update["message"]["message_id"]


def test_the_same_update_five_times_is_one_reply(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    c = chat()
    update = fake.message(chat_id=c, text="five times")
    fake.push(update, copies=4)
    assert len(settled(tg, fake, c)) == 1
    fake.rewind()                                  # Telegram hands out everything again (it lost our offset)
    fake.push(update)
    assert len(settled(tg, fake, c)) == 1
    assert len(sql(tg, "SELECT id FROM channel_events WHERE event_key = :k",
                   k=f"m:{c}:{update['message']['message_id']}")) == 1


@pytest.mark.timeout(400)
def test_redelivery_across_a_worker_kill_and_a_poller_restart(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    c = chat()
    add_rule(llm, "survive the kill", {"content": "survived", "delay_ms": 4000}, repeat=True)
    update = fake.message(chat_id=c, text="survive the kill")
    wait_for(lambda: sql(tg, "SELECT id FROM inbound WHERE channel = 'telegram' AND platform_message_id = :m",
                         m=f"{c}_{update['message']['message_id']}"), 60, "the message was not taken in")
    tg.kill("w1")                                  # SIGKILL mid-turn
    for name in pollers(tg):
        tg.kill(name)                              # and the poller, before it confirmed anything more
    fake.rewind()
    fake.push(update, copies=2)
    start_poller(tg, "tg1")
    tg.start_worker("w1")
    assert [m["text"] for m in settled(tg, fake, c, timeout=300)] == ["survived"]
    fake.push(update, copies=2)
    assert len(settled(tg, fake, c)) == 1


# --- long answers and rate limits -----------------------------------------------------------------


def test_a_10000_character_answer_arrives_in_valid_parts(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    c = chat()
    text = long_answer()
    assert len(text) > 10_000
    add_rule(llm, "write a lot", {"content": text})
    update = fake.message(chat_id=c, text="write a lot")
    parts = settled(tg, fake, c)
    assert len(parts) >= 3
    for part in parts:
        assert u16(part["text"]) <= MAX_UNITS and part["entities"]
        assert parse_html(part["html"])[0] == part["text"]
    assert [p["reply_to"] for p in parts] == [update["message"]["message_id"]] + [None] * (len(parts) - 1)
    joined = "".join(p["text"] for p in parts)
    assert joined.index("Step 0") < joined.index("Step 12") < joined.index("Step 24")
    assert joined.count("value_24_9") == 1


@pytest.mark.timeout(400)
def test_a_429_storm_delays_but_never_doubles_or_reorders(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    c = chat()
    add_rule(llm, "storm one", {"content": long_answer()})
    add_rule(llm, "storm two", {"content": "second answer"})
    mark = len(fake.calls)
    fake.fail(429, retry_after=1, times=6, method="sendMessage", after=1)
    first = fake.message(chat_id=c, text="storm one")
    wait_for(lambda: sql(tg, "SELECT id FROM outbox WHERE chat_id = :c", c=str(c)), 60, "no delivery")
    fake.message(chat_id=c, text="storm two")
    sent = settled(tg, fake, c, timeout=300)
    texts = [m["text"] for m in sent]
    assert len(texts) == len(set(texts)) and texts[-1] == "second answer"  # no part twice; order kept
    assert sent[0]["reply_to"] == first["message"]["message_id"]
    assert sum(1 for x in fake.calls[mark:] if x["method"] == "sendMessage" and x["status"] == 429) == 6
    rows = sql(tg, "SELECT attempts FROM outbox WHERE chat_id = :c ORDER BY id", c=str(c))
    assert rows[0]["attempts"] > 1


# --- who may talk, and the pollers -------------------------------------------------------------


def test_a_stranger_stores_nothing_and_gets_nothing(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    stranger = fake.message(chat_id=STRANGER, text="let me in, secret-stranger-words")
    c = chat()
    fake.message(chat_id=c, text="after the stranger")  # polled after the stranger's update
    assert len(settled(tg, fake, c)) == 1
    assert sql(tg, "SELECT id FROM channel_events WHERE event_key LIKE :k", k=f"m:{STRANGER}:%") == []
    assert sql(tg, "SELECT id FROM inbound WHERE platform_message_id LIKE :p", p=f"{STRANGER}_%") == []
    assert sql(tg, "SELECT id FROM sessions WHERE chat_id = :c", c=str(STRANGER)) == []
    assert fake.sent_to(STRANGER) == [] and stranger["update_id"] < fake.bot(TOKEN_A).next_update_id
    asked = HTTP.get(llm.url + "/_fake/requests").json()["requests"]
    assert not any("secret-stranger-words" in json.dumps(r["body"]) for r in asked)


@pytest.mark.timeout(300)
def test_a_foreign_poller_409_backs_off_without_a_crash_loop(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    mark = len(fake.calls)
    fake.fail(409, times=3, method="getUpdates")
    [name] = pollers(tg)
    holds = log(tg, name).count("this process polls bot")
    wait_for(lambda: tg.health()["checks"]["channel:telegram"]["state"] == "conflict", 60, "no conflict shown")
    c = chat()
    fake.message(chat_id=c, text="after the conflict")
    assert len(settled(tg, fake, c)) == 1
    conflicts = [x for x in fake.calls[mark:] if x["method"] == "getUpdates" and x["status"] == 409]
    # backed off: 0.5-1 s, then 1-2 s between the three (a crash loop would retry at once); a fourth would add 2-4 s
    assert len(conflicts) == 3 and conflicts[-1]["time"] - conflicts[0]["time"] >= 1.5
    assert tg.procs[name].poll() is None and log(tg, name).count("this process polls bot") == holds  # no restart
    wait_for(lambda: tg.health()["checks"]["channel:telegram"]["ok"], 30, "health did not recover")


@pytest.mark.timeout(300)
def test_a_second_poller_stands_by_and_takes_over(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    [first] = pollers(tg)
    second = "tg2" if first != "tg2" else "tg3"
    conflicts = fake.bot(TOKEN_A).conflicts
    start_poller(tg, second)
    wait_for(lambda: "standing by" in log(tg, second), 30, "the second poller did not stand by")
    c = chat()
    fake.message(chat_id=c, text="two pollers running")
    assert len(settled(tg, fake, c)) == 1
    assert fake.bot(TOKEN_A).conflicts == conflicts  # they never polled at the same time
    tg.kill(first)
    wait_for(lambda: "this process polls bot" in log(tg, second), 40, "the standby did not take over")
    c = chat()
    fake.message(chat_id=c, text="after the takeover")
    assert len(settled(tg, fake, c)) == 1


def test_health_shows_the_pollers_state(tg: Stack, fake: FakeTelegram) -> None:
    checks = tg.health()["checks"]
    polling = checks["channel:telegram"]
    assert polling["ok"] and polling["state"] == "polling" and polling["mode"] == "polling"
    assert polling["last_update_at"] and time.time() - polling["last_update_at"] < 600
    assert checks["channel:tghook"]["ok"] and checks["channel:tghook"]["mode"] == "webhook"


# --- webhook mode ------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_the_webhook_channel_answers_once_across_a_web_restart(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    wait_for(lambda: fake.bot(TOKEN_B).webhook is not None, 30, "the web process did not set the webhook")
    assert fake.bot(TOKEN_B).webhook["url"] == f"{tg.http}/telegram/tghook"
    c = chat()
    update = fake.message(chat_id=c, text="via the webhook", token=TOKEN_B)
    fake.push(update, token=TOKEN_B, copies=4)
    [reply] = settled(tg, fake, c, channel="tghook", token=TOKEN_B)
    assert reply["text"] == "You said: via the webhook" and reply["reply_to"] == update["message"]["message_id"]
    tg.kill("web", signal.SIGKILL)
    fake.push(update, token=TOKEN_B, copies=2)     # retried by the fake until the web is back
    tg.start_web()
    wait_for(lambda: sum(1 for x in fake.calls if x["method"] == "webhook" and x["status"] == 200) >= 7, 60,
             "the redeliveries did not get through")
    assert len(settled(tg, fake, c, channel="tghook", token=TOKEN_B)) == 1
    r = HTTP.post(f"{tg.http}/telegram/tghook", json=update["message"], headers={
        "X-Telegram-Bot-Api-Secret-Token": "wrong"})
    assert r.status_code == 401 and r.json()["ok"] is False
    r = HTTP.get(f"{tg.http}/telegram/tghook")
    assert r.status_code == 405 and r.headers["content-type"].startswith("application/json")
    assert TOKEN_A not in tg.all_logs() and TOKEN_B not in tg.all_logs() and SECRET not in tg.all_logs()
