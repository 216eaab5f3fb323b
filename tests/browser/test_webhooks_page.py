"""The Jobs page's Webhooks section in a real Chromium against a real stack with `hooks` configured: a
signed POST runs on the worker and the page lists the hook and the completed run; markup in the payload
(echoed by the fake model into the run's result) shows as text and never becomes elements."""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import httpx
import pytest

from scripts.fake_llm import FakeLLM
from tests.browser.conftest import screenshot
from tests.hook_sink import SECRET, post
from tests.stack import Stack, base_config, wait_for
from tests.http_client import HTTP

pytestmark = pytest.mark.slow

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b id="injected">bold</b>'


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    """The module's stack, with one plain webhook (the browser fixtures pair against this one)."""
    from picobot.cli.embedded_redis import free_port

    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["hooks"] = {"orders": {"secret": SECRET, "prompt": "Order {{ payload.order.id }} of {{ payload.items.0 }}"}}
    s = Stack(tmp_path_factory.mktemp("hooks-page"), fake_llm.url, config=cfg)
    s.port = port
    try:
        s.start()
        yield s
    finally:
        s.stop()


def completed_run(stack: Stack, run_id: str) -> dict[str, Any] | None:
    r = HTTP.get(f"{stack.http}/hooks/runs/{run_id}", headers={"Authorization": f"Bearer {stack.token}"}, timeout=10)
    assert r.status_code == 200, r.text
    run = r.json()
    assert run["status"] != "failed", run
    return run if run["status"] == "completed" else None


def test_jobs_page_shows_the_hook_and_its_completed_run_as_text(stack: Stack, llm: FakeLLM, new_page: Any,
                                                                page_errors: Any) -> None:
    marker = "ord" + uuid.uuid4().hex[:8]
    r = post(stack.http, "orders", {"order": {"id": marker + HOSTILE}, "items": ["tea"]})
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    run = wait_for(lambda: completed_run(stack, run_id), 60, f"run {run_id} never completed")
    assert HOSTILE in run["result"]  # the fake model echoed the markup: the page gets it verbatim

    page = new_page()
    page.goto(stack.http + "/")
    page.wait_for_selector(".app[data-conn=open]")
    page.click(".nav-link[data-page=jobs]")
    row = page.locator(f"#hook-runs tr[data-hook-run='{run_id}']")
    row.wait_for()
    assert row.get_attribute("data-status") == "completed"
    assert "orders (silent_agent_task)" in page.locator("#hooks-list").inner_text()
    cells = row.locator("td")
    assert cells.nth(1).locator(".device-name").inner_text() == "orders"
    assert cells.nth(2).inner_text().strip() == "completed"
    assert cells.nth(3).inner_text().strip() != "—"  # it has ended
    shown = cells.nth(4).inner_text()
    assert marker in shown and '<b id="injected">bold</b>' in shown, shown  # the markup, as characters
    assert page.locator("#hook-runs img, #hook-runs script, #hook-runs b, #injected").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    assert SECRET not in page.content()
    screenshot(page, "jobs-webhooks-laptop")
    assert page_errors.errors == []
