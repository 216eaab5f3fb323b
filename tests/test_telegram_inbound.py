"""Telegram intake in process: updates -> the event inbox -> InboundMessage, the webhook's checks, hostile updates.

A real runtime (temp SQLite, a private Redis) and the fake Bot API for getMe, getFile and downloads.
What was recorded is read back with SQL; events are processed with the real inbox code.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.channels import events
from picobot.channels.telegram import intake
from picobot.channels.telegram.api import TelegramError
from picobot.channels.telegram.config import TelegramConfig
from picobot.channels.telegram.webhook import MAX_BODY_BYTES, handle
from picobot.errors import ConfigError
from scripts.fake_telegram import FakeTelegram
from tests.telegram_fake import fake_tg, make_rt  # noqa: F401 (fixtures)

FRIEND, STRANGER = 7001, 7002
SECRET = "hook_secret-123"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def rows(rt: Any, table: str) -> list[Any]:
    with rt.db.connect() as conn:
        return list(conn.execute(sa.text(f"SELECT * FROM {table}")))


def normalize(rt: Any, update: dict) -> list[Any]:
    return rt.channels.adapter("telegram").normalize({"update_id": update["update_id"], "message": update["message"]})


def only_content(rt: Any, update: dict) -> Any:
    [msg] = normalize(rt, update)
    return msg.content


# --- what a message becomes ------------------------------------------------------------------------


def test_a_private_text_message(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    update = fake_tg.message(chat_id=FRIEND, text="hello bot", queue=False)
    [msg] = normalize(rt, update)
    assert (msg.channel, msg.chat_id, msg.sender_id, msg.content) == ("telegram", str(FRIEND), str(FRIEND), "hello bot")
    mid = update["message"]["message_id"]
    assert msg.platform_message_id == f"{FRIEND}_{mid}" and msg.metadata == {"reply_to": f"{FRIEND}_{mid}",
                                                                             "chat_type": "p2p"}


def test_commands_also_addressed_to_this_bot(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    assert only_content(rt, fake_tg.message(chat_id=FRIEND, text="/new", queue=False)) == "/new"
    assert only_content(rt, fake_tg.message(chat_id=FRIEND, text="/rename@PicoBot_Fake_Bot My title",
                                            queue=False)) == "/rename My title"
    assert normalize(rt, fake_tg.message(chat_id=FRIEND, text="/new@another_bot", queue=False)) == []
    assert only_content(rt, fake_tg.message(chat_id=FRIEND, text="/start", queue=False)) == "/help"


def test_groups_need_a_mention_a_command_or_a_reply_to_the_bot(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    group = -100200

    def say(text: str, **kw: Any) -> list[Any]:
        return normalize(rt, fake_tg.message(chat_id=group, from_id=FRIEND, chat_type="supergroup", text=text,
                                             queue=False, **kw))

    assert say("just chatting") == []
    [mention] = say("@picobot_fake_bot what time is it")
    assert mention.content == "what time is it" and mention.metadata["chat_type"] == "group"
    assert [m.content for m in say("/stop@picobot_fake_bot")] == ["/stop"]
    bot_message = {"message_id": 1, "from": {"id": fake_tg.bot().id, "is_bot": True}, "text": "earlier answer",
                   "chat": {"id": group, "type": "supergroup"}, "date": 1}
    [reply] = say("and then?", reply_to_message=bot_message)
    assert reply.content == "Replying to:\n> earlier answer\n\nand then?"
    rt_open = make_rt(group_policy="open")
    anything = fake_tg.message(chat_id=group, from_id=FRIEND, chat_type="group", text="anything", queue=False)
    assert [m.content for m in normalize(rt_open, anything)] == ["anything"]


def test_a_reply_quotes_its_parent_or_the_users_own_quote(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    parent = {"message_id": 3, "text": "line one\nline two", "chat": {"id": FRIEND, "type": "private"}, "date": 1}
    content = only_content(rt, fake_tg.message(chat_id=FRIEND, text="why?", reply_to_message=parent, queue=False))
    assert content == "Replying to:\n> line one\n> line two\n\nwhy?"
    content = only_content(rt, fake_tg.message(chat_id=FRIEND, text="this", reply_to_message=parent,
                                               quote={"text": "two", "position": 13}, queue=False))
    assert content == "Replying to:\n> two\n\nthis"
    # a quoted message with nothing of the user's own (no text, no media) is nothing to answer
    assert normalize(rt, fake_tg.message(chat_id=FRIEND, text=None, reply_to_message=parent, queue=False)) == []
    assert normalize(rt, fake_tg.message(chat_id=FRIEND, text="  ", reply_to_message={"odd": {}}, queue=False)) == []


def test_a_photo_becomes_an_image_block_and_is_saved(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    small, big = fake_tg.add_file(b"\xff\xd8\xff tiny", "photos/s.jpg"), fake_tg.add_file(PNG, "photos/b.png")
    sizes = [{"file_id": small, "file_unique_id": "s1", "width": 90, "height": 60, "file_size": 10},
             {"file_id": big, "file_unique_id": "b1", "width": 1280, "height": 960, "file_size": len(PNG)}]
    content = only_content(rt, fake_tg.message(chat_id=FRIEND, text=None, caption="look", photo=sizes, queue=False))
    assert content[0] == {"type": "text", "text": "look"}
    assert content[1]["type"] == "image_url" and content[1]["url"].startswith("data:image/png;base64,")
    saved = list((rt.config.home / "media" / "telegram").iterdir())
    assert [p.read_bytes() for p in saved] == [PNG]


def test_a_document_is_saved_and_named_and_a_voice_note_becomes_audio(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    file_id = fake_tg.add_file(b"a,b\n1,2\n", "documents/data.csv")
    doc = {"file_id": file_id, "file_unique_id": "d1", "file_name": "../../etc/data.csv", "file_size": 8}
    content = only_content(rt, fake_tg.message(chat_id=FRIEND, text=None, document=doc, queue=False))
    assert content.startswith("[file ../../etc/data.csv (8 bytes) saved to ")
    path = content.split(" saved to ", 1)[1].rstrip("]")
    assert path.startswith(str(rt.config.home / "media" / "telegram")) and open(path, "rb").read() == b"a,b\n1,2\n"
    voice = {"file_id": fake_tg.add_file(b"OggS voice", "voice/v.oga"), "file_unique_id": "v1", "duration": 4,
             "mime_type": "audio/ogg"}
    [block] = only_content(rt, fake_tg.message(chat_id=FRIEND, text=None, voice=voice, queue=False))
    assert block == {"type": "audio", "url": "data:audio/ogg;base64,T2dnUyB2b2ljZQ=="}  # heard by the worker
    gone = {"file_id": "v", "file_unique_id": "v1", "duration": 4, "mime_type": "audio/ogg"}
    note = only_content(rt, fake_tg.message(chat_id=FRIEND, text=None, voice=gone, queue=False))
    assert "voice message that could not be downloaded" in note


def test_a_file_telegram_refuses_is_a_note_a_transient_failure_raises(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    doc = {"file_id": "unknown-id", "file_unique_id": "x", "file_name": "gone.txt"}
    assert "could not be downloaded" in only_content(rt, fake_tg.message(chat_id=FRIEND, text=None, document=doc,
                                                                         queue=False))
    fake_tg.fail(502, method="getFile")
    with pytest.raises(TelegramError) as caught:
        normalize(rt, fake_tg.message(chat_id=FRIEND, text=None, document=doc, queue=False))
    assert caught.value.permanent is False  # the inbox keeps the event pending: processed again later


# --- intake: what is recorded --------------------------------------------------------------------


def test_a_message_is_recorded_once_however_often_it_comes(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt()
    update = fake_tg.message(chat_id=FRIEND, text="once", queue=False)
    outcomes = [intake.accept(rt, "telegram", intake.clean(update)) for _ in range(5)]
    again = dict(update, update_id=update["update_id"] + 999)  # the same message under another update id
    outcomes.append(intake.accept(rt, "telegram", again))
    assert outcomes == ["recorded"] + ["duplicate"] * 5
    assert len(rows(rt, "channel_events")) == 1 and len(rt.queue.events) == 1
    assert events.process(rt, rt.queue.events[0]) == "done"
    assert events.process(rt, rt.queue.events[0]) == "done"
    assert len(rows(rt, "inbound")) == 1


def test_edits_other_update_types_and_strangers_store_nothing(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = make_rt(allow_from=[str(FRIEND)])
    sent = fake_tg.message(chat_id=FRIEND, text="original", queue=False)
    assert intake.accept(rt, "telegram", {"update_id": 1, "edited_message": sent["message"]}) == "ignored"
    assert intake.accept(rt, "telegram", {"update_id": 2, "callback_query": {"id": "x"}}) == "ignored"
    stranger = fake_tg.message(chat_id=STRANGER, text="let me in", queue=False)
    assert intake.accept(rt, "telegram", stranger) == "ignored"
    giant = fake_tg.message(chat_id=FRIEND, text="x" * 4097, queue=False)  # Telegram never sends more than 4096
    assert intake.accept(rt, "telegram", giant) == "ignored"
    astral = fake_tg.message(chat_id=FRIEND, text="😀" * 2049, queue=False)  # 4098 UTF-16 units
    assert intake.accept(rt, "telegram", astral) == "ignored"
    assert intake.accept(rt, "telegram", fake_tg.message(chat_id=FRIEND, text="😀" * 2048, queue=False)) == "recorded"
    bot = fake_tg.message(chat_id=FRIEND, text="from a bot", queue=False)
    bot["message"]["from"]["is_bot"] = True
    assert intake.accept(rt, "telegram", bot) == "ignored"
    assert [r.event_key for r in rows(rt, "channel_events")] == [f"m:{FRIEND}:{sent['message']['message_id'] + 3}"]
    assert rows(rt, "inbound") == []


# --- the webhook ------------------------------------------------------------------------------


def post(rt: Any, body: bytes | dict, secret: str | None = SECRET) -> tuple[int, dict]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    cfg = TelegramConfig.from_channel(rt.config.channels["telegram"])
    return handle(rt, cfg, headers, raw)


def hook_rt(make_rt: Any) -> Any:
    return make_rt(mode="webhook", webhook_secret=SECRET, webhook_url="https://bot.example/telegram/telegram")


def test_the_webhook_checks_the_secret_size_and_json(fake_tg: FakeTelegram, make_rt: Any,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    rt = hook_rt(make_rt)
    update = fake_tg.message(chat_id=FRIEND, text="via webhook", queue=False)
    caplog.set_level(logging.INFO)
    assert post(rt, update, secret=None)[0] == 401
    assert post(rt, update, secret=SECRET + "x")[0] == 401
    assert post(rt, update, secret="ü")[0] == 401
    assert post(rt, b"x" * (MAX_BODY_BYTES + 1))[0] == 413
    for bad in (b"not json", b"[1, 2]", b'{"update_id": NaN}', b"{" * 5000 + b"}" * 5000, b'{"message": {}}',
                b'{"update_id": true}', b'{"update_id": "12"}'):
        status, answer = post(rt, bad)
        assert status == 400 and answer["ok"] is False, bad[:30]
    assert rows(rt, "channel_events") == []
    assert post(rt, {"update_id": 5, "edited_message": update["message"]}) == (200, {"ok": True,
                                                                                     "description": "ignored"})
    for _ in range(5):
        assert post(rt, update)[0] == 200
    assert len(rows(rt, "channel_events")) == 1
    assert SECRET not in caplog.text and "via webhook" not in caplog.text


def test_the_token_never_reaches_sql(fake_tg: FakeTelegram, make_rt: Any) -> None:
    rt = hook_rt(make_rt)
    post(rt, fake_tg.message(chat_id=FRIEND, text="hi", queue=False))
    dumped = json.dumps([list(r) for r in rows(rt, "channel_events")], default=str)
    assert fake_tg.token not in dumped and SECRET not in dumped


# --- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize("section, where", [
    ({"token": ""}, "channels.tg.token"),
    ({"token": "not-a-token"}, "channels.tg.token"),
    ({"mode": "webhook"}, "channels.tg.webhook_secret"),
    ({"mode": "webhook", "webhook_secret": "s p a c e"}, "channels.tg.webhook_secret"),
    ({"mode": "webhook", "webhook_secret": "ok"}, "channels.tg.webhook_url"),
    ({"mode": "push"}, "channels.tg.mode"),
    ({"group_policy": "all"}, "channels.tg.group_policy"),
    ({"tokne": "x"}, "channels.tg.tokne"),
    ({"poll_timeout_secs": True}, "channels.tg.poll_timeout_secs"),
])
def test_bad_config_names_its_key(section: dict, where: str) -> None:
    from picobot.channels.telegram.config import check_channel

    data = {"type": "telegram", "enabled": True, "token": "123:abc", **section}
    with pytest.raises(ConfigError) as caught:
        check_channel("tg", data)
    assert caught.value.key_path == where


def test_the_channels_plugin_reports_telegram_config_problems(make_rt: Any) -> None:
    rt = make_rt()
    from picobot.config import Config

    bad = Config.model_validate({"channels": {"tg": {"type": "telegram", "enabled": True, "token": "nope"}}})
    problems = [p for found in rt.plugins.call("picobot_config_check", config=bad) for p in (found or [])]
    assert [where for where, _ in problems] == ["channels.tg.token"]


# --- hostile updates -----------------------------------------------------------------------------

_odd_text = st.one_of(st.text(max_size=40), st.just(""), st.just("   "), st.just("\ud800\udfff\ud800"),
                      st.just("x" * 5000), st.just("😀" * 2049), st.just("\x00\u202e/new"), st.just("/"),
                      st.just("/new@"), st.just("@picobot_fake_bot"), st.integers(), st.none(), st.lists(st.text()))
_id = st.one_of(st.integers(min_value=-2**63, max_value=2**63), st.text(max_size=5), st.none(), st.booleans(),
                st.floats(allow_nan=False))


def _deep(n: int) -> Any:
    value: Any = "bottom"
    for _ in range(n):
        value = {"x": value}
    return value


_junk = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10)),
                     lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner,
                                                                                            max_size=3)), max_leaves=10)
_message = st.fixed_dictionaries(
    {"message_id": _id, "chat": st.one_of(st.fixed_dictionaries({"id": _id, "type": st.sampled_from(
        ["private", "group", "supergroup", "channel", "?"])}), _junk),
     "from": st.one_of(st.fixed_dictionaries({"id": _id, "is_bot": st.one_of(st.booleans(), _junk)}), _junk)},
    optional={"text": _odd_text, "caption": _odd_text, "entities": _junk, "photo": _junk, "document": _junk,
              "voice": _junk, "reply_to_message": st.one_of(_junk, st.just(_deep(40))), "quote": _junk,
              "sticker": _junk, "x_unknown": _junk})
_plausible = st.fixed_dictionaries(  # well-formed ids, odd everything else: these get recorded
    {"update_id": st.integers(0, 2**31), "message": st.fixed_dictionaries(
        {"message_id": st.integers(1, 2**31), "date": st.integers(0, 2**31),
         "chat": st.fixed_dictionaries({"id": st.integers(1, 2**40), "type": st.just("private")}),
         "from": st.fixed_dictionaries({"id": st.integers(1, 2**40), "is_bot": st.just(False)})},
        optional={"text": _odd_text, "caption": _odd_text, "entities": _junk, "photo": _junk, "document": _junk,
                  "voice": _junk, "sticker": _junk, "reply_to_message": _junk, "quote": _junk})})
_update = st.one_of(
    st.fixed_dictionaries({"update_id": _id}, optional={"message": st.one_of(_message, _junk),
                                                         "edited_message": _message, "poll": _junk}),
    _plausible, _junk)


def garbage(update: Any) -> bool:
    """Not a message update Telegram could send (so it must store nothing)."""
    if intake.update_id(update) is None:
        return True
    try:
        message = intake.clean(update.get("message"))
    except intake.Malformed:
        return True
    return intake.message_problem(message) is not None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(update=_update)
def test_hostile_updates_crash_nothing_and_garbage_gets_no_answer(fake_tg: FakeTelegram, make_rt: Any,
                                                                  update: Any) -> None:
    rt = getattr(fake_tg, "_hostile_rt", None) or hook_rt(make_rt)
    fake_tg._hostile_rt = rt  # type: ignore[attr-defined]  (one runtime for all examples)
    before = {e.id for e in rows(rt, "channel_events")}
    try:
        raw = json.dumps(update).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError):
        return
    status, answer = post(rt, raw)
    assert status in (200, 400) and isinstance(answer, dict)
    new = [e for e in rows(rt, "channel_events") if e.id not in before]
    if garbage(update):
        assert new == []  # nothing stored, so no turn and no reply
        return
    inputs_before = len(rows(rt, "inbound"))
    for event in new:  # whatever was recorded is processed without an exception escaping
        assert events.process(rt, event.id) in ("done", "ignored", "pending", "failed")
    text = update["message"].get("text")
    answerable = isinstance(text, str) and text.strip() or any(
        k in update["message"] for k in ("photo", "document", "voice", "sticker", "caption"))
    if not answerable:
        assert len(rows(rt, "inbound")) == inputs_before  # nothing to answer: no turn
