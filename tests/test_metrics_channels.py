"""`picobot_inputs_total` for a platform channel: a Telegram update through the fake Bot API reaches
/metrics, counted once — by the worker whose channel-event task hands it to the gateway — not twice.

The webhook (or poller) only records the raw update; the gateway's intake, where the observation hook
`picobot_input_received` is called, runs in the worker's `picobot.channel_event` task. WeChat takes
the same path (its poller records, the same task submits)."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest

from scripts.fake_telegram import FakeTelegram
from tests.conftest import add_rule
from tests.stack import Stack, wait_for
from tests.test_metrics import samples, scrape, total

TOKEN = "333333333:AAMetricsBotTokenForTheE2eTests_xyz"
SECRET = "metrics-webhook-secret_123"
FRIEND = 8123


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeTelegram]:
    f = FakeTelegram([TOKEN]).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def tgstack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any, fake: FakeTelegram) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("metrics-tg"), fake_llm.url)
    cfg_path = s.home / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["channels"] = {"tgm": {"type": "telegram", "enabled": True, "token": TOKEN, "base_url": fake.base_url,
                               "mode": "webhook", "webhook_secret": SECRET, "allow_from": [str(FRIEND)],
                               "webhook_url": f"{s.http}/telegram/tgm"}}
    cfg_path.write_text(json.dumps(cfg, indent=2))
    try:
        s.start(beat=False)
        wait_for(lambda: fake.bot(TOKEN).webhook, 60, "the web process never called setWebhook")
        yield s
    finally:
        s.stop()


def test_a_telegram_update_moves_the_inputs_counter(tgstack: Stack, fake: FakeTelegram, llm: Any) -> None:
    before = samples(scrape(tgstack).text)
    add_rule(llm, "metrics telegram probe", {"content": "counted"})
    fake.message(chat_id=FRIEND, text="metrics telegram probe", token=TOKEN)
    wait_for(lambda: any(m["text"] == "counted" for m in fake.sent_to(FRIEND, TOKEN)), 60,
             "the Telegram message was never answered")

    def moved() -> list | None:
        now = samples(scrape(tgstack).text)
        return now if total(now, "picobot_turns_total", channel="tgm") > total(before, "picobot_turns_total",
                                                                                channel="tgm") else None

    after = wait_for(moved, 30, "the worker's turn never reached /metrics")
    moved_by = {(l["fate"], l["process"]): v - total(before, n, **l)
                for n, l, v in after if n == "picobot_inputs_total" and l["channel"] == "tgm"}
    moved_by = {key: d for key, d in moved_by.items() if d}
    assert list(moved_by.values()) == [1], moved_by  # once, whatever process: never by two intakes
    [(fate, process)] = moved_by
    assert fate == "started" and process.startswith("w1@")
