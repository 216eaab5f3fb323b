"""Approvals in Feishu: the request arrives as a card with buttons; a press (a signed card.action.trigger
event on the webhook) decides it as the presser, and the paused call runs or not."""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

import pytest

from scripts.fake_feishu import EventSender, FakeFeishu
from scripts.fake_feishu.reading import buttons_of
from tests.conftest import add_rule
from tests.stack import Stack, wait_for

pytestmark = pytest.mark.slow

FRIEND, STRANGER = "ou_friend", "ou_stranger"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeFeishu]:
    f = FakeFeishu(app_id="cli_appr", app_secret="secret_appr", rate_limit_qps=None).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def fstack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any, fake: FakeFeishu) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("approvals-feishu"), fake_llm.url)
    cfg = json.loads((s.home / "config.json").read_text())
    cfg["channels"] = {"feishu": {"enabled": True, "app_id": fake.app_id, "app_secret": fake.app_secret,
                                  "domain": fake.base_url, "verification_token": "vtok", "encrypt_key": "ekey",
                                  "allow_from": [FRIEND], "live_updates": False}}
    cfg["tools"] = {"approval": {"mode": "ask", "timeout_secs": 120}}
    (s.home / "config.json").write_text(json.dumps(cfg))
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


@pytest.fixture
def sender(fstack: Stack, fake: FakeFeishu) -> Iterator[EventSender]:
    snd = EventSender(f"{fstack.http}/feishu/events", "vtok", "ekey", app_id=fake.app_id, fake=fake)
    yield snd
    snd.close()


def _ask(fstack: Stack, fake: FakeFeishu, sender: EventSender, llm: Any) -> tuple[str, str, Any, dict[str, Any]]:
    tag, chat = uuid.uuid4().hex[:8], "oc_" + uuid.uuid4().hex[:16]
    victim = fstack.home.parent / "home-workspace" / f"victim-{tag}"
    victim.mkdir(parents=True)
    call = {"name": "bash", "arguments": {"command": f"rm -rf {victim.name}"}}
    add_rule(llm, f"wipe-{tag}", {"tool_calls": [call]}, {"content": f"finished {tag}"})
    assert sender.send(f"wipe-{tag}", chat_id=chat, sender_open_id=FRIEND).status_code == 200
    card = wait_for(lambda: next((m for m in fake.messages_for(chat) if buttons_of(m)), None), 60,
                    "no approval card reached the chat")
    return tag, chat, victim, card


def _finished(fake: FakeFeishu, chat: str, tag: str, told: str) -> bool:
    """The turn's answer and the decision's notice (`told`) both sent: separate deliveries, in either order."""
    texts = [fake.text_of(m) for m in fake.messages_for(chat)]
    return any(f"finished {tag}" in t for t in texts) and any(t.startswith(told) for t in texts)


def test_pressing_approve_on_the_card_runs_the_call(fstack: Stack, fake: FakeFeishu, sender: EventSender,
                                                    llm: Any) -> None:
    tag, chat, victim, card = _ask(fstack, fake, sender, llm)
    buttons = buttons_of(card)
    assert [label for label, _ in buttons] == ["Approve", "Allow for this dialog", "Deny"]
    assert f"rm -rf {victim.name}" in fake.text_of(card) and victim.exists()
    answer = sender.post(sender.card_action(chat, card["message_id"], buttons[0][1], FRIEND))
    assert answer.status_code == 200 and "toast" in answer.json()
    wait_for(lambda: _finished(fake, chat, tag, "Approved bash"), 60, "the turn did not finish, or the approval was not told")
    assert not victim.exists()


def test_a_strangers_press_is_ignored_and_deny_keeps_the_files(fstack: Stack, fake: FakeFeishu, sender: EventSender,
                                                              llm: Any) -> None:
    tag, chat, victim, card = _ask(fstack, fake, sender, llm)
    deny = buttons_of(card)[2][1]
    sender.post(sender.card_action(chat, card["message_id"], f"/approve {deny.split()[1]}", STRANGER))
    sender.post(sender.card_action(chat, card["message_id"], deny, FRIEND))
    wait_for(lambda: _finished(fake, chat, tag, "Denied bash"), 60, "the turn did not finish, or the denial was not told")
    assert victim.exists()
    texts = [fake.text_of(m) for m in fake.messages_for(chat)]
    assert sum(1 for t in texts if t.startswith("Denied bash")) == 1 and not any(t.startswith("Approved") for t in texts)
