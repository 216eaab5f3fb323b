"""Pytest fixtures for the Feishu channel: a started fake Feishu OpenAPI and an event sender factory.

    def test_x(fake_feishu, feishu_config, event_sender):
        cfg = {"channels": {"feishu": feishu_config}}          # domain = the fake, vtok / ekey
        sender = event_sender("http://127.0.0.1:PORT/feishu/events")   # registers messages in the fake
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from scripts.fake_feishu import EventSender, FakeFeishu

__all__ = ["fake_feishu", "feishu_config", "event_sender", "FakeFeishu", "EventSender"]


@pytest.fixture
def fake_feishu() -> Iterator[FakeFeishu]:
    fake = FakeFeishu(app_id="cli_test", app_secret="secret_test").start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def feishu_config(fake_feishu: FakeFeishu) -> dict[str, Any]:
    """The `channels.feishu` config block for a PicoBot talking to the fake."""
    return {"enabled": True, "app_id": fake_feishu.app_id, "app_secret": fake_feishu.app_secret,
            "domain": fake_feishu.base_url, "verification_token": "vtok", "encrypt_key": "ekey"}


@pytest.fixture
def event_sender(fake_feishu: FakeFeishu) -> Iterator[Callable[..., EventSender]]:
    """A factory: event_sender(webhook_url, **kw) -> EventSender signed with vtok/ekey, tied to the fake."""
    made: list[EventSender] = []

    def make(webhook_url: str, **kw: Any) -> EventSender:
        kw.setdefault("verification_token", "vtok")
        kw.setdefault("encrypt_key", "ekey")
        kw.setdefault("app_id", fake_feishu.app_id)
        kw.setdefault("fake", fake_feishu)
        sender = EventSender(webhook_url, **kw)
        made.append(sender)
        return sender

    yield make
    for sender in made:
        sender.close()
