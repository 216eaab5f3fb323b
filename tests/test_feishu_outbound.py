"""Feishu outbound against the fake Feishu: the API client, FeishuAdapter.deliver and live progress.

In process: a real runtime (temp SQLite, a private Redis) and the fake Feishu OpenAPI server of
scripts/fake_feishu. The live relay is fed real turn events (the publisher's shapes) and calls the
real FeishuLive hooks, which call the fake.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from picobot.channels.base import Delivery, DeliveryError
from picobot.channels.feishu import cards
from picobot.channels.feishu.adapter import FeishuAdapter, card_key, part_uuid
from picobot.channels.feishu.api import TOKEN_PATH, FeishuApi, FeishuError
from picobot.channels.live import LiveRelay, claim_key
from picobot.config import Config
from picobot.app import App as Runtime, build_runtime
from picobot.storage import inbound, sessions


class _NoQueue:
    def enqueue_turn(self, session_id: str) -> None:
        pass


@pytest.fixture
def make_rt(tmp_path: Path, redis_url: str, feishu_config: dict, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[Callable[..., Runtime]]:
    monkeypatch.setenv("REDIS_URL", redis_url)
    made: list[Runtime] = []

    def make(**feishu: Any) -> Runtime:
        home = tmp_path / f"home{len(made)}"
        config = Config.model_validate({"home": str(home), "channels": {"feishu": {**feishu_config, **feishu}}})
        rt = build_runtime(config, _NoQueue(), migrate=True)  # type: ignore[arg-type]
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


def token_fetches(fake) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for c in fake.calls if c["path"] == TOKEN_PATH)


def delivery(chat_id: str, text: str, kind: str = "reply", reply_to: str | None = None, **payload: Any) -> Delivery:
    key = f"d-{uuid.uuid4().hex[:12]}"
    return Delivery(id=1, channel="feishu", chat_id=chat_id, kind=kind, idempotency_key=key,
                    payload={"text": text, "format": "markdown", "reply_to": reply_to, **payload}, attempts=0)


def wait_for(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, "condition not met in time"
            return value
        time.sleep(0.02)


# --- FeishuApi ---------------------------------------------------------------------------------


def test_token_is_cached_and_refreshed_once_on_expiry(fake_feishu) -> None:  # type: ignore[no-untyped-def]
    api = FeishuApi(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url)
    api.send("oc_a", "text", {"text": "one"}, "u-1")
    api.send("oc_b", "text", {"text": "two"}, "u-2")
    assert token_fetches(fake_feishu) == 1
    fake_feishu.expire_tokens()  # the next call gets 99991663: one refresh, one retry, success
    assert api.send("oc_c", "text", {"text": "three"}, "u-3")
    assert token_fetches(fake_feishu) == 2
    assert [c["code"] for c in fake_feishu.calls if c["path"] != TOKEN_PATH][-2:] == [99991663, 0]
    assert [m["content"]["text"] for m in fake_feishu.sent] == ["one", "two", "three"]


def test_token_is_shared_through_redis(fake_feishu, redis_url: str) -> None:  # type: ignore[no-untyped-def]
    import redis

    r = redis.Redis.from_url(redis_url)
    first = FeishuApi(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url, redis=r)
    second = FeishuApi(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url, redis=r)
    first.add_reaction("om_1", "Typing")
    second.add_reaction("om_1", "Typing")
    assert token_fetches(fake_feishu) == 1
    assert 0 < r.ttl(f"picobot:feishu:token:{fake_feishu.app_id}") <= 7200 - 600


def test_rate_limit_carries_retry_after(fake_feishu) -> None:  # type: ignore[no-untyped-def]
    api = FeishuApi(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url)
    fake_feishu.fail(status=429, times=1, reset=7)
    with pytest.raises(FeishuError) as info:
        api.send("oc_a", "text", {"text": "x"}, "u-1")
    assert (info.value.http_status, info.value.code, info.value.retry_after) == (429, 99991400, 7.0)
    assert not info.value.permanent


def test_server_down_and_timeouts_are_transient(fake_feishu) -> None:  # type: ignore[no-untyped-def]
    api = FeishuApi(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url, timeout=0.5)
    fake_feishu.down(True)
    with pytest.raises(FeishuError) as info:
        api.send("oc_a", "text", {"text": "x"}, "u-1")
    assert info.value.http_status == 503 and not info.value.permanent
    fake_feishu.down(False)

    def slow(query, headers, raw):  # type: ignore[no-untyped-def]
        time.sleep(1.5)
        return 200, {}, b'{"code":0,"data":{}}'

    fake_feishu.add_route("POST", "/open-apis/im/v1/messages/om_slow/reply", slow)
    with pytest.raises(FeishuError) as info:
        api.reply("om_slow", "text", {"text": "x"}, "u-2")
    assert "timed out" in str(info.value) and not info.value.permanent


def test_secrets_stay_out_of_errors_and_logs(fake_feishu, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    api = FeishuApi(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url)
    api.send("oc_a", "text", {"text": "x"}, "u-1")
    token = api._token[0]  # type: ignore[index]
    fake_feishu.expire_tokens()
    fake_feishu.fail(status=500, times=1)
    with pytest.raises(FeishuError) as info:
        api.send("oc_a", "text", {"text": "y"}, "u-2")
    shown = str(info.value) + repr(api) + caplog.text
    assert fake_feishu.app_secret not in shown and token not in shown


def test_get_message_none_when_gone(fake_feishu) -> None:  # type: ignore[no-untyped-def]
    api = FeishuApi(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url)
    fake_feishu.add_message("om_here", "oc_a", "text", {"text": "parent"})
    assert api.get_message("om_here")["message_id"] == "om_here"
    assert api.get_message("om_nowhere") is None


def test_download_resource_returns_bytes_and_refuses_oversize(fake_feishu) -> None:  # type: ignore[no-untyped-def]
    api = FeishuApi(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url)
    fake_feishu.add_resource("om_img", "img_k", b"\x89PNG" + b"0" * 1000, "image/png")
    assert api.download_resource("om_img", "img_k", "image", 10_000) == (b"\x89PNG" + b"0" * 1000, "image/png")
    with pytest.raises(FeishuError) as info:
        api.download_resource("om_img", "img_k", "image", 100)
    assert info.value.permanent
    with pytest.raises(FeishuError) as info:
        api.download_resource("om_img", "nokey", "image", 10_000)
    assert info.value.code == 234003


def test_normalize_hands_the_event_to_inbound_with_the_bots_open_id(make_rt, fake_feishu, event_sender) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt()
    adapter = FeishuAdapter("feishu", rt.config.channels["feishu"], rt)
    sender = event_sender("http://127.0.0.1:9/feishu/events")
    group = sender.message(chat_id="oc_g", text="@_user_1 hello", chat_type="group",
                           mentions=[sender.bot_mention()])
    [msg] = adapter.normalize(group)
    assert (msg.channel, msg.chat_id, msg.sender_id) == ("feishu", "oc_g", "ou_u1")
    assert "hello" in msg.text and "@_user_1" not in msg.text
    assert adapter.normalize(sender.message(chat_id="oc_g", text="not for the bot", chat_type="group")) == []


# --- FeishuAdapter.deliver ---------------------------------------------------------------------


def test_reply_is_a_markdown_card_with_the_idempotency_key_as_uuid(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt()
    adapter = FeishuAdapter("feishu", rt.config.channels["feishu"], rt)
    fake_feishu.add_message("om_user", "oc_1", "text", {"text": "hi"})
    d = delivery("oc_1", "| a | b |\n|---|---|\n| 1 | 2 |", reply_to="om_user")
    first = adapter.deliver(d)
    again = adapter.deliver(d)  # a retry after a lost answer: Feishu's uuid makes it the same message
    assert first == again and len(fake_feishu.sent) == 1
    sent = fake_feishu.sent[0]
    assert (sent["kind"], sent["reply_to"], sent["uuid"], sent["msg_type"]) == ("reply", "om_user", d.idempotency_key,
                                                                                 "interactive")
    assert sent["content"] == cards.markdown_card(d.payload["text"])


def test_reply_falls_back_to_a_send_when_the_parent_is_gone(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt()
    adapter = FeishuAdapter("feishu", rt.config.channels["feishu"], rt)
    fake_feishu.add_message("om_user", "oc_1", "text", {"text": "hi"})
    fake_feishu.recall("om_user")
    adapter.deliver(delivery("oc_1", "answer", reply_to="om_user"))
    assert [(m["kind"], m["chat_id"]) for m in fake_feishu.sent] == [("send", "oc_1")]


def test_notice_is_plain_text_and_a_message_goes_to_the_chat(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt()
    adapter = FeishuAdapter("feishu", rt.config.channels["feishu"], rt)
    fake_feishu.add_message("om_user", "oc_1", "text", {"text": "hi"})
    adapter.deliver(delivery("oc_1", "The turn failed.", kind="notice", reply_to="om_user"))
    adapter.deliver(delivery("oc_1", "**scheduled**", kind="message", reply_to="om_user"))
    notice, message = fake_feishu.sent
    assert (notice["msg_type"], notice["content"], notice["kind"]) == ("text", {"text": "The turn failed."}, "reply")
    assert (message["msg_type"], message["kind"]) == ("interactive", "send")


@pytest.mark.parametrize("state,code", [("removed", "230002"), ("dissolved", "232009")])
def test_bot_removed_or_chat_dissolved_is_permanent(make_rt, fake_feishu, state: str, code: str) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt()
    adapter = FeishuAdapter("feishu", rt.config.channels["feishu"], rt)
    fake_feishu.set_chat("oc_gone", state)
    with pytest.raises(DeliveryError) as info:
        adapter.deliver(delivery("oc_gone", "answer", kind="message"))
    assert info.value.permanent and info.value.code == code


def test_rate_limit_becomes_a_transient_delivery_error_with_retry_after(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt()
    adapter = FeishuAdapter("feishu", rt.config.channels["feishu"], rt)
    adapter.api.bot_info()  # the token is fetched: the failure below hits the send itself
    fake_feishu.fail(status=429, times=1, reset=3)
    with pytest.raises(DeliveryError) as info:
        adapter.deliver(delivery("oc_1", "answer", kind="message"))
    assert not info.value.permanent and info.value.retry_after == 3.0
    fake_feishu.fail(status=502, times=1)
    with pytest.raises(DeliveryError) as info:
        adapter.deliver(delivery("oc_1", "answer", kind="message"))
    assert not info.value.permanent and info.value.retry_after is None


def test_a_long_answer_goes_as_several_cards_without_broken_code_blocks(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt(max_message_chars=600)
    fake_feishu.rate_limit_qps = None  # the fake's 5 sends/s per chat is not what this test is about
    adapter = FeishuAdapter("feishu", rt.config.channels["feishu"], rt)
    fake_feishu.add_message("om_user", "oc_1", "text", {"text": "hi"})
    code = "".join(f"print('line {i}')\n" for i in range(120))
    text = "Here is the script:\n\n```python\n" + code + "```\n\nDone. 中文 too.\n"
    d = delivery("oc_1", text, reply_to="om_user")
    result = adapter.deliver(d)
    sent = fake_feishu.sent
    assert len(sent) == len(result["message_ids"]) > 3
    assert [m["uuid"] for m in sent] == [part_uuid(d.idempotency_key, i) for i in range(len(sent))]
    texts = [m["content"]["body"]["elements"][0]["content"] for m in sent]
    assert all(len(t) <= 600 and t.count("```") % 2 == 0 for t in texts)
    assert all(m["kind"] == "reply" and m["reply_to"] == "om_user" for m in sent)
    assert [p.text for p in cards.plan_parts(text, 600)] == texts


# --- live progress: the relay and FeishuLive ---------------------------------------------------


def _turn_input(rt: Runtime, chat_id: str, message_id: str) -> tuple[str, int]:
    with rt.db.begin() as conn:
        sid = sessions.current_or_create_id(conn, "feishu", chat_id)
        queued, _ = inbound.enqueue(conn, sid, "feishu", [{"type": "text", "text": "hi"}], "ou_u1",
                                    platform_message_id=message_id)
    return sid, queued.seq


def _updated(sid: str, turn_id: str, seq: int, blocks: list[dict], revision: int) -> str:
    return json.dumps({"type": "turn_updated", "session_id": sid, "turn_id": turn_id, "revision": revision,
                       "status": "running", "inbound_seqs": [seq], "blocks": blocks})


def _completed(sid: str, turn_id: str, seq: int, final_text: str, status: str = "completed") -> str:
    return json.dumps({"type": "turn_completed", "session_id": sid, "turn_id": turn_id, "status": status,
                       "final_text": final_text, "error": None, "inbound_seqs": [seq]})


def test_reaction_is_added_while_the_turn_runs_and_removed_after(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt()
    fake_feishu.add_message("om_in", "oc_r", "text", {"text": "hi"})
    sid, seq = _turn_input(rt, "oc_r", "om_in")
    relay = LiveRelay(rt, min_interval=0)
    try:
        turn_id = uuid.uuid4().hex
        relay.dispatch(_updated(sid, turn_id, seq, [{"type": "reasoning", "text": "hmm"}], 1))
        reaction = wait_for(lambda: fake_feishu.reactions.get("om_in"))[0]
        assert reaction["emoji"] == "Typing" and not reaction["deleted"]
        relay.dispatch(_completed(sid, turn_id, seq, "done"))
        wait_for(lambda: reaction["deleted"])
        assert len(fake_feishu.reactions["om_in"]) == 1
        assert fake_feishu.sent == []  # no live card without live_updates; the answer comes by the outbox
    finally:
        relay.stop()


def test_a_turn_is_relayed_by_one_process_only(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt()
    fake_feishu.add_message("om_one", "oc_o", "text", {"text": "hi"})
    sid, seq = _turn_input(rt, "oc_o", "om_one")
    relays = [LiveRelay(rt, min_interval=0), LiveRelay(rt, min_interval=0)]
    try:
        turn_id = uuid.uuid4().hex
        for relay in relays:
            relay.dispatch(_updated(sid, turn_id, seq, [{"type": "text", "text": "a"}], 1))
        wait_for(lambda: fake_feishu.reactions.get("om_one"))
        assert rt.redis.get(claim_key(turn_id))
        time.sleep(0.3)
        assert len(fake_feishu.reactions["om_one"]) == 1
        assert sorted(r.calls for r in relays)[0] == 0
    finally:
        for relay in relays:
            relay.stop()


def test_web_sessions_are_not_relayed(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt()
    relay = LiveRelay(rt, min_interval=0)
    try:
        relay.dispatch(_updated("web:c1:d1", "t-web", 1, [{"type": "text", "text": "a"}], 1))
        relay.dispatch("not json")
        assert relay.calls == 0 and rt.redis.get(claim_key("t-web")) is None
    finally:
        relay.stop()


def test_streaming_card_is_finalised_with_the_answer_and_no_second_message(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt(live_updates=True, max_message_chars=500)
    fake_feishu.rate_limit_qps = None
    adapter = rt.channels.adapter("feishu")
    fake_feishu.add_message("om_q", "oc_s", "text", {"text": "question"})
    sid, seq = _turn_input(rt, "oc_s", "om_q")
    relay = LiveRelay(rt, min_interval=0)
    turn_id = uuid.uuid4().hex
    try:
        relay.dispatch(_updated(sid, turn_id, seq, [{"type": "reasoning", "text": "SECRET-THOUGHT"},
                                                   {"type": "tool", "name": "web_search", "status": "running"}], 1))
        time.sleep(0.2)
        assert fake_feishu.cards == {}  # no card before there is answer text
        blocks = [{"type": "reasoning", "text": "SECRET-THOUGHT"}, {"type": "tool", "name": "web_search",
                                                                    "status": "done"},
                  {"type": "text", "text": "Partial ans"}]
        relay.dispatch(_updated(sid, turn_id, seq, blocks, 2))
        card_id = wait_for(lambda: next(iter(fake_feishu.cards), None))
        # the card's record, not the "pending" placeholder set before the card is made (the client decodes
        # replies: comparing with b"pending" let the test go on while the card was still being made)
        wait_for(lambda: rt.redis.get(card_key(turn_id)) not in (None, "pending"))
        time.sleep(0.25)  # past the per-card interval
        relay.dispatch(_updated(sid, turn_id, seq, blocks[:2] + [{"type": "text", "text": "Partial answer, more"}], 3))
        wait_for(lambda: fake_feishu.cards[card_id]["texts"])
        relay.dispatch(_completed(sid, turn_id, seq, "x"))
        wait_for(lambda: fake_feishu.reactions["om_q"][0]["deleted"])
    finally:
        relay.stop()
    card = fake_feishu.cards[card_id]
    shown = json.dumps(card["card"]) + " ".join(card["texts"])
    assert "SECRET-THOUGHT" not in shown and "web_search" in shown
    final = "## Answer\n\n" + "word " * 150  # 761 chars, one long line: several parts at 500
    d = delivery("oc_s", final, reply_to="om_q", turn_id=turn_id, session_id=sid)
    result = adapter.deliver(d)
    assert card["closed"] and card["texts"][-1] == cards.split_markdown(final, 500)[0]
    parts = cards.split_markdown(final, 500)
    assert len(parts) > 1 and all(p.endswith(" ") for p in parts[:-1])  # long lines are cut between words
    sent = fake_feishu.messages_for("oc_s")
    assert [m["kind"] for m in sent] == ["reply"] * len(parts)  # the card, then the other parts
    assert sent[0]["content"] == cards.card_message(card_id) and sent[0]["reply_to"] == "om_q"
    assert result["message_ids"] == [m["message_id"] for m in sent]
    assert "".join(cards.split_markdown(final, 500)) == final
    adapter.deliver(d)  # a retried delivery: nothing new
    assert len(fake_feishu.messages_for("oc_s")) == len(parts)


def test_progress_right_after_the_card_is_made_still_reaches_the_card(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    # a tool starts right after the first text made the card, then runs long: nothing changes while it runs,
    # so a snapshot skipped for coming within the card's interval would leave the card without the tool's mark
    rt = make_rt(live_updates=True)
    fake_feishu.rate_limit_qps = None
    fake_feishu.add_message("om_t", "oc_t", "text", {"text": "question"})
    sid, seq = _turn_input(rt, "oc_t", "om_t")
    relay = LiveRelay(rt, min_interval=0)
    turn_id = uuid.uuid4().hex
    try:
        first = [{"type": "text", "text": "Let me look that up."}]
        relay.dispatch(_updated(sid, turn_id, seq, first, 1))
        card_id = wait_for(lambda: next(iter(fake_feishu.cards), None))
        relay.dispatch(_updated(sid, turn_id, seq, first + [{"type": "tool", "name": "slow_lookup",
                                                            "status": "running"}], 2))
        texts = wait_for(lambda: fake_feishu.cards[card_id]["texts"], timeout=5)
        assert "slow_lookup" in texts[-1] and "Let me look that up." in texts[-1]
        relay.dispatch(_completed(sid, turn_id, seq, "", status="failed"))
        wait_for(lambda: fake_feishu.cards[card_id]["closed"])
    finally:
        relay.stop()


def test_a_turn_waiting_for_its_next_update_holds_no_relay_thread(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    # one relay thread, a long interval: turn A's second update waits out the interval, and meanwhile turn B's
    # first update is handled (the thread used to sleep through A's interval, and B's card came after A's update)
    rt = make_rt(live_updates=True)
    fake_feishu.rate_limit_qps = None
    for n in ("a", "b"):
        fake_feishu.add_message(f"om_{n}", f"oc_{n}", "text", {"text": "question"})
    (sid_a, seq_a), (sid_b, seq_b) = _turn_input(rt, "oc_a", "om_a"), _turn_input(rt, "oc_b", "om_b")
    relay = LiveRelay(rt, workers=1, min_interval=3.0)
    turn_a, turn_b = uuid.uuid4().hex, uuid.uuid4().hex
    try:
        relay.dispatch(_updated(sid_a, turn_a, seq_a, [{"type": "text", "text": "A first"}], 1))
        card_a = wait_for(lambda: next(iter(fake_feishu.cards), None))
        relay.dispatch(_updated(sid_a, turn_a, seq_a, [{"type": "text", "text": "A second"}], 2))
        relay.dispatch(_updated(sid_b, turn_b, seq_b, [{"type": "text", "text": "B first"}], 1))
        card_b = wait_for(lambda: [c for c in fake_feishu.cards if c != card_a])[0]
        assert fake_feishu.cards[card_a]["texts"] == []  # A's update still waits for its time
        assert wait_for(lambda: fake_feishu.cards[card_a]["texts"])[-1] == "A second"
        for sid, turn_id, seq in ((sid_a, turn_a, seq_a), (sid_b, turn_b, seq_b)):
            relay.dispatch(_completed(sid, turn_id, seq, "", status="failed"))
        wait_for(lambda: fake_feishu.cards[card_a]["closed"] and fake_feishu.cards[card_b]["closed"])
    finally:
        relay.stop()


def test_a_turn_that_ends_while_waiting_for_its_interval_is_closed_without_waiting(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    # an interval far longer than the test: the end of the turn must not wait for it (the relay's thread used to
    # sleep through it first)
    rt = make_rt(live_updates=True)
    fake_feishu.rate_limit_qps = None
    fake_feishu.add_message("om_e", "oc_e", "text", {"text": "question"})
    sid, seq = _turn_input(rt, "oc_e", "om_e")
    relay = LiveRelay(rt, workers=1, min_interval=120.0)
    turn_id = uuid.uuid4().hex
    try:
        relay.dispatch(_updated(sid, turn_id, seq, [{"type": "text", "text": "first"}], 1))
        card_id = wait_for(lambda: next(iter(fake_feishu.cards), None))
        relay.dispatch(_updated(sid, turn_id, seq, [{"type": "text", "text": "second"}], 2))
        time.sleep(0.5)  # the relay takes the second update and starts waiting for its time
        relay.dispatch(_completed(sid, turn_id, seq, "", status="failed"))
        wait_for(lambda: fake_feishu.cards[card_id]["closed"], timeout=20)
        assert fake_feishu.cards[card_id]["texts"] == []  # the pending update is dropped: the turn is over
    finally:
        relay.stop()


def test_without_a_card_the_answer_is_a_normal_reply_and_no_card_starts_later(make_rt, fake_feishu) -> None:  # type: ignore[no-untyped-def]
    rt = make_rt(live_updates=True)
    adapter = rt.channels.adapter("feishu")
    fake_feishu.add_message("om_q", "oc_n", "text", {"text": "question"})
    sid, seq = _turn_input(rt, "oc_n", "om_q")
    turn_id = uuid.uuid4().hex
    adapter.deliver(delivery("oc_n", "quick answer", reply_to="om_q", turn_id=turn_id))
    relay = LiveRelay(rt, min_interval=0)
    try:  # a late snapshot of the same turn must not open a card after the answer
        relay.dispatch(_updated(sid, turn_id, seq, [{"type": "text", "text": "quick"}], 1))
        wait_for(lambda: fake_feishu.reactions.get("om_q"))
        time.sleep(0.2)
    finally:
        relay.stop()
    assert fake_feishu.cards == {} and len(fake_feishu.sent) == 1


# --- a real turn, in process: Feishu input -> turn (fake LLM) -> relay -> outbox -> fake Feishu ----


def test_a_real_turn_streams_into_one_card_that_ends_in_the_answer(tmp_path: Path, llm, redis_url: str,  # type: ignore[no-untyped-def]
                                                                   fake_feishu, feishu_config: dict,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from picobot.channels.delivery import deliver_lane
    from picobot.gateway.inbound import InboundMessage
    from picobot.gateway.intake import Gateway
    from picobot.runtime.turn_runner import drain_session
    from tests.conftest import add_rule
    from tests.stack import base_config

    answer = "The **answer** is here: " + " ".join(f"w{i}" for i in range(60))
    add_rule(llm, "tell me", {"content": answer, "chunk_delay_ms": 15})
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-feishu")
    data = base_config(llm.url, 1)
    data["channels"] = {"feishu": {**feishu_config, "live_updates": True}}
    config = Config.model_validate({**data, "home": str(tmp_path / "home")})
    rt = build_runtime(config, _NoQueue(), migrate=True)  # type: ignore[arg-type]
    fake_feishu.rate_limit_qps = None
    fake_feishu.add_message("om_ask", "oc_e2e", "text", {"text": "tell me"})
    relay = LiveRelay(rt, min_interval=0.1).start()
    try:
        time.sleep(0.3)  # subscribed
        reply = Gateway(rt).submit(InboundMessage("feishu", "oc_e2e", "ou_u1", "tell me", platform_message_id="om_ask",
                                                  metadata={"reply_to": "om_ask", "chat_type": "p2p"}))
        assert reply.kind == "accepted", reply
        assert drain_session(rt, reply.session_id) == 1
        wait_for(lambda: (fake_feishu.reactions.get("om_ask") or [{}])[0].get("deleted"))
        deliver_lane(rt, "feishu", "oc_e2e")
    finally:
        relay.stop()
        rt.close()
    sent = fake_feishu.messages_for("oc_e2e")
    assert len(sent) == 1 and sent[0]["reply_to"] == "om_ask" and sent[0]["msg_type"] == "interactive"
    card = fake_feishu.cards[sent[0]["content"]["data"]["card_id"]]
    assert card["closed"] and card["texts"][-1] == answer
    assert len(card["texts"]) >= 2  # progress streamed while the model was writing, then the answer
    assert fake_feishu.text_of(sent[0]) == answer
