"""The approval card in the chat page (real Chromium, a stack with `tools.approval.mode: ask`): a paused
`rm -rf` shows Approve / Deny / Allow for this dialog; Approve runs the call and the card shows who decided."""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_web_ui import open_chat, send, wait_idle
from tests.conftest import add_rule
from tests.stack import Stack, base_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("approval-ui")
    cfg = base_config(fake_llm.url, 0)
    cfg["tools"] = {"approval": {"mode": "ask", "timeout_secs": 120}}
    s = Stack(tmp, fake_llm.url, config=cfg)
    cfg["gateway"]["port"] = s.port
    (s.home / "config.json").write_text(json.dumps(cfg))
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def _victim(stack: Stack, llm: Any) -> tuple[str, Any]:
    tag = uuid.uuid4().hex[:8]
    victim = stack.home.parent / "home-workspace" / f"victim-{tag}"
    victim.mkdir(parents=True)
    call = {"name": "bash", "arguments": {"command": f"rm -rf {victim.name}"}}
    add_rule(llm, f"wipe-{tag}", {"tool_calls": [call]}, {"content": f"finished {tag}"})
    return tag, victim


def test_approve_on_the_card_runs_the_call(stack: Stack, llm: Any, new_page: Any, page_errors: Any) -> None:
    tag, victim = _victim(stack, llm)
    page = new_page()
    open_chat(page, stack)
    send(page, f"wipe-{tag}")
    card = page.locator(".approval-card.pending")
    card.wait_for()
    assert f"rm -rf {victim.name}" in (card.locator(".approval-summary").text_content() or "")
    assert victim.exists()
    screenshot(page, "approval-card-pending")
    card.get_by_role("button", name="Approve", exact=True).click()
    done = page.locator(".approval-card.approved .approval-outcome")
    done.wait_for()
    assert "Approved" in (done.text_content() or "") and "via web" in (done.text_content() or "")
    wait_idle(page)
    page.locator(".msg.assistant", has_text=f"finished {tag}").wait_for()
    assert not victim.exists()
    assert not page_errors.errors, page_errors.errors


def test_a_reload_shows_the_waiting_card_and_deny_keeps_the_files(stack: Stack, llm: Any, new_page: Any,
                                                                  page_errors: Any) -> None:
    tag, victim = _victim(stack, llm)
    page = new_page()
    open_chat(page, stack)
    send(page, f"wipe-{tag}")
    page.locator(".approval-card.pending").wait_for()
    page.reload()
    page.wait_for_selector(".app[data-conn=open]")
    card = page.locator(".approval-card.pending")
    card.wait_for()
    card.get_by_role("button", name="Deny").click()
    page.locator(".approval-card.denied").wait_for()
    wait_idle(page)
    page.locator(".msg.assistant", has_text=f"finished {tag}").wait_for()
    assert victim.exists()
    assert not page_errors.errors, page_errors.errors
