"""The Config page's editor in a real Chromium against a real web process: change a prompt and a limit,
save, see which processes need a restart; a bad value is refused in place with its key; a file changed
elsewhere meanwhile gives a 409 and a Reload; no secret reaches the page."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest

from scripts.fake_llm import FakeLLM
from tests.browser.conftest import screenshot
from tests.stack import API_KEY, Stack
from tests.http_client import HTTP

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("config-page"), fake_llm.url)
    try:
        s.start_web()  # the editor needs only the web process
        yield s
    finally:
        s.stop()


def field(page: Any, key: str) -> Any:
    return page.locator(f".cfg-row[data-key='{key}'] .cfg-input")


def open_editor(page: Any, stack: Stack) -> None:
    page.goto(stack.http + "/#/config")
    page.wait_for_selector("#config-editor .cfg-row")


def test_config_editor_saves_refuses_and_detects_a_stale_page(stack: Stack, new_page: Any, page_errors: Any) -> None:
    page = new_page()
    open_editor(page, stack)
    assert API_KEY not in page.content() and "S3CRETKEY" not in page.content()
    assert page.locator(".cfg-row[data-key^='providers']").count() == 0

    field(page, "agents.default.system_prompt").fill("Answer like a pirate. <script>window.__pwned=1</script>")
    field(page, "gateway.rate_limits.messages_per_chat_per_minute").fill("9")
    page.click("#cfg-save")
    page.wait_for_selector("#cfg-saved")
    assert "restart" in page.inner_text("#cfg-saved") and "workers" in page.inner_text("#cfg-saved")
    saved = json.loads((stack.home / "config.json").read_text())
    assert saved["agents"]["default"]["system_prompt"] == "Answer like a pirate. <script>window.__pwned=1</script>"
    assert saved["gateway"]["rate_limits"]["messages_per_chat_per_minute"] == 9
    assert saved["providers"]["default"]["api_key"] == "${PICOBOT_TEST_KEY}"  # untouched, still a placeholder
    row = page.locator(".cfg-row[data-key='agents.default.system_prompt']")
    assert row.get_attribute("data-pending") == "true"  # saved; this web process still runs the old value
    assert field(page, "agents.default.system_prompt").input_value().startswith("Answer like a pirate.")
    assert page.evaluate("() => window.__pwned") is None
    screenshot(page, "config-edit-laptop")

    field(page, "memory.recall_limit").fill("999")
    page.click("#cfg-save")
    page.wait_for_selector("#cfg-status [data-code=invalid_config]")
    assert "less than or equal to 50" in page.inner_text(".cfg-row[data-key='memory.recall_limit'] [data-role=error]")
    assert json.loads((stack.home / "config.json").read_text()).get("memory") is None  # nothing written

    field(page, "memory.recall_limit").fill("3")
    version = HTTP.get(stack.http + "/api/config/editable", headers={"Authorization": f"Bearer {stack.token}"},
                        timeout=10).json()["version"]
    r = HTTP.patch(stack.http + "/api/config", json={"skills.enabled": False}, timeout=10,
                    headers={"Authorization": f"Bearer {stack.token}", "If-Match": f'"{version}"'})
    assert r.status_code == 200  # someone else saved meanwhile
    page.click("#cfg-save")
    page.wait_for_selector("#cfg-status [data-code=version_mismatch]")
    page.click("#cfg-reload")
    page.wait_for_function("() => document.querySelector(\".cfg-row[data-key='skills.enabled'] .cfg-input\")?.value === 'false'")
    assert field(page, "memory.recall_limit").input_value() == "5"  # the reloaded page shows the file, not the draft
    assert [e for e in page_errors.errors if "status of 400" not in e and "status of 409" not in e] == []
