"""The web UI's plan panel: hidden without a plan, filled and opened by `plan_updated` when a real turn's
`todo` calls change the current dialog's plan, reopened by a change after the user closed it, and an
unread mark on another dialog of the chat whose plan changed. Real Chromium, the shared stack, the fake
LLM scripting the tool calls."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_web_ui import open_chat, send, wait_idle
from tests.conftest import add_rule
from tests.stack import Stack, WsClient

pytestmark = pytest.mark.slow

PANEL_SHOWN = "() => { const p = document.querySelector('#plan-panel'); return p && !p.hidden; }"
PANEL_HIDDEN = "() => { const p = document.querySelector('#plan-panel'); return p && p.hidden; }"


def todo(**args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "todo", "arguments": args}]}


def statuses(page: Any) -> list[str | None]:
    return [li.get_attribute("data-status") for li in page.locator("#plan-items .plan-item").all()]


def test_the_plan_panel_follows_the_dialogs_plan(stack: Stack, llm: Any, new_page: Any, page_errors: Any) -> None:
    token = uuid.uuid4().hex[:8]
    page = new_page()
    open_chat(page, stack)
    page.wait_for_function(PANEL_HIDDEN)  # no plan: no panel, no toggle
    assert page.locator("#plan-toggle").is_hidden()

    add_rule(llm, f"{token} make", todo(action="create", title="Move house", items=[
        {"text": "pack books"}, {"text": "book a van"}, {"text": "clean the flat"}]),
        todo(action="update", item_id=1, status="done"), {"content": "Planned."})
    send(page, f"{token} make a plan")
    wait_idle(page)
    page.wait_for_function(PANEL_SHOWN)
    page.wait_for_function("() => document.querySelector('#plan-progress').textContent === '1/3 done'")
    assert page.locator("#plan-title").text_content() == "Move house"
    assert page.locator("#plan-items .plan-item-text").all_text_contents() == ["pack books", "book a van",
                                                                             "clean the flat"]
    assert statuses(page) == ["done", "pending", "pending"]
    screenshot(page, "plan-panel")

    page.click("#plan-panel .plan-head button")  # closed by the user: a change opens it again
    page.wait_for_function(PANEL_HIDDEN)
    assert page.locator("#plan-toggle").is_visible()
    add_rule(llm, f"{token} van", todo(action="update", item_id=2, status="blocked", note="none free"),
             {"content": "Blocked."})
    send(page, f"{token} van")
    wait_idle(page)
    page.wait_for_function(PANEL_SHOWN)
    page.wait_for_function("() => document.querySelector('#plan-items .plan-item[data-status=blocked] .plan-note')"
                           "?.textContent === 'none free'")

    # another dialog: no plan there; a change in the first one marks it in the dialog list
    first = page.evaluate("() => document.querySelector('#dialog-list .dialog.current').dataset.session")
    page.click("#new-chat")
    page.wait_for_function(f"() => document.querySelector('#dialog-list .dialog.current')?.dataset.session !== {first!r}"
                           " && document.querySelector('#dialog-list .dialog.current')")
    page.wait_for_function(PANEL_HIDDEN)
    chat_id = page.evaluate("() => localStorage.getItem('picobot.chat_id')")
    other = WsClient(stack.ws_url, chat_id, channel="web", token=stack.token)  # the same chat, from elsewhere
    other.command(f"/switch {first.rsplit(':', 1)[1]}")
    add_rule(llm, f"{token} clean", todo(action="update", item_id=3, status="in_progress"), {"content": "On it."})
    other.ask(f"{token} clean")
    other.close()
    mark = f"#dialog-list .dialog[data-session='{first}'].plan-unread .plan-dot"
    page.wait_for_selector(mark)
    page.wait_for_function(PANEL_HIDDEN)  # the shown dialog's panel is not opened by another's plan
    page.click(f"#dialog-list .dialog[data-session='{first}'] .dialog-btn")
    page.wait_for_function(PANEL_SHOWN)
    page.wait_for_function("() => [...document.querySelectorAll('#plan-items .plan-item')].map(li => li.dataset.status)"
                           ".join() === 'done,blocked,in_progress'")
    assert page.locator(mark).count() == 0  # shown: no longer unread
    assert not page_errors.errors, page_errors.errors
