"""im.message.receive_v1 events (Feishu's real shapes) -> InboundMessages.

Parsing needs no server: text, post, mentions, group policy, commands, bad content. Downloads
and reply context go through the real FeishuApi to the fake Feishu server on loopback.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from picobot.channels.feishu.config import FeishuConfig
from picobot.channels.feishu.inbound import to_inbound

BOT = "ou_bot_1"


def cfg(**kw: Any) -> FeishuConfig:
    return FeishuConfig.model_validate({"app_id": "cli_test", "app_secret": "secret_test", **kw})


def event(message_type: str = "text", content: Any = None, *, chat_type: str = "p2p", mentions: list | None = None,
          message_id: str = "om_1", parent_id: str | None = None, text: str = "hello") -> dict[str, Any]:
    if content is None:
        content = {"text": text}
    message: dict[str, Any] = {
        "message_id": message_id, "root_id": parent_id or "", "parent_id": parent_id or "",
        "create_time": "1609073151345", "chat_id": "oc_chat", "chat_type": chat_type, "message_type": message_type,
        "content": content if isinstance(content, str) else json.dumps(content, ensure_ascii=False),
    }
    if mentions is not None:
        message["mentions"] = mentions
    return {"schema": "2.0",
            "header": {"event_id": "ev1", "event_type": "im.message.receive_v1", "create_time": "1", "app_id": "cli_test"},
            "event": {"sender": {"sender_id": {"open_id": "ou_user", "union_id": "on_u", "user_id": "u"},
                                 "sender_type": "user", "tenant_key": "t"},
                      "message": message}}


def mention(key: str, open_id: str, name: str) -> dict[str, Any]:
    return {"key": key, "id": {"open_id": open_id, "union_id": "on_x", "user_id": "x"}, "name": name, "tenant_key": "t"}


def one(ev: dict[str, Any], config: FeishuConfig | None = None, api: Any = None, media: Path = Path("/nonexistent")) -> Any:
    msgs = to_inbound(ev, config or cfg(), api, BOT, media)
    assert len(msgs) == 1, msgs
    return msgs[0]


def test_p2p_text_maps_ids_and_metadata() -> None:
    msg = one(event(text="hello there"))
    assert (msg.channel, msg.chat_id, msg.sender_id, msg.platform_message_id) == ("feishu", "oc_chat", "ou_user", "om_1")
    assert msg.content == "hello there"
    assert msg.metadata == {"reply_to": "om_1", "chat_type": "p2p"}


def test_group_messages_follow_group_policy_and_mentions_resolve() -> None:
    mentions = [mention("@_user_1", BOT, "PicoBot"), mention("@_user_2", "ou_tom", "Tom"),
                mention("@_user_10", "ou_ann", "Ann")]
    grp = event(text="@_user_1 ask @_user_2 and @_user_10 about it", chat_type="group", mentions=mentions)
    msg = one(grp)
    assert msg.content == "ask @Tom and @Ann about it"
    assert msg.metadata["chat_type"] == "group"
    not_for_bot = event(text="@_user_2 hi", chat_type="group", mentions=mentions[1:2])
    assert to_inbound(not_for_bot, cfg(), None, BOT, Path("/x")) == []
    assert to_inbound(event(text="hi all", chat_type="group"), cfg(), None, BOT, Path("/x")) == []
    assert one(not_for_bot, cfg(group_policy="all")).content == "@Tom hi"
    assert to_inbound(grp, cfg(group_policy="disabled"), None, BOT, Path("/x")) == []
    assert one(event(text="@_user_1 hi", mentions=mentions[:1])).content == "hi"  # p2p: always, mention stripped


def test_slash_commands_pass_through_as_plain_text() -> None:
    msg = one(event(text="@_user_1  /new  project x", chat_type="group", mentions=[mention("@_user_1", BOT, "Bot")]))
    assert msg.content == "/new  project x"
    assert one(event(text="/stop")).content == "/stop"


def test_post_becomes_markdown() -> None:
    post = {"title": "Weekly", "content": [
        [{"tag": "text", "text": "Hello "}, {"tag": "text", "text": "bold", "style": ["bold"]},
         {"tag": "text", "text": " and "}, {"tag": "text", "text": "both", "style": ["bold", "italic"]},
         {"tag": "text", "text": " "}, {"tag": "text", "text": "gone", "style": ["lineThrough"]}],
        [{"tag": "a", "text": "the docs", "href": "https://example.com/d"}, {"tag": "text", "text": " by "},
         {"tag": "at", "user_id": "@_user_2", "user_name": "Tom"}, {"tag": "at", "user_id": "@_user_1"}],
        [{"tag": "code_block", "language": "PYTHON", "text": "print(1)\n"}],
        [{"tag": "md", "text": "- item"}, {"tag": "emotion", "emoji_type": "SMILE"}],
    ]}
    msg = one(event("post", post, mentions=[mention("@_user_1", BOT, "Bot"), mention("@_user_2", "ou_tom", "Tom")]))
    assert msg.content == ("# Weekly\n\nHello **bold** and ***both*** ~~gone~~\n[the docs](https://example.com/d) by @Tom\n"
                           "\n```python\nprint(1)\n```\n\n- item:SMILE:")
    wrapped = one(event("post", {"zh_cn": {"title": "", "content": [[{"tag": "text", "text": "x"}]]}}))
    assert wrapped.content == "x"


@pytest.mark.parametrize("message_type,content,expected", [
    ("audio", {"no_key": 1}, "[unsupported message type audio]"),
    ("sticker", {"file_key": "f1"}, "[unsupported message type sticker]"),
    ("share_chat", {"chat_id": "oc_2"}, "[unsupported message type share_chat]"),
    ("image", {"no_key": 1}, "[unsupported message type image]"),
])
def test_other_types_get_a_short_note(message_type: str, content: dict, expected: str) -> None:
    assert one(event(message_type, content)).content == expected


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", "", '"text"', "null", "{\"text\": NaN"])
def test_malformed_content_is_ignored_with_one_log_line(content: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="picobot.channels.feishu.inbound")
    assert to_inbound(event("text", content), cfg(), None, BOT, Path("/x")) == []
    assert len(caplog.records) == 1 and "om_1" in caplog.records[0].getMessage()


@pytest.mark.parametrize("mutate", [
    lambda e: e["event"].pop("message"),
    lambda e: e["event"]["message"].pop("chat_id"),
    lambda e: e["event"]["sender"].update(sender_id=None),
    lambda e: e.update(event="nope"),
    lambda e: e["event"]["message"].update(mentions="garbage", chat_type="group"),
    lambda e: e["event"]["message"].update(content=json.dumps({"text": 5})),
])
def test_malformed_events_never_crash(mutate: Any) -> None:
    ev = event()
    mutate(ev)
    assert isinstance(to_inbound(ev, cfg(), None, BOT, Path("/x")), list)


def test_empty_text_is_ignored_and_bot_messages_too() -> None:
    assert to_inbound(event(text="   "), cfg(), None, BOT, Path("/x")) == []
    ev = event()
    ev["event"]["sender"]["sender_type"] = "app"
    assert to_inbound(ev, cfg(), None, BOT, Path("/x")) == []


# --- through the fake Feishu server -------------------------------------------------------

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


@pytest.fixture
def api(fake_feishu: Any) -> Any:
    from picobot.channels.feishu.api import FeishuApi

    client = FeishuApi(fake_feishu.app_id, fake_feishu.app_secret, fake_feishu.base_url)
    yield client
    client.close()


def test_image_is_downloaded_saved_and_sent_as_an_image_block(fake_feishu: Any, api: Any, tmp_path: Path) -> None:
    fake_feishu.add_resource("om_img", "img_v2_key", PNG, "image/png")
    msg = one(event("image", {"image_key": "img_v2_key"}, message_id="om_img"), api=api, media=tmp_path)
    assert msg.content == [{"type": "image_url", "url": "data:image/png;base64," + base64.b64encode(PNG).decode()}]
    saved = list(tmp_path.iterdir())
    assert [p.read_bytes() for p in saved] == [PNG] and saved[0].name.startswith("om_img-")


def test_file_is_saved_and_named_in_a_note(fake_feishu: Any, api: Any, tmp_path: Path) -> None:
    fake_feishu.add_resource("om_f", "file_key_1", b"col\n1\n", "application/octet-stream")
    msg = one(event("file", {"file_key": "file_key_1", "file_name": "../../etc/report.csv"}, message_id="om_f"),
              api=api, media=tmp_path / "media")
    path = tmp_path / "media" / "om_f-report.csv"
    assert path.read_bytes() == b"col\n1\n"
    assert msg.content == f"[file ../../etc/report.csv (6 bytes) saved to {path}]"


def test_too_large_or_missing_resources_become_notes(fake_feishu: Any, api: Any, tmp_path: Path) -> None:
    fake_feishu.add_resource("om_big", "big", b"x" * 2048, "application/octet-stream")
    big = one(event("file", {"file_key": "big", "file_name": "b.bin"}, message_id="om_big"),
              config=cfg(max_download_bytes=1024), api=api, media=tmp_path)
    assert big.content == "[file b.bin could not be downloaded: too large]"
    gone = one(event("image", {"image_key": "nope"}, message_id="om_gone"), api=api, media=tmp_path)
    assert gone.content.startswith("[image nope could not be downloaded")
    assert list(tmp_path.iterdir()) == []


def test_a_reply_gets_the_quoted_parent_as_context(fake_feishu: Any, api: Any) -> None:
    fake_feishu.add_message("om_parent", "oc_chat", "text", {"text": "line one\nline two " + "z" * 100})
    msg = one(event(text="what about this?", parent_id="om_parent"), config=cfg(reply_context_max_chars=30), api=api)
    assert msg.content == "Replying to:\n> line one\n> line two zzzzzzzzzzzz…\n\nwhat about this?"
    assert one(event(text="/new", parent_id="om_parent"), api=api).content == "/new"  # commands stay commands
    assert one(event(text="and?", parent_id="om_missing"), api=api).content == "and?"
    post_parent = {"title": "T", "content": [[{"tag": "text", "text": "body"}]]}
    fake_feishu.add_message("om_post", "oc_chat", "post", post_parent)
    assert one(event(text="ok", parent_id="om_post"), api=api).content == "Replying to:\n> # T\n> \n> body\n\nok"


def test_a_transient_api_failure_raises_so_the_event_is_processed_again(fake_feishu: Any, api: Any,
                                                                       tmp_path: Path) -> None:
    from picobot.channels.feishu.api import FeishuError

    fake_feishu.add_resource("om_t", "img_t", PNG, "image/png")
    fake_feishu.add_message("om_p", "oc_chat", "text", {"text": "parent"})
    image = event("image", {"image_key": "img_t"}, message_id="om_t")
    reply = event(text="and?", parent_id="om_p", message_id="om_r")
    api.bot_info()  # the token is fetched before Feishu goes down
    fake_feishu.down(True)
    for ev in (image, reply):
        with pytest.raises(FeishuError) as caught:
            to_inbound(ev, cfg(), api, BOT, tmp_path)
        assert not caught.value.permanent
    fake_feishu.down(False)
    assert one(image, api=api, media=tmp_path).content[0]["type"] == "image_url"
    assert one(reply, api=api).content == "Replying to:\n> parent\n\nand?"
    fake_feishu.fail(status=400, code=230001, path="/open-apis/im/v1/messages/om_r2")
    fake_feishu.add_message("om_r2", "oc_chat", "text", {"text": "x"})
    assert one(event(text="so?", parent_id="om_r2", message_id="om_s"), api=api).content == "so?"  # refused: no context
