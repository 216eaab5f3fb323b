"""The locks between a channel's live progress and its final answer are Leases: nobody frees another's.

A real Redis (a private redis-server per test), the fake Feishu OpenAPI and the fake Bot API. The
"other process" is a Lease the test takes on the same key, as live.py holds it during one update: the
answer waits for it, gives up, still writes the answer, and the other holder's lock stays. The other way
round, a progress update whose lock ran out mid-call (and was taken, as by the answer) leaves it alone.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis

from picobot.app import App as Runtime, build_runtime
from picobot.channels.base import Delivery
from picobot.channels.feishu import cards, keys as feishu_keys
from picobot.channels.feishu.adapter import CARD_WAIT_SECS, FeishuAdapter, card_key
from picobot.channels.feishu.live import FeishuLive
from picobot.channels.telegram import keys as telegram_keys
from picobot.channels.telegram.adapter import LIVE_WAIT_SECS
from picobot.channels.telegram.live import MIN_EDIT_INTERVAL, TelegramLive
from picobot.config import Config
from picobot.coord import Lease
from scripts.fake_feishu import FakeFeishu
from scripts.fake_telegram import FakeTelegram
from tests.telegram_fake import add_delivery, fake_tg, make_rt  # noqa: F401 (fixtures)

CHAT = 5552


class _NoQueue:
    def enqueue_turn(self, session_id: str) -> None:
        pass


@pytest.fixture
def feishu_rt(tmp_path: Path, redis_url: str, feishu_config: dict, monkeypatch: pytest.MonkeyPatch
              ) -> Iterator[Runtime]:
    monkeypatch.setenv("REDIS_URL", redis_url)
    config = Config.model_validate({"home": str(tmp_path / "home"),
                                    "channels": {"feishu": {**feishu_config, "live_updates": True}}})
    rt = build_runtime(config, _NoQueue(), migrate=True)  # type: ignore[arg-type]
    yield rt
    rt.close()


def other_holder(r: redis.Redis, key: str) -> Lease:
    lease = Lease(r, key, 60)
    assert lease.acquire()
    return lease


def taken_meanwhile(r: redis.Redis, key: str, holders: list[Lease]) -> None:
    """The lock on `key` runs out (as when an update outlasts its TTL) and another holder takes it."""
    r.pexpire(key, 1)
    deadline = time.monotonic() + 5
    while r.exists(key):
        assert time.monotonic() < deadline
        time.sleep(0.005)
    holders.append(other_holder(r, key))


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    return call(), time.monotonic() - started


# --- the Lease ---------------------------------------------------------------------------------


def test_a_lease_held_by_one_holder_is_neither_taken_nor_freed_by_another(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    key = "picobot:test:lock"
    holder = other_holder(r, key)
    other = Lease(r, key, 60)
    taken, waited = timed(lambda: other.acquire_within(0.3))
    assert not taken and waited >= 0.3
    other.release()
    assert holder.is_held()
    holder.release()
    assert r.get(key) is None


def test_acquire_within_takes_the_lease_once_its_holder_lets_go(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    key = "picobot:test:lock"
    holder = other_holder(r, key)
    letting_go = threading.Timer(0.2, holder.release)
    letting_go.start()
    try:
        other = Lease(r, key, 60)
        taken, waited = timed(lambda: other.acquire_within(5))
    finally:
        letting_go.join()
    assert taken and 0.2 <= waited < 5 and other.is_held()


# --- the adapters' final updates ---------------------------------------------------------------


def test_feishu_answer_goes_into_the_card_and_leaves_a_lock_it_could_not_take(
        feishu_rt: Runtime, fake_feishu: FakeFeishu) -> None:
    adapter, r = feishu_rt.channels.adapter("feishu"), feishu_rt.redis
    assert isinstance(adapter, FeishuAdapter)
    fake_feishu.add_message("om_q", "oc_l", "text", {"text": "question"})
    card_id = adapter.api.create_card(cards.streaming_card("so far"))
    message_id = adapter.api.reply("om_q", "interactive", cards.card_message(card_id), "u-live-card")
    turn_id = uuid.uuid4().hex
    r.set(card_key(turn_id), json.dumps({"card_id": card_id, "message_id": message_id}), ex=3600)
    holder = other_holder(r, feishu_keys.card_lock(card_id))
    d = Delivery(id=1, channel="feishu", chat_id="oc_l", kind="reply", idempotency_key=f"d-{turn_id[:12]}",
                 payload={"text": "The answer", "format": "markdown", "reply_to": "om_q", "turn_id": turn_id},
                 attempts=0)
    result, waited = timed(lambda: adapter.deliver(d))
    assert waited >= CARD_WAIT_SECS  # it waited for the lock, then wrote the answer anyway
    assert holder.is_held()
    card = fake_feishu.cards[card_id]
    assert card["texts"][-1] == "The answer" and card["closed"]
    assert result["message_ids"] == [message_id] and len(fake_feishu.messages_for("oc_l")) == 1


def test_telegram_answer_is_edited_in_and_leaves_a_lock_it_could_not_take(fake_tg: FakeTelegram,
                                                                           make_rt: Any) -> None:
    rt = make_rt(live_updates=True)
    adapter, r = rt.channels.adapter("telegram"), rt.redis
    live_id = adapter.api.send_message(str(CHAT), "Thinking about", html=True, reply_to=None)
    turn_id = uuid.uuid4().hex
    r.set(telegram_keys.live(turn_id), json.dumps({"message_id": live_id, "final": False}), ex=3600)
    holder = other_holder(r, telegram_keys.live_lock(turn_id))
    result, waited = timed(lambda: adapter.deliver(add_delivery(rt, CHAT, "The **final** answer",
                                                                turn_id=turn_id)))
    assert waited >= LIVE_WAIT_SECS  # it waited for the lock, then edited the answer in anyway
    assert holder.is_held()
    [only] = fake_tg.sent_to(CHAT)
    assert only["message_id"] == live_id and only["text"] == "The final answer"
    assert result["message_ids"] == [live_id]


# --- the live progress updates -----------------------------------------------------------------


def text_snapshot(text: str) -> dict:
    return {"blocks": [{"type": "text", "text": text}]}


@pytest.mark.parametrize("update", ["stream", "close"])
def test_feishu_progress_leaves_the_card_lock_another_took_while_it_ran(
        feishu_rt: Runtime, fake_feishu: FakeFeishu, update: str) -> None:
    adapter, r = feishu_rt.channels.adapter("feishu"), feishu_rt.redis
    assert isinstance(adapter, FeishuAdapter)
    live = adapter.live()
    assert isinstance(live, FeishuLive)
    fake_feishu.add_message("om_q", "oc_l", "text", {"text": "question"})
    turn_id = uuid.uuid4().hex
    live.turn_started("oc_l", "om_q", turn_id)
    live.snapshot("oc_l", turn_id, text_snapshot("so far"))  # creates the streaming card
    [card_id] = fake_feishu.cards
    lock_key, holders = feishu_keys.card_lock(card_id), []

    def slow(groups: tuple[str, ...], builtin: Callable[..., Any]) -> Callable[..., Any]:
        def serve(query: dict[str, str], headers: dict[str, str], raw: bytes) -> tuple[int, dict, bytes]:
            taken_meanwhile(r, lock_key, holders)  # the update's lock ran out mid-call, and was taken
            status, env = builtin(groups, query, json.loads(raw))
            return status, {}, json.dumps(env).encode()
        return serve

    if update == "stream":
        fake_feishu.add_route("PUT", f"/open-apis/cardkit/v1/cards/{card_id}/elements/{cards.STREAM_ELEMENT_ID}"
                                     "/content", slow((card_id, cards.STREAM_ELEMENT_ID), fake_feishu.stream_text))
        live.snapshot("oc_l", turn_id, text_snapshot("so far, and more"))
        assert fake_feishu.cards[card_id]["texts"][-1] == "so far, and more"
    else:
        fake_feishu.add_route("PATCH", f"/open-apis/cardkit/v1/cards/{card_id}/settings",
                              slow((card_id,), fake_feishu.card_settings))
        live.turn_finished("oc_l", turn_id, {"status": "failed", "final_text": ""})
        assert fake_feishu.cards[card_id]["closed"]
    [holder] = holders
    assert holder.is_held()


def test_telegram_progress_edit_leaves_the_lock_another_took_while_it_ran(fake_tg: FakeTelegram,
                                                                          make_rt: Any) -> None:
    rt = make_rt(live_updates=True)
    adapter, r = rt.channels.adapter("telegram"), rt.redis
    live = adapter.live()
    assert isinstance(live, TelegramLive)
    turn_id = uuid.uuid4().hex
    live.turn_started(str(CHAT), None, turn_id)
    try:
        live.snapshot(str(CHAT), turn_id, text_snapshot("Thinking about"))  # sends the live message
        [first] = fake_tg.sent_to(CHAT)
        time.sleep(MIN_EDIT_INTERVAL + 0.1)
        fake_tg.hold(True)
        editing = threading.Thread(target=live.snapshot, args=(str(CHAT), turn_id, text_snapshot("Thinking more")))
        editing.start()
        holders: list[Lease] = []
        try:
            deadline = time.monotonic() + 5
            while fake_tg.held < 1:  # the edit is in flight, holding the lock
                assert time.monotonic() < deadline
                time.sleep(0.01)
            taken_meanwhile(r, telegram_keys.live_lock(turn_id), holders)
        finally:
            fake_tg.hold(False)
            editing.join(timeout=10)
        [holder] = holders
        assert holder.is_held()
        [only] = fake_tg.sent_to(CHAT)
        assert only["message_id"] == first["message_id"] and only["text"] == "Thinking more"
    finally:
        live.turn_finished(str(CHAT), turn_id, {"status": "completed"})
