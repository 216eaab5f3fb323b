"""The Skills page in a real Chromium against a real stack: list, disable, view and edit."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.stack import Stack

pytestmark = pytest.mark.slow

SKILL = """---
description: Plan a picnic when the user asks for one
---

Pack the basket. PICNIC-OLD-LINE
"""


def test_skills_page_lists_disables_and_edits(stack: Stack, new_page: Any, page_errors: Any) -> None:
    folder = stack.home / "skills" / "picnic"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(SKILL, encoding="utf-8")
    page = new_page()
    page.goto(stack.http + "/")
    page.wait_for_selector(".app[data-conn=open]")
    page.click(".nav-link[data-page=skills]")
    row = page.locator("#skills-table tr[data-skill=picnic]")
    row.wait_for()
    assert "Plan a picnic" in row.inner_text() and "user" in row.inner_text()
    assert "enabled" in row.locator(".chip.state").inner_text()
    assert page.locator("#skills-table tr[data-skill=skill-authoring]").count() == 1  # the built-in skill
    screenshot(page, "skills-laptop")

    row.locator("button.toggle").click()
    page.wait_for_function("() => /disabled/.test(document.querySelector("
                           "'#skills-table tr[data-skill=picnic] .chip.state')?.textContent || '')")
    state = (stack.home.parent / "home-workspace" / ".picobot" / "skill-state.json")
    assert "picnic" in state.read_text()  # disabled in the project scope by default
    page.locator("#skills-table tr[data-skill=picnic] button.toggle").click()
    page.wait_for_function("() => /^enabled/.test(document.querySelector("
                           "'#skills-table tr[data-skill=picnic] .chip.state')?.textContent || '')")

    page.locator("#skills-table tr[data-skill=picnic] button.view").click()
    page.wait_for_selector(".skill-detail[data-skill=picnic] #skill-editor")
    text = page.input_value("#skill-editor")
    assert "PICNIC-OLD-LINE" in text
    page.fill("#skill-editor", text.replace("PICNIC-OLD-LINE", "PICNIC-NEW-LINE"))
    page.click("#skill-save")
    page.wait_for_function("() => /^Saved/.test(document.querySelector('#skill-status').textContent)")
    assert "PICNIC-NEW-LINE" in (folder / "SKILL.md").read_text(encoding="utf-8")
    page.fill("#skill-editor", "no frontmatter at all")
    page.click("#skill-save")
    page.wait_for_function("() => /^Not saved/.test(document.querySelector('#skill-status').textContent)")
    assert "PICNIC-NEW-LINE" in (folder / "SKILL.md").read_text(encoding="utf-8")
    screenshot(page, "skill-edit-laptop")
    page.click("#skill-back")
    page.wait_for_selector("#skills-table tr[data-skill=picnic]")
    assert [e for e in page_errors.errors if "status of 400" not in e] == []
