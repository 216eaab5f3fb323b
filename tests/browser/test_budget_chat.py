"""A budget refusing a model call, seen in the chat page (real Chromium, a stack with `budgets`)."""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

import httpx
import pytest

from tests.browser.test_web_ui import open_chat, send, wait_idle
from tests.conftest import add_rule
from tests.stack import Stack, base_config
from tests.http_client import HTTP

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("budget-ui")
    cfg = base_config(fake_llm.url, 0)
    cfg["budgets"] = {"session": {"tokens": 40000}, "output_estimate_tokens": 20000}
    s = Stack(tmp, fake_llm.url, config=cfg)
    cfg["gateway"]["port"] = s.port
    (s.home / "config.json").write_text(json.dumps(cfg))
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def test_a_refused_turn_shows_which_limit_and_the_page_settles(stack: Stack, llm: Any, new_page: Any,
                                                               page_errors: Any) -> None:
    tag = uuid.uuid4().hex[:6]
    add_rule(llm, f"bspend-{tag}", {"content": "spent", "usage": {"input_tokens": 0, "output_tokens": 30000}})
    page = new_page()
    open_chat(page, stack)
    send(page, f"bspend-{tag}")
    wait_idle(page)
    send(page, f"bcross-{tag}")
    wait_idle(page)
    notice = page.locator(".messages .notice.error").last
    notice.wait_for()
    text = notice.text_content() or ""
    assert "budgets.session.tokens" in text and "30,000 of 40,000" in text and "/new" in text, text
    sent = HTTP.get(llm.url + "/_fake/requests").json()["requests"]
    assert not any(f"bcross-{tag}" in json.dumps(r.get("body")) for r in sent)
    assert not page_errors.errors, page_errors.errors
