"""The MCP page in a real Chromium, against a stack whose worker runs a good and a broken MCP server."""

from __future__ import annotations

import sys
from typing import Any, Iterator

import pytest

from picobot.cli.embedded_redis import free_port
from tests.browser.conftest import PHONE, screenshot
from tests.stack import ROOT, Stack, base_config

pytestmark = pytest.mark.slow

DEMO = str(ROOT / "scripts" / "mcp_demo.py")
NAME = "Demo <img src=x onerror=document.body.dataset.pwned=1>"  # shown as text, never as markup


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    """This module's stack: the demo server, one that crashes at start, and a disabled one."""
    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["mcpServers"] = {
        "demo": {"command": sys.executable, "args": [DEMO, "--bad-schema"], "name": NAME},
        "broken": {"command": sys.executable, "args": [DEMO, "--crash-at-start"]},
        "off": {"command": sys.executable, "args": [DEMO], "isActive": False},
    }
    s = Stack(tmp_path_factory.mktemp("mcpui"), fake_llm.url, config=cfg)
    s.port = port
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def test_mcp_page_shows_state_tools_and_errors(stack: Stack, new_page: Any, page_errors: Any) -> None:
    page = new_page()
    page.goto(stack.http + "/")
    page.wait_for_selector(".app[data-conn=open]")
    page.click(".nav-link[data-page=mcp]")
    page.wait_for_selector("#mcp-servers")
    demo = page.locator(".check[data-server=demo][data-state=connected]")
    demo.wait_for(timeout=60_000)  # the worker connects in the background; the page polls
    assert "6 tool(s)" in demo.inner_text()
    assert NAME in demo.inner_text()
    assert page.evaluate("() => document.body.dataset.pwned") is None
    assert "broken" in demo.locator(".mcp-failed-tools").inner_text()
    broken = page.locator(".check[data-server=broken]")
    page.wait_for_function(
        "() => /process exited/.test(document.querySelector('.check[data-server=broken] [data-role=error]')?.innerText || '')",
        timeout=60_000)
    assert "bad" in broken.get_attribute("class")
    assert page.locator(".check[data-server=off][data-state=disabled]").count() == 1
    screenshot(page, "mcp-laptop")
    phone = new_page(PHONE)
    phone.goto(stack.http + "/#/mcp")
    phone.wait_for_selector(".check[data-server=demo][data-state=connected]")
    phone.wait_for_timeout(300)  # the drawer's slide
    assert phone.locator(".check[data-server=demo]").bounding_box()["width"] <= PHONE["width"]
    screenshot(phone, "mcp-phone")
    assert page_errors.errors == []
