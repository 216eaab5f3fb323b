"""The web UI's dialog list and header show a dialog's automatic title when it arrives (`session_updated`),
without a reload: real Chromium, a real stack with `titles` on, the fake LLM answering the title late."""

from __future__ import annotations

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
    """This module's stack: the shared one runs with titles off."""
    from picobot.cli.embedded_redis import free_port

    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["titles"] = {"enabled": True}
    s = Stack(tmp_path_factory.mktemp("titles-ui"), fake_llm.url, config=cfg)
    s.port = port
    try:
        s.start(workers=1, beat=False)
        yield s
    finally:
        s.stop()


def test_the_dialog_list_shows_the_title_when_it_arrives(stack: Stack, llm: Any, new_page: Any, page_errors: Any) -> None:
    token = uuid.uuid4().hex[:8]
    add_rule(llm, f"User: {token}", {"content": "Weekend in Lisbon", "delay_ms": 3000})
    page = new_page()
    open_chat(page, stack)
    send(page, f"{token} plan a weekend in Lisbon")
    wait_idle(page)
    current = page.locator("#dialog-list .dialog.current .dialog-title")
    page.wait_for_function("() => document.querySelector('#dialog-list .dialog.current .dialog-title')")
    # the answer is in; until the title comes, the list shows the first message
    assert current.text_content() in (f"{token} plan a weekend in Lisbon", "New chat")
    page.wait_for_function("() => document.querySelector('#dialog-list .dialog.current .dialog-title')"
                           ".textContent === 'Weekend in Lisbon'", timeout=20_000)
    page.wait_for_function("() => document.querySelector('#chat-title').textContent === 'Weekend in Lisbon'")
    assert not page.locator("#chat-title").get_attribute("class").count("untitled")
    screenshot(page, "dialog-title")
    assert not page_errors.errors, page_errors.errors
