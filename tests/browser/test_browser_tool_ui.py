"""The web UI shows the screenshot the agent's `browser` tool took under the answer: real Chromium for the
UI, a real stack whose worker runs its own Chromium for the tool, and a local site on 127.0.0.1."""

from __future__ import annotations

import threading
import uuid
from typing import Any, Iterator

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_web_ui import open_chat, send, wait_idle
from tests.conftest import add_rule
from tests.stack import Stack, base_config
from tests.test_browser_tool import ALLOW, TEST_ARGS, Refused, Site

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    refused = Refused()
    s = Site(refused)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield s
    s.shutdown()
    refused.sock.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    """This module's stack: its worker's pages may reach 127.0.0.1 (the local site)."""
    from picobot.cli.embedded_redis import free_port

    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["tools"] = {"network": {"allow": ALLOW}}
    cfg["browser"] = {"extra_args": TEST_ARGS}
    s = Stack(tmp_path_factory.mktemp("browser-ui"), fake_llm.url, config=cfg)
    s.port = port
    try:
        s.start(workers=1, beat=False)
        yield s
    finally:
        s.stop()


def test_the_answer_shows_the_tools_screenshot(stack: Stack, llm: Any, site: Site, new_page: Any,
                                               page_errors: Any) -> None:
    token = uuid.uuid4().hex[:8]
    add_rule(llm, token,
             {"tool_calls": [{"name": "browser", "arguments": {"action": "navigate", "url": f"{site.base}/b"}}]},
             {"tool_calls": [{"name": "browser", "arguments": {"action": "screenshot"}}]},
             {"content": "Here is page B."})
    page = new_page()
    open_chat(page, stack)
    send(page, f"{token} show me page B")
    wait_idle(page, 60_000)
    image = page.locator(".msg.assistant img.attachment").last
    image.wait_for(timeout=20_000)
    assert image.get_attribute("src").startswith("data:image/png;base64,")
    page.wait_for_function("() => [...document.querySelectorAll('.msg.assistant img.attachment')]"
                           ".some(i => i.complete && i.naturalWidth === 1280)")  # the tool's viewport
    screenshot(page, "browser-tool-screenshot")
    assert not page_errors.errors, page_errors.errors
