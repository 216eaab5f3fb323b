"""Approvals in Telegram: the request arrives with an inline keyboard; pressing Approve (a callback_query
through the real poller) decides it, the spinner is answered, and the paused call runs."""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

import pytest

from scripts.fake_telegram import FakeTelegram
from tests.conftest import add_rule
from tests.stack import Stack, wait_for
from tests.test_telegram_e2e import start_poller

pytestmark = pytest.mark.slow

TOKEN = "333333333:AAApprovalsBotTokenForTheTests_xyz"
FRIEND, STRANGER = 8701, 8799


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeTelegram]:
    f = FakeTelegram([TOKEN]).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def tg(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any, fake: FakeTelegram) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("approvals-tg"), fake_llm.url)
    cfg = json.loads((s.home / "config.json").read_text())
    cfg["channels"] = {"telegram": {"enabled": True, "token": TOKEN, "base_url": fake.base_url,
                                    "allow_from": [str(FRIEND), "8702", "8703"], "poll_timeout_secs": 5}}
    cfg["tools"] = {"approval": {"mode": "ask", "timeout_secs": 120}}
    (s.home / "config.json").write_text(json.dumps(cfg))
    try:
        s.start(beat=False)
        start_poller(s, "tg1")
        yield s
    finally:
        s.stop()


def _ask(tg: Stack, fake: FakeTelegram, llm: Any, chat: int) -> tuple[str, Any, dict[str, Any]]:
    tag = uuid.uuid4().hex[:8]
    victim = tg.home.parent / "home-workspace" / f"victim-{tag}"
    victim.mkdir(parents=True)
    call = {"name": "bash", "arguments": {"command": f"rm -rf {victim.name}"}}
    add_rule(llm, f"wipe-{tag}", {"tool_calls": [call]}, {"content": f"finished {tag}"})
    fake.message(chat_id=chat, text=f"wipe-{tag}")
    request = wait_for(lambda: next((m for m in fake.sent_to(chat) if "Approval needed" in m["text"]), None), 60,
                       "no approval request reached the chat")
    return tag, victim, request


def _sent(fake: FakeTelegram, chat: int, start: str) -> bool:
    return any(m["text"].startswith(start) for m in fake.sent_to(chat))


def test_pressing_approve_runs_the_call(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    tag, victim, request = _ask(tg, fake, llm, FRIEND)
    labels = [b["text"] for b in request["buttons"]]
    assert labels == ["Approve", "Allow for this dialog", "Deny"], request
    assert f"rm -rf {victim.name}" in request["text"] and victim.exists()
    update = fake.press(FRIEND, request["message_id"], request["buttons"][0]["callback_data"])
    wait_for(lambda: _sent(fake, FRIEND, f"finished {tag}") and _sent(fake, FRIEND, "Approved bash"), 60,
             "the turn did not finish, or the approval was not told")
    assert not victim.exists()
    assert update["callback_query"]["id"] in [a["callback_query_id"] for a in fake.answered()]


def test_pressing_deny_keeps_the_files_and_a_stranger_is_ignored(tg: Stack, fake: FakeTelegram, llm: Any) -> None:
    tag, victim, request = _ask(tg, fake, llm, 8702)
    deny = request["buttons"][2]["callback_data"]
    fake.press(8702, request["message_id"], deny, from_id=STRANGER)  # not in allow_from: nothing happens
    fake.press(8702, request["message_id"], deny)
    # the turn's answer and the decision's notice are separate deliveries: either may arrive first
    wait_for(lambda: _sent(fake, 8702, f"finished {tag}") and _sent(fake, 8702, "Denied bash"), 60,
             "the turn did not finish, or the denial was not told")
    assert victim.exists()
    texts = [m["text"] for m in fake.sent_to(8702)]
    assert sum(1 for t in texts if t.startswith("Denied bash")) == 1, texts
