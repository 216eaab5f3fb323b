"""Telegram outbound against the fake Bot API: TelegramAdapter.deliver, the delivery lane, live progress.

In process: a real runtime (temp SQLite, a private Redis) and scripts/fake_telegram, which parses the
HTML it gets as Telegram does and refuses what Telegram refuses.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from picobot.channels.base import DeliveryError
from picobot.channels.delivery import deliver_lane
from picobot.channels.telegram.inbound import message_ref
from picobot.channels.telegram.split import MAX_UNITS
from picobot.storage import outbox
from scripts.fake_telegram import FakeTelegram, parse_html, u16
from tests.telegram_fake import add_delivery, fake_tg, make_rt  # noqa: F401 (fixtures)

CHAT = 5551


def long_answer(sections: int = 25) -> str:
    part = ("## Step {n}\n\nThis is **bold with *nested* text** and `inline <code>` and ~~old~~ [docs](https://e.com/{n}).\n\n"
            "```python\n" + "\n".join(f"value_{{n}}_{j} = compute({j}) * 2  # <&>" for j in range(10)) + "\n```\n\n"
            "- first point\n- second point with **emphasis**\n\n> a note\n\n")
    return "".join(part.format(n=n) for n in range(sections))


def row(rt: Any, delivery_id: int) -> Any:
    with rt.db.connect() as conn:
        return [r for r in outbox.latest(conn, limit=200) if r.id == delivery_id][0]


def test_a_reply_threads_to_the_users_message(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    user = fake_tg.message(chat_id=CHAT, text="question", queue=False)["message"]
    d = add_delivery(rt, CHAT, "**answer**", reply_to=message_ref(CHAT, user["message_id"]))
    result = rt.channels.adapter("telegram").deliver(d)
    [sent] = fake_tg.sent_to(CHAT)
    assert sent["reply_to"] == user["message_id"] and sent["text"] == "answer"
    assert sent["entities"] == [{"type": "bold", "offset": 0, "length": 6}]
    assert result["message_ids"] == [sent["message_id"]]


def test_a_reply_to_a_gone_message_is_still_sent(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    d = add_delivery(rt, CHAT, "still here", reply_to=message_ref(CHAT, 987654))
    rt.channels.adapter("telegram").deliver(d)
    [sent] = fake_tg.sent_to(CHAT)
    assert sent["asked_reply_to"] == 987654 and sent["reply_to"] is None and sent["text"] == "still here"


def test_a_10000_character_answer_arrives_in_parts_the_fake_accepts(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    text = long_answer()
    assert len(text) > 10_000
    result = rt.channels.adapter("telegram").deliver(add_delivery(rt, CHAT, text))
    sent = fake_tg.sent_to(CHAT)
    assert len(sent) >= 3 and result["message_ids"] == [m["message_id"] for m in sent]
    assert all(u16(m["text"]) <= MAX_UNITS and m["entities"] for m in sent)
    assert [c for c in fake_tg.calls if c["method"] == "sendMessage"] == [
        c for c in fake_tg.calls if c["method"] == "sendMessage" and c["status"] == 200]
    joined = "".join(m["text"] for m in sent)
    assert joined.count("value_24_9") == 1 and joined.index("Step 0") < joined.index("Step 24")


def test_a_part_telegram_cannot_parse_is_sent_as_plain_text(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    fake_tg.fail(400, method="sendMessage", description="Bad Request: can't parse entities: Unsupported start tag "
                                                        "\"x\" at byte offset 3")
    rt.channels.adapter("telegram").deliver(add_delivery(rt, CHAT, "**bold** <b>&"))
    [sent] = fake_tg.sent_to(CHAT)
    assert sent["text"] == "bold <b>&" and sent["entities"] == [] and sent["html"] is None


def test_a_retry_after_429_sends_only_the_parts_not_yet_sent(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    d = add_delivery(rt, CHAT, long_answer())
    adapter = rt.channels.adapter("telegram")
    fake_tg.fail(429, retry_after=7, method="sendMessage", after=1)  # part 0 goes out, part 1 is refused
    with pytest.raises(DeliveryError) as caught:
        adapter.deliver(d)
    assert not caught.value.permanent and caught.value.retry_after == 7 and caught.value.code == "429"
    assert len(fake_tg.sent_to(CHAT)) == 1
    assert row(rt, d.id).result["sent"] == {"0": fake_tg.sent_to(CHAT)[0]["message_id"]}
    adapter.deliver(d)  # the lane's retry
    texts = fake_tg.texts(CHAT)
    assert len(texts) >= 3 and len(set(texts)) == len(texts)  # nothing shown twice
    assert "".join(texts).count("value_0_0") == 1


def test_the_lane_waits_for_retry_after_of_that_chat(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    d = add_delivery(rt, CHAT, "rate limited")
    fake_tg.fail(429, retry_after=4, method="sendMessage")
    before = time.time()
    assert deliver_lane(rt, "telegram", str(CHAT))["state"] == "waiting"
    waiting = row(rt, d.id)
    assert waiting.status == "pending" and waiting.error_code == "429"
    assert before + 3.5 <= waiting.next_attempt_at <= time.time() + 4.5
    assert rt.queue.lanes[-1][:2] == ("telegram", str(CHAT)) and 3.5 <= rt.queue.lanes[-1][2] <= 4.5
    with rt.db.begin() as conn:  # the backoff is over
        conn.execute(outbox._o.update().where(outbox._o.c.id == d.id).values(next_attempt_at=time.time()))
    assert deliver_lane(rt, "telegram", str(CHAT))["sent"] == 1
    assert fake_tg.texts(CHAT) == ["rate limited"] and row(rt, d.id).status == "sent"


def test_a_blocked_bot_fails_permanently_and_a_5xx_transiently(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    adapter = rt.channels.adapter("telegram")
    fake_tg.fail(502, method="sendMessage")
    with pytest.raises(DeliveryError) as caught:
        adapter.deliver(add_delivery(rt, CHAT, "x"))
    assert not caught.value.permanent and caught.value.retry_after is None
    fake_tg.block(CHAT)
    with pytest.raises(DeliveryError) as caught:
        adapter.deliver(add_delivery(rt, CHAT, "y"))
    assert caught.value.permanent and caught.value.code == "403"


def test_notices_go_as_plain_text(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    rt.channels.adapter("telegram").deliver(add_delivery(rt, CHAT, "⚠ <b>not bold</b> & **not bold**", kind="notice",
                                                         fmt="plain"))
    [sent] = fake_tg.sent_to(CHAT)
    assert sent["text"] == "⚠ <b>not bold</b> & **not bold**" and sent["html"] is None


def test_a_group_that_became_a_supergroup_gets_its_answer_there(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    fake_tg.chat_flags[(fake_tg.token, "-77")] = {"migrated_to": -1000077}
    d = add_delivery(rt, -77, long_answer())
    rt.channels.adapter("telegram").deliver(d)
    assert fake_tg.sent_to(-77) == [] and len(fake_tg.sent_to(-1000077)) >= 2
    assert row(rt, d.id).result["chat_id"] == "-1000077"


def test_no_error_carries_the_token(make_rt: Any, fake_tg: FakeTelegram) -> None:
    rt = make_rt(base_url="http://127.0.0.1:9")  # nothing listens: a connect error
    with pytest.raises(DeliveryError) as caught:
        rt.channels.adapter("telegram").deliver(add_delivery(rt, CHAT, "x"))
    assert fake_tg.token not in str(caught.value) and fake_tg.token.split(":")[1] not in repr(caught.value)
    assert not caught.value.permanent


# --- live progress --------------------------------------------------------------------------------


def snap(text: str, tool: str | None = None) -> dict:
    blocks = [{"type": "tool", "name": tool, "status": "running"}] if tool else []
    return {"blocks": blocks + [{"type": "text", "text": text}]}


def test_typing_while_a_turn_runs_and_the_reaction_comes_off(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt(reaction_emoji="👀")
    user = fake_tg.message(chat_id=CHAT, text="q", queue=False)["message"]
    live = rt.channels.adapter("telegram").live()
    live.turn_started(str(CHAT), message_ref(CHAT, user["message_id"]), "turn-typing")
    deadline = time.monotonic() + 11
    while len(fake_tg.actions_in(CHAT)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(fake_tg.actions_in(CHAT)) >= 3  # repeated every 4 s: one lasts about 5 s
    live.turn_finished(str(CHAT), "turn-typing", {"status": "completed"})
    time.sleep(TYPING_GAP)
    count = len(fake_tg.actions_in(CHAT))
    time.sleep(TYPING_GAP)
    assert len(fake_tg.actions_in(CHAT)) == count  # stopped
    reactions = [r["reaction"] for r in fake_tg.bot().reactions]
    assert reactions == [[{"type": "emoji", "emoji": "👀"}], []]


TYPING_GAP = 4.5


def test_the_live_message_is_edited_and_becomes_the_answer(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt(live_updates=True)
    user = fake_tg.message(chat_id=CHAT, text="q", queue=False)["message"]
    adapter = rt.channels.adapter("telegram")
    live = adapter.live()
    ref = message_ref(CHAT, user["message_id"])
    live.turn_started(str(CHAT), ref, "turn-live")
    live.snapshot(str(CHAT), "turn-live", snap("Thinking about", tool="calculator"))
    [first] = fake_tg.sent_to(CHAT)
    assert first["reply_to"] == user["message_id"] and "Thinking about" in first["text"]
    time.sleep(1.6)
    live.snapshot(str(CHAT), "turn-live", snap("Thinking about it **more**"))
    assert fake_tg.bot().edits and "more" in fake_tg.bot().edits[-1]["text"]
    adapter.deliver(add_delivery(rt, CHAT, "The **final** answer", reply_to=ref, turn_id="turn-live"))
    time.sleep(1.6)
    live.snapshot(str(CHAT), "turn-live", snap("late progress"))  # the relay's last snapshot, after the answer
    live.turn_finished(str(CHAT), "turn-live", {"status": "completed", "final_text": "The final answer"})
    [only] = fake_tg.sent_to(CHAT)  # no second message: the live one was edited into the answer
    assert only["message_id"] == first["message_id"] and only["text"] == "The final answer"


def test_an_answer_before_any_live_message_is_a_new_message(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt(live_updates=True)
    adapter = rt.channels.adapter("telegram")
    live = adapter.live()
    live.turn_started(str(CHAT), None, "turn-fast")
    adapter.deliver(add_delivery(rt, CHAT, "fast answer", turn_id="turn-fast"))
    live.snapshot(str(CHAT), "turn-fast", snap("progress that lost the race"))
    live.turn_finished(str(CHAT), "turn-fast", {"status": "completed"})
    assert fake_tg.texts(CHAT) == ["fast answer"]


def test_the_answer_parts_parse_as_html(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    rt.channels.adapter("telegram").deliver(add_delivery(rt, CHAT, long_answer(12)))
    for m in fake_tg.sent_to(CHAT):
        assert parse_html(m["html"])[0] == m["text"]
