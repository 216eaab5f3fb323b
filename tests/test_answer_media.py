"""The images of an answer (a browser screenshot) reach Telegram as photos and Feishu as image messages.

In process: a real runtime with both channels (temp SQLite, a private Redis) on the fake Bot API and the
fake Feishu OpenAPI. A turn's answer is recorded by the channels plugin's `picobot_turn_committed` (the
delivery the browser's screenshot produces: an assistant answer with an `image_url` block naming a
workspace file) and the lane is delivered by the real delivery loop.
"""

from __future__ import annotations

import logging
import struct
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from picobot.app import App as Runtime, build_runtime
from picobot.channels.delivery import deliver_lane
from picobot.channels.outbound import MAX_MEDIA, answer_media, read_image
from picobot.channels.plugin import ChannelsPlugin
from picobot.config import Config
from picobot.domain.messages import ChatMessage
from picobot.plugins.types import TurnView
from picobot.storage import outbox
from picobot.storage.models import OutboxRow
from scripts.fake_feishu import FakeFeishu
from scripts.fake_telegram import FakeTelegram
from tests.feishu_fake import fake_feishu, feishu_config  # noqa: F401 (fixtures)
from tests.telegram_fake import RecordingQueue, fake_tg  # noqa: F401 (fixtures)
from tests.http_client import HTTP

TG_CHAT = "5551"
FS_CHAT = "oc_answer_media"
TEN_MB = 10 * 1024 * 1024


def png(width: int = 2, height: int = 2, pad: int = 0) -> bytes:
    """A real PNG (`pad` bytes of an ancillary chunk make it as large as a test needs)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    extra = chunk(b"tEXt", b"pad\x00" + b"x" * pad) if pad else b""
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + extra
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture
def make_rt(tmp_path: Path, redis_url: str, fake_tg: FakeTelegram, feishu_config: dict,  # noqa: F811
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Runtime]]:
    monkeypatch.setenv("REDIS_URL", redis_url)
    made: list[Runtime] = []

    def make() -> Runtime:
        home = tmp_path / f"home{len(made)}"
        config = Config.model_validate({
            "home": str(home), "tools": {"workspace": str(tmp_path / "workspace")},
            "channels": {"telegram": {"enabled": True, "token": fake_tg.token, "base_url": fake_tg.base_url},
                         "feishu": feishu_config}})
        rt = build_runtime(config, RecordingQueue(), migrate=True)  # type: ignore[arg-type]
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


def screenshot(rt: Runtime, name: str = "a.png", data: bytes | None = None) -> Path:
    """A screenshot where the browser tool saves one: <workspace>/screenshots/<name>."""
    folder = rt.config.workspace_path() / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(png() if data is None else data)
    return path


def answer(rt: Runtime, channel: str, chat_id: str, turn_id: str, text: str, *paths: str) -> int:
    """A completed turn whose final reply carries the images at `paths` (as the browser's screenshot does),
    committed through the channels plugin: the outbox row's id."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
    blocks += [{"type": "image_url", "url": "data:image/png;base64,AAAA", "path": p} for p in paths]
    turn = TurnView("s-" + turn_id, turn_id, channel, chat_id, "u1", "default", "completed", text,
                    messages=(ChatMessage("user", "show me"), ChatMessage("assistant", blocks)))
    with rt.db.begin() as conn:
        assert ChannelsPlugin().picobot_turn_committed(conn, turn, rt) is not None
    with rt.db.connect() as conn:
        [row] = [r for r in outbox.latest(conn, limit=50) if r.turn_id == turn_id]
    return int(row.id)


def row(rt: Runtime, row_id: int) -> Any:
    with rt.db.connect() as conn:
        return [r for r in outbox.latest(conn, limit=200) if r.id == row_id][0]


# ---- Telegram ----------------------------------------------------------------------------------


def test_telegram_gets_the_text_then_the_screenshot_as_a_photo(make_rt: Any, fake_tg: FakeTelegram) -> None:  # noqa: F811
    rt = make_rt()
    shot = screenshot(rt)
    row_id = answer(rt, "telegram", TG_CHAT, "t1", "Here is page B.", str(shot))
    assert row(rt, row_id).payload["media"] == [{"path": str(shot)}]
    assert deliver_lane(rt, "telegram", TG_CHAT)["sent"] == 1
    assert fake_tg.texts(TG_CHAT) == ["Here is page B."]
    [photo] = fake_tg.photos_to(TG_CHAT)
    assert photo["data"] == shot.read_bytes() and photo["content_type"] == "image/png"
    assert photo["message_id"] > fake_tg.sent_to(TG_CHAT)[0]["message_id"]  # after the text
    assert row(rt, row_id).status == outbox.SENT and row(rt, row_id).result["media"] == {"0": photo["message_id"]}
    shown = HTTP.get(f"{fake_tg.base_url}/_fake/photos", params={"chat_id": TG_CHAT}).json()["result"]
    assert [(p["message_id"], p["bytes"]) for p in shown] == [(photo["message_id"], len(photo["data"]))]


def test_telegram_a_missing_file_is_skipped_with_a_log_line_and_the_text_goes(
        make_rt: Any, fake_tg: FakeTelegram, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    rt = make_rt()
    gone = rt.config.workspace_path() / "screenshots" / "gone.png"
    row_id = answer(rt, "telegram", TG_CHAT, "t2", "The page.", str(gone))
    with caplog.at_level(logging.WARNING, logger="picobot.channels"):
        assert deliver_lane(rt, "telegram", TG_CHAT)["sent"] == 1
    assert fake_tg.texts(TG_CHAT) == ["The page."] and fake_tg.photos_to(TG_CHAT) == []
    assert any("image 0" in r.getMessage() and "no such file" in r.getMessage() for r in caplog.records)
    assert row(rt, row_id).status == outbox.SENT


def test_telegram_a_retry_after_the_text_went_sends_neither_twice(make_rt: Any, fake_tg: FakeTelegram) -> None:  # noqa: F811
    rt = make_rt()
    first, second = screenshot(rt, "1.png"), screenshot(rt, "2.png", png(3, 3))
    row_id = answer(rt, "telegram", TG_CHAT, "t3", "Look.", str(first), str(second))
    fake_tg.fail(500, method="sendPhoto", after=1)  # the text and the first photo go, the second meets an outage
    assert deliver_lane(rt, "telegram", TG_CHAT)["state"] == "waiting"
    assert fake_tg.texts(TG_CHAT) == ["Look."] and len(fake_tg.photos_to(TG_CHAT)) == 1
    assert row(rt, row_id).status == outbox.PENDING
    with rt.db.begin() as conn:  # the backoff is over
        conn.execute(OutboxRow.__table__.update().where(OutboxRow.__table__.c.id == row_id)
                     .values(next_attempt_at=None))
    assert deliver_lane(rt, "telegram", TG_CHAT)["sent"] == 1
    assert fake_tg.texts(TG_CHAT) == ["Look."]  # not twice
    assert [p["data"] for p in fake_tg.photos_to(TG_CHAT)] == [first.read_bytes(), second.read_bytes()]


def test_telegram_hostile_media_entries_are_skipped(make_rt: Any, fake_tg: FakeTelegram, tmp_path: Path) -> None:  # noqa: F811
    rt = make_rt()
    outside = tmp_path / "secret.png"
    outside.write_bytes(png())  # an image, but outside the workspace
    link = screenshot(rt, "link.png")
    link.unlink()
    link.symlink_to(outside)  # a link inside pointing out
    huge = screenshot(rt, "huge.png", png(pad=TEN_MB))  # over Telegram's 10 MB for a photo
    text = screenshot(rt, "notes.png", b"#!/bin/sh\necho not an image\n")
    good = screenshot(rt, "good.png")
    answer(rt, "telegram", TG_CHAT, "t4", "Several.", str(outside), str(link), str(huge), str(text),
           str(rt.config.workspace_path() / "screenshots" / ".." / ".." / "secret.png"), str(good))
    assert deliver_lane(rt, "telegram", TG_CHAT)["sent"] == 1
    assert fake_tg.texts(TG_CHAT) == ["Several."]
    assert [p["data"] for p in fake_tg.photos_to(TG_CHAT)] == [good.read_bytes()]


# ---- Feishu ------------------------------------------------------------------------------------


def test_feishu_gets_the_text_then_an_image_message(make_rt: Any, fake_feishu: FakeFeishu) -> None:  # noqa: F811
    rt = make_rt()
    shot = screenshot(rt)
    row_id = answer(rt, "feishu", FS_CHAT, "f1", "Here is page B.", str(shot))
    assert deliver_lane(rt, "feishu", FS_CHAT)["sent"] == 1
    sent = fake_feishu.messages_for(FS_CHAT)
    assert [m["msg_type"] for m in sent] == ["interactive", "image"]
    assert "Here is page B." in fake_feishu.text_of(sent[0])
    [image] = fake_feishu.images_for(FS_CHAT)
    assert image["data"] == shot.read_bytes()
    assert fake_feishu.images[image["content"]["image_key"]]["image_type"] == "message"
    assert row(rt, row_id).result["media"] == {"0": image["message_id"]}


def test_feishu_a_missing_file_is_skipped_with_a_log_line_and_the_text_goes(
        make_rt: Any, fake_feishu: FakeFeishu, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    rt = make_rt()
    row_id = answer(rt, "feishu", FS_CHAT, "f2", "The page.", str(rt.config.workspace_path() / "gone.png"))
    with caplog.at_level(logging.WARNING, logger="picobot.channels"):
        assert deliver_lane(rt, "feishu", FS_CHAT)["sent"] == 1
    assert [m["msg_type"] for m in fake_feishu.messages_for(FS_CHAT)] == ["interactive"]
    assert any("image 0" in r.getMessage() and "no such file" in r.getMessage() for r in caplog.records)
    assert row(rt, row_id).status == outbox.SENT


def test_feishu_a_retry_after_the_text_went_sends_neither_twice(make_rt: Any, fake_feishu: FakeFeishu) -> None:  # noqa: F811
    rt = make_rt()
    first, second = screenshot(rt, "1.png"), screenshot(rt, "2.png", png(3, 3))
    row_id = answer(rt, "feishu", FS_CHAT, "f3", "Two pictures.", str(first), str(second))
    # the text and the first image go, the second image's upload meets an outage
    fake_feishu.fail(status=500, times=1, path="/open-apis/im/v1/images", after=1)
    assert deliver_lane(rt, "feishu", FS_CHAT)["state"] == "waiting"
    assert len(fake_feishu.messages_for(FS_CHAT)) == 2 and row(rt, row_id).status == outbox.PENDING
    with rt.db.begin() as conn:  # the backoff is over
        conn.execute(OutboxRow.__table__.update().where(OutboxRow.__table__.c.id == row_id)
                     .values(next_attempt_at=None))
    assert deliver_lane(rt, "feishu", FS_CHAT)["sent"] == 1
    sent = fake_feishu.messages_for(FS_CHAT)
    assert [m["msg_type"] for m in sent] == ["interactive", "image", "image"]
    assert [i["data"] for i in fake_feishu.images_for(FS_CHAT)] == [first.read_bytes(), second.read_bytes()]
    assert len(fake_feishu.images) == 2  # the first image was not uploaded again


def test_feishu_hostile_media_entries_are_skipped(make_rt: Any, fake_feishu: FakeFeishu, tmp_path: Path) -> None:  # noqa: F811
    rt = make_rt()
    outside = tmp_path / "secret.png"
    outside.write_bytes(png())
    huge = screenshot(rt, "huge.png", png(pad=TEN_MB))
    text = screenshot(rt, "notes.png", b"not an image at all")
    good = screenshot(rt, "good.png")
    answer(rt, "feishu", FS_CHAT, "f4", "Several.", str(outside), str(huge), str(text), "/dev/zero",
           str(rt.config.workspace_path()), str(good))
    assert deliver_lane(rt, "feishu", FS_CHAT)["sent"] == 1
    assert [m["msg_type"] for m in fake_feishu.messages_for(FS_CHAT)] == ["interactive", "image"]
    assert [i["data"] for i in fake_feishu.images_for(FS_CHAT)] == [good.read_bytes()]
    assert len(fake_feishu.images) == 1  # nothing hostile was even uploaded


# ---- the checks on a media entry -----------------------------------------------------------------


def test_only_a_completed_answers_images_are_recorded(make_rt: Any) -> None:
    rt = make_rt()
    shot = screenshot(rt)
    blocks = [{"type": "text", "text": "x"}, {"type": "image_url", "url": "data:,", "path": str(shot)}]
    done = TurnView("s", "t", "telegram", TG_CHAT, "u", "default", "completed", "x",
                    messages=(ChatMessage("assistant", blocks),))
    assert answer_media(done) == [{"path": str(shot)}]
    stopped = TurnView("s", "t", "telegram", TG_CHAT, "u", "default", "cancelled", "x",
                       messages=(ChatMessage("assistant", blocks),))
    assert answer_media(stopped) == []


_junk = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entry=st.one_of(_junk, st.fixed_dictionaries({"path": st.text()}),
                       st.fixed_dictionaries({"path": st.text().map(lambda t: "/" + t)})))
def test_any_hostile_entry_is_a_reason_never_a_read_or_an_error(entry: Any, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    assert isinstance(read_image(entry, workspace, TEN_MB), str)


def test_read_image_accepts_a_workspace_image_only(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "shots").mkdir(parents=True)
    good = workspace / "shots" / "a.png"
    good.write_bytes(png())
    image = read_image({"path": str(good)}, workspace, TEN_MB)
    assert not isinstance(image, str) and image.mime == "image/png" and image.name == "a.png"
    assert read_image({"path": str(good)}, workspace, 10) == "larger than 10 bytes"
    assert read_image({"path": str(good)}, tmp_path / "other", TEN_MB) == "outside the workspace"
    assert read_image({"path": "shots/a.png"}, workspace, TEN_MB) == "not a file path"
    assert MAX_MEDIA == 10
