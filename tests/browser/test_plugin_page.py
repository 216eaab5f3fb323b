"""A page a plugin registers (`picobot_pages`), in a real Chromium: its link in the navigation, its module
loaded on the first visit through the app's own helpers (ctx.h, ctx.api), and a page id that cannot take a
built-in page's place."""

from __future__ import annotations

import textwrap
from typing import Any, Iterator

import pytest

from picobot.cli.embedded_redis import free_port
from tests.browser.conftest import screenshot
from tests.stack import Stack, base_config

pytestmark = pytest.mark.slow

PLUGIN = '''
from pathlib import Path

from picobot.plugins import hookimpl

HERE = Path(__file__).resolve().parent


@hookimpl
def picobot_pages(register):
    register("board", "Team board", str(HERE / "teamboard.js"), icon="bars", group="manage")
'''

PAGE = """export function createPage(ctx) {
  const { el, body } = ctx.pageFrame("team-board", "Team board", "What this server loaded, as a plugin's page shows it.");
  const list = ctx.h("ul", { id: "board-plugins" });
  body.append(ctx.h("div", { class: "card" }, list));
  async function show() {
    try {
      const { plugins } = await ctx.api("/api/plugins");
      list.replaceChildren(...plugins.map((p) => ctx.h("li", { dataset: { name: p.name } }, p.name)));
    } catch (err) {
      body.replaceChildren(ctx.errorBox(err));
    }
  }
  return { el, show };
}
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    port = free_port()
    s = Stack(tmp_path_factory.mktemp("pluginpage"), fake_llm.url, config=base_config(fake_llm.url, port))
    s.port = port
    folder = s.home / "plugins"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "teamboard.py").write_text(textwrap.dedent(PLUGIN))
    (folder / "teamboard.js").write_text(PAGE)
    try:
        s.start_web()
        yield s
    finally:
        s.stop()


def test_a_plugins_page_is_in_the_navigation_and_opens(stack: Stack, new_page: Any, page_errors: Any) -> None:
    page = new_page()
    page.goto(stack.http + "/")
    page.wait_for_selector(".app[data-conn=open]")
    link = page.locator(".nav-manage .nav-link[data-page=teamboard-board]")
    link.wait_for()
    assert link.inner_text().strip() == "Team board"
    link.click()
    page.wait_for_selector("#team-board-page li[data-name=teamboard]")
    assert page.title() == "Team board · PicoBot"
    screenshot(page, "plugin-page")
    page.goto(stack.http + "/#/teamboard-board")  # a deep link opens it once the list has come
    page.wait_for_selector("#team-board-page li[data-name=teamboard]")
    assert page_errors.errors == []
