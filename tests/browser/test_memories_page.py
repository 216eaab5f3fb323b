"""The Memories and Knowledge pages in a real Chromium against a real stack."""

from __future__ import annotations

from typing import Any

import pytest

from picobot.memory import MemorySource, MemoryStore
from picobot.storage.db import Database
from tests.browser.conftest import screenshot
from tests.stack import Stack

pytestmark = pytest.mark.slow


def test_memories_page_searches_edits_and_deletes(stack: Stack, new_page: Any, page_errors: Any) -> None:
    db = Database(stack.database_url)
    try:
        store = MemoryStore(db)
        tea = store.put("owner", "prefs", "tea", "Drinks 乌龙茶 without sugar", importance=0.8,
                        source=MemorySource(session_id="web:c1:d1", channel="web", chat_id="c1"))
        store.put("owner", "work", "editor", "Uses vim keybindings")
    finally:
        db.dispose()
    doc = stack.home / "knowledge" / "garden" / "content.md"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text("# Garden\n\nWater the tomatoes every morning.\n", encoding="utf-8")

    page = new_page()
    page.goto(stack.http + "/")
    page.wait_for_selector(".app[data-conn=open]")
    page.click(".nav-link[data-page=memories]")
    page.wait_for_selector(f"#memories-table tr[data-memory='{tea.id}']")
    page.fill("#memory-query", "乌龙茶")
    page.press("#memory-query", "Enter")
    page.wait_for_function("() => document.querySelectorAll('#memories-table tbody tr').length === 1")
    screenshot(page, "memories-laptop")
    page.locator(f"#memories-table tr[data-memory='{tea.id}'] button.view").click()
    page.wait_for_selector("#memory-editor")
    assert "web:c1:d1" in page.inner_text("#memory-source")
    page.fill("#memory-editor", "Drinks green tea now")
    page.click("#memory-save")
    page.wait_for_function("() => /^Saved/.test(document.querySelector('#memory-status').textContent)")
    page.on("dialog", lambda d: d.accept())
    page.click("#memory-delete")
    page.wait_for_selector("#memories-table")
    # the list is redrawn after the delete answers: wait for the row to go, then check it stays gone
    page.wait_for_selector(f"#memories-table tr[data-memory='{tea.id}']", state="detached")
    assert page.locator(f"#memories-table tr[data-memory='{tea.id}']").count() == 0

    page.click(".nav-link[data-page=knowledge]")
    page.wait_for_selector("#knowledge-table tr[data-doc=garden]")
    page.fill("#knowledge-query", "tomatoes")
    page.press("#knowledge-query", "Enter")
    page.wait_for_function("() => /tomatoes/.test(document.querySelector('#knowledge-table')?.textContent || '')")
    page.locator("#knowledge-table tr[data-doc=garden] button.view").click()
    page.wait_for_selector("#knowledge-content")
    assert "Water the tomatoes" in page.inner_text("#knowledge-content")
    assert page_errors.errors == []
