"""The Logs page in a real Chromium against a real stack: a worker's line shows up masked and as text (its
HTML is not markup), the filters narrow the table, an empty result says so, auto-refresh brings new lines."""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import pytest

from scripts.fake_llm import FakeLLM
from tests.browser.conftest import screenshot
from tests.stack import API_KEY, Stack
from tests.test_logs_api import CARELESS_PLUGIN

pytestmark = pytest.mark.slow

HOSTILE = '<img src=x onerror="window.__pwned=1">'


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    """web + worker + beat, with a home plugin that logs each turn's answer (and, carelessly, the API key)."""
    s = Stack(tmp_path_factory.mktemp("logs-page"), fake_llm.url)
    (s.home / "plugins").mkdir()
    (s.home / "plugins" / "careless.py").write_text(CARELESS_PLUGIN)
    try:
        s.start()
        yield s
    finally:
        s.stop()


def rows(page: Any) -> Any:
    return page.locator("#logs-table tbody tr")


def test_logs_page_shows_filters_and_refreshes(stack: Stack, new_page: Any, page_errors: Any) -> None:
    marker = uuid.uuid4().hex[:10]
    client = stack.client()
    assert client.ask(f"echo {marker} {HOSTILE}")["type"] == "turn_completed"

    page = new_page()
    page.goto(stack.http + "/#/logs")
    page.wait_for_selector("#logs-table tbody tr")
    page.fill("#logs-q", marker)
    page.wait_for_function("m => [...document.querySelectorAll('#logs-table tbody tr')].length === 1 && "
                           "document.querySelector('#logs-table tbody tr').innerText.includes(m)", arg=marker,
                           timeout=30_000)
    row = rows(page).first
    assert row.get_attribute("data-process") == "worker" and row.get_attribute("data-level") == "WARNING"
    text = row.inner_text()
    assert HOSTILE in text and "********" in text and API_KEY not in page.content()  # shown as text, masked
    assert page.evaluate("() => window.__pwned") is None and page.locator("#logs-table img").count() == 0
    screenshot(page, "logs-laptop")

    page.fill("#logs-q", "")
    page.select_option("#logs-level", "WARNING")
    page.wait_for_function("() => [...document.querySelectorAll('#logs-table tbody tr')].length > 0 && "
                           "[...document.querySelectorAll('#logs-table tbody tr')].every(r => r.dataset.level !== 'INFO')")
    page.select_option("#logs-level", "")
    page.fill("#logs-process", "beat")
    page.wait_for_function("() => [...document.querySelectorAll('#logs-table tbody tr')].length > 0 && "
                           "[...document.querySelectorAll('#logs-table tbody tr')].every(r => r.dataset.process === 'beat')")
    page.fill("#logs-process", "")
    page.fill("#logs-q", "no-such-line-" + marker)
    page.wait_for_selector("#logs-empty:not([hidden])")
    assert "No log lines match" in page.inner_text("#logs-empty")

    later = uuid.uuid4().hex[:10]
    page.fill("#logs-q", later)
    page.wait_for_selector("#logs-empty:not([hidden])")
    page.check("#logs-auto")
    assert client.ask(f"echo {later}")["type"] == "turn_completed"
    page.wait_for_function("m => document.querySelector('#logs-table tbody tr')?.innerText.includes(m)", arg=later,
                           timeout=30_000)  # no click: the page refreshed itself
    client.close()
    assert page_errors.errors == []


def test_logs_page_says_when_redis_is_gone(stack: Stack, new_page: Any) -> None:
    """Last in the module: it stops the stack's Redis."""
    page = new_page()
    page.goto(stack.http + "/#/logs")
    page.wait_for_selector("#logs-table tbody tr")
    stack.redis_proc.terminate()
    stack.redis_proc.wait(timeout=10)
    page.click("#logs-refresh")
    page.wait_for_selector("#logs-error .error-card")
    assert "Redis" in page.inner_text("#logs-error")
