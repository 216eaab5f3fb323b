"""A platform chat's `/sessions` names its dialog by the automatic title: Telegram end to end (the fake
Bot API, a real `picobot telegram` poller, a real stack with `titles` on, the fake LLM)."""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

import pytest

from scripts.fake_telegram import FakeTelegram
from tests.conftest import add_rule
from tests.stack import Stack, wait_for
from tests.test_telegram_e2e import settled, sql, start_poller

pytestmark = pytest.mark.slow

TOKEN = "333333333:AATitlesBotTokenForTheE2eTests_xyz"
CHAT = 8700


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeTelegram]:
    f = FakeTelegram([TOKEN]).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def tg(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any, fake: FakeTelegram) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("titles-telegram"), fake_llm.url)
    cfg = json.loads((s.home / "config.json").read_text())
    cfg["titles"] = {"enabled": True}
    cfg["channels"] = {"telegram": {"enabled": True, "token": TOKEN, "base_url": fake.base_url,
                                    "allow_from": [str(CHAT)], "poll_timeout_secs": 5}}
    (s.home / "config.json").write_text(json.dumps(cfg, indent=2))
    try:
        s.start(workers=1, beat=False)
        start_poller(s, "tg1")
        yield s
    finally:
        s.stop()


def test_telegram_sessions_lists_the_automatic_title(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    token = uuid.uuid4().hex[:8]
    add_rule(llm, f"User: {token}", {"content": "Recette de crêpes"})
    fake.message(chat_id=CHAT, text=f"{token} comment faire des crêpes ?")
    [answer] = settled(tg, fake, CHAT, token=TOKEN)
    assert answer["text"].startswith("You said:")
    query = "SELECT title, title_source FROM sessions WHERE channel = 'telegram' AND chat_id = :c"
    wait_for(lambda: sql(tg, query, c=str(CHAT)) == [{"title": "Recette de crêpes", "title_source": "auto"}], 30,
             f"the dialog's title: {sql(tg, query, c=str(CHAT))}")
    fake.message(chat_id=CHAT, text="/sessions")
    wait_for(lambda: len(fake.sent_to(CHAT, TOKEN)) == 2, 60, "the /sessions reply")
    listed = settled(tg, fake, CHAT, token=TOKEN)[-1]["text"]
    assert "default      Recette de crêpes" in listed  # (Telegram shows the "*" as a bullet)
