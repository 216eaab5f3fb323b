"""The Agents page in a real Chromium: config and file agents, a broken file's error, an edit shown on reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from picobot.cli.embedded_redis import free_port
from tests.browser.conftest import PHONE, screenshot
from tests.stack import Stack, base_config

pytestmark = pytest.mark.slow

HOSTILE = "<img src=x onerror=document.body.dataset.pwned=1>"  # shown as text, never as markup


def _write(home: Path, name: str, text: str) -> None:
    (home / "agents").mkdir(parents=True, exist_ok=True)
    (home / "agents" / name).write_text(text)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("agentsui")
    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["models"]["big"] = {"model_id": "big-model"}
    _write(tmp / "home", "coder.md", f"---\ndescription: '{HOSTILE}'\nmodel: default:big\ntools: [read, task]\n"
                                     "delegates: []\n---\nYou write code.\n")
    _write(tmp / "home", "broken.md", "---\ndescription: x\nskills: 3\n---\n")
    s = Stack(tmp, fake_llm.url, config=cfg)
    s.port = port
    try:
        s.start(workers=0, beat=False)
        yield s
    finally:
        s.stop()


def test_agents_page_lists_agents_allowlists_and_load_errors(stack: Stack, new_page: Any, page_errors: Any) -> None:
    page = new_page()
    page.goto(stack.http + "/")
    page.wait_for_selector(".app[data-conn=open]")
    page.click(".nav-link[data-page=agents]")
    page.wait_for_selector("#agents-table")
    coder = page.locator("tr[data-agent=coder][data-source=file]")
    assert coder.locator("[data-role=model]").inner_text() == "default:big"
    assert coder.locator("[data-role=tools]").inner_text() == "read, task"
    assert coder.locator("[data-role=skills]").inner_text() == "any"
    assert coder.locator("[data-role=delegates]").inner_text() == "none"
    assert HOSTILE in coder.inner_text() and page.evaluate("() => document.body.dataset.pwned") is None
    assert page.locator("tr[data-agent=default][data-source=config]").count() == 1
    error = page.locator("tr[data-agent-error=broken] [data-role=error]").inner_text()
    assert "line 3" in error and "'skills' must be a list" in error
    screenshot(page, "agents-laptop")

    _write(stack.home, "broken.md", "---\ndescription: fixed now\n---\nok\n")  # no restart
    page.reload()
    page.wait_for_selector("tr[data-agent=broken][data-source=file]")
    assert page.locator("#agent-errors").count() == 0

    phone = new_page(PHONE)
    phone.goto(stack.http + "/#/agents")
    phone.wait_for_selector("tr[data-agent=coder]")
    screenshot(phone, "agents-phone")
    assert page_errors.errors == []
