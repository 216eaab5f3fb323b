"""Fixtures for the Telegram channel's in-process tests: a started fake Bot API and real runtimes on it.

    from tests.telegram_fake import fake_tg, make_rt, RecordingQueue   # noqa: F401 (fixtures)

    def test_x(fake_tg, make_rt):
        rt = make_rt(allow_from=["7"])          # channels.telegram -> the fake; a temp home, a private Redis
        rt.channels.adapter("telegram").deliver(...)
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from picobot.app import App as Runtime, build_runtime
from picobot.channels.base import Delivery
from picobot.config import Config
from picobot.storage import outbox
from scripts.fake_telegram import FakeTelegram

__all__ = ["fake_tg", "make_rt", "RecordingQueue", "FakeTelegram", "add_delivery"]


class RecordingQueue:
    """The task queue's ports, recording instead of running (the tests run the steps themselves)."""

    def __init__(self) -> None:
        self.events: list[int] = []
        self.turns: list[str] = []
        self.lanes: list[tuple[str, str, float]] = []

    def enqueue_turn(self, session_id: str) -> None:
        self.turns.append(session_id)

    def enqueue_channel_event(self, event_id: int) -> None:
        self.events.append(event_id)

    def enqueue_delivery(self, channel: str, chat_id: str, countdown: float = 0) -> None:
        self.lanes.append((channel, chat_id, countdown))


@pytest.fixture
def fake_tg() -> Iterator[FakeTelegram]:
    fake = FakeTelegram().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def make_rt(tmp_path: Path, redis_url: str, fake_tg: FakeTelegram, monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[Callable[..., Runtime]]:
    monkeypatch.setenv("REDIS_URL", redis_url)
    made: list[Runtime] = []

    def make(**telegram: Any) -> Runtime:
        home = tmp_path / f"home{len(made)}"
        section = {"enabled": True, "token": fake_tg.token, "base_url": fake_tg.base_url, **telegram}
        config = Config.model_validate({"home": str(home), "channels": {"telegram": section}})
        rt = build_runtime(config, RecordingQueue(), migrate=True)  # type: ignore[arg-type]
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


def add_delivery(rt: Runtime, chat_id: Any, text: str, kind: str = "reply", reply_to: str | None = None,
                 fmt: str = "markdown", turn_id: str | None = None) -> Delivery:
    """An outbox row, as the delivery loop hands it to the adapter."""
    key = f"d-{uuid.uuid4().hex[:12]}"
    payload = {"text": text, "format": fmt, "reply_to": reply_to, "turn_id": turn_id, "session_id": None}
    with rt.db.begin() as conn:
        outbox.add(conn, "telegram", str(chat_id), payload, key, kind=kind, turn_id=turn_id)
    with rt.db.connect() as conn:
        row = [r for r in outbox.lane(conn, "telegram", str(chat_id)) if r.idempotency_key == key][0]
    return Delivery(id=row.id, channel="telegram", chat_id=str(chat_id), kind=kind, payload=dict(row.payload),
                    idempotency_key=key, attempts=row.attempts)
