"""The Telegram poller in process (threads, not signals): offsets confirmed only after SQL has the update,
one poller per token, errors backed off and shown in the heartbeat.

A real runtime (temp SQLite, a private Redis) and the fake Bot API; faults are real: the inbox table is
renamed away under the poller, the token is wrong.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import pytest
import sqlalchemy as sa

from picobot.channels.telegram import status
from picobot.channels.telegram.config import TelegramConfig
from picobot.channels.telegram.poller import Poller, backoff_delay
from scripts.fake_telegram import FakeTelegram
from tests.stack import wait_for
from tests.telegram_fake import fake_tg, make_rt  # noqa: F401 (fixtures)


class Running:
    """Pollers serving in threads; all stopped at the end of the test."""

    def __init__(self) -> None:
        self.pollers: list[tuple[Poller, threading.Thread]] = []

    def start(self, rt: Any, **cfg: Any) -> Poller:
        section = rt.config.channels["telegram"].model_dump() | {"poll_timeout_secs": 1, **cfg}
        poller = Poller(rt, TelegramConfig.model_validate(section), "telegram", lease_ttl=2.0)
        thread = threading.Thread(target=poller.serve, daemon=True)
        thread.start()
        self.pollers.append((poller, thread))
        return poller

    def stop(self, poller: Poller) -> None:
        for p, thread in self.pollers:
            if p is poller:
                p.request_stop()
                thread.join(timeout=15)
                assert not thread.is_alive()


@pytest.fixture
def running() -> Iterator[Running]:
    r = Running()
    yield r
    for poller, _ in r.pollers:
        poller.request_stop()
    for _, thread in r.pollers:
        thread.join(timeout=15)


def events_of(rt: Any) -> list[Any]:
    with rt.db.connect() as conn:
        return list(conn.execute(sa.text("SELECT event_key FROM channel_events")))


def test_the_offset_moves_only_past_what_sql_recorded(fake_tg: FakeTelegram, make_rt: Any, running: Running) -> None:
    rt = make_rt()
    poller = running.start(rt)
    fake_tg.message(chat_id=41, text="first")
    wait_for(lambda: len(events_of(rt)) == 1 and fake_tg.pending() == 0, 20, "the first update was not taken")
    with rt.db.begin() as conn:  # the inbox goes away: recording fails
        conn.execute(sa.text("ALTER TABLE channel_events RENAME TO channel_events_away"))
    offset = poller.offset
    update = fake_tg.message(chat_id=41, text="second")
    wait_for(lambda: status.read(rt.redis, "telegram").get("state") == "error", 20, "the failure was not shown")
    time.sleep(2.5)  # a few polls later
    assert fake_tg.pending() == 1 and poller.offset == offset  # not confirmed: Telegram still has it
    with rt.db.begin() as conn:
        conn.execute(sa.text("ALTER TABLE channel_events_away RENAME TO channel_events"))
    wait_for(lambda: len(events_of(rt)) == 2, 30, "the second update was not recorded after the fault")
    wait_for(lambda: fake_tg.pending() == 0, 20, "the second update was not confirmed")
    assert poller.offset == update["update_id"] + 1
    assert status.read(rt.redis, "telegram")["state"] == "polling"


def test_one_poller_per_token_and_the_standby_takes_over(fake_tg: FakeTelegram, make_rt: Any,
                                                         running: Running) -> None:
    rt = make_rt()
    first = running.start(rt)
    wait_for(lambda: first.lease.held, 10, "no poller took the lease")
    second = running.start(make_rt())  # another process's runtime, same Redis, same token
    for n in range(3):
        fake_tg.message(chat_id=42, text=f"m{n}")
    wait_for(lambda: fake_tg.pending() == 0, 20, "updates were not taken")
    assert not second.lease.held and fake_tg.bot().conflicts == 0
    running.stop(first)
    fake_tg.message(chat_id=42, text="after the first stopped")
    wait_for(lambda: second.lease.held and fake_tg.pending() == 0, 30, "the standby did not take over")
    assert fake_tg.bot().conflicts == 0


def test_a_wrong_token_is_shown_and_retried_slowly(fake_tg: FakeTelegram, make_rt: Any, running: Running) -> None:
    rt = make_rt(token="999:wrong_token_for_this_fake")
    running.start(rt)
    wait_for(lambda: status.read(rt.redis, "telegram").get("state") == "unauthorized", 20, "no unauthorized state")
    calls = len([c for c in fake_tg.calls if c["method"] == "getUpdates"])
    time.sleep(3)
    assert len([c for c in fake_tg.calls if c["method"] == "getUpdates"]) - calls <= 1  # no tight loop
    entry = status.health_entry(rt.redis, "telegram", "polling", 1)
    assert entry["ok"] is False and "unauthorized" in entry["detail"] and "wrong_token" not in str(entry)


def test_the_poller_removes_a_webhook_and_sets_the_menu(fake_tg: FakeTelegram, make_rt: Any,
                                                        running: Running) -> None:
    rt = make_rt()
    fake_tg.bot().webhook = {"url": "https://old.example/hook", "secret_token": "", "allowed_updates": None}
    running.start(rt)
    wait_for(lambda: fake_tg.bot().webhook is None, 20, "the webhook was not deleted")
    fake_tg.message(chat_id=43, text="after the webhook")
    wait_for(lambda: len(events_of(rt)) == 1, 20, "polling did not start")
    assert fake_tg.bot().webhook is None and {c["command"] for c in fake_tg.bot().commands} >= {"new", "stop"}


def test_backoff_grows_and_is_capped() -> None:
    assert [backoff_delay(a, lambda: 1.0) for a in (0, 1, 2, 10, 30)] == [1.0, 2.0, 4.0, 60.0, 60.0]
    assert backoff_delay(3, lambda: 0.0) == 4.0


def test_picobot_up_starts_a_poller_for_each_polling_channel() -> None:
    from picobot.channels.telegram.poller import polling_channels
    from picobot.cli.plugin_parts import planned
    from picobot.config import Config

    config = Config.model_validate({"channels": {
        "telegram": {"enabled": True, "token": "1:a"},
        "hook": {"type": "telegram", "enabled": True, "token": "2:b", "mode": "webhook"},
        "off": {"type": "telegram", "enabled": False, "token": "3:c"},
        "second": {"type": "telegram", "enabled": True, "token": "4:d", "mode": "polling"},
    }})
    assert polling_channels(config) == ["telegram", "second"]
    targets = [target for _, target in planned(config) if target.startswith("channels:telegram:")]
    assert targets == ["channels:telegram:telegram", "channels:telegram:second"]  # `picobot run <target>` each


def test_picobot_telegram_refuses_a_channel_it_cannot_poll(tmp_path: Any) -> None:
    import json
    import os
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"channels": {
        "hook": {"type": "telegram", "enabled": True, "token": "2:b", "mode": "webhook", "webhook_secret": "s",
                 "webhook_url": "https://x.example/telegram/hook"}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PICOBOT_"))}
    env["PICOBOT_HOME"] = str(home)
    for args, why in ((["--channel", "hook"], "webhook"), (["--channel", "nope"], "not a Telegram channel")):
        r = subprocess.run([sys.executable, "-m", "picobot", "telegram", *args], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and why in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "picobot", "config"], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and '"2:b"' not in r.stdout and "webhook_secret" in r.stdout
