"""The Sub-agent runs page in a real Chromium against a real stack (web, a worker, the fake LLM): a turn
whose agent delegates to two sub-agents, one of which delegates again, drawn as a tree; a run's result
(masked, hostile text inert) and a failed run's error opened; the status filter; a running run followed
live until it ends, and the polling stopped when the page is left."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest
import sqlalchemy

from tests.browser.conftest import LAPTOP, PHONE, screenshot
from tests.conftest import add_rule
from tests.stack import API_KEY, Stack, base_config, wait_for

pytestmark = pytest.mark.slow

EVIL = "<img src=x onerror=document.body.dataset.pwned=1>"
SLOW_MS = 5000  # a sub-agent's model call this long: the page sees the run running, then done


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    cfg = base_config(fake_llm.url, 0)
    cfg["subagents"] = {"max_iterations": 3, "max_depth": 2}
    s = Stack(tmp_path_factory.mktemp("runsui"), fake_llm.url, config=cfg)
    cfg["gateway"]["port"] = s.port
    (s.home / "config.json").write_text(json.dumps(cfg))
    try:
        s.start_web(wait=False)  # started together, then waited for
        s.start_worker("w1", concurrency=2, wait=False)
        s.wait_web()
        s.wait_workers("w1")
        yield s
    finally:
        s.stop()


def task(description: str, prompt: str) -> dict[str, Any]:
    return {"name": "task", "arguments": {"description": description, "prompt": prompt}}


def runs(stack: Stack) -> dict[str, dict[str, Any]]:
    """Every run by its description."""
    eng = sqlalchemy.create_engine(stack.database_url)
    try:
        with eng.connect() as c:
            return {r["description"]: dict(r) for r in c.exec_driver_sql("SELECT * FROM agent_runs").mappings()}
    finally:
        eng.dispose()


def tree_requests(seen: list[str]) -> int:
    return sum("/api/subagents/tree" in url for url in seen)


def test_runs_page_draws_the_tree_opens_results_and_follows_a_running_run(
        stack: Stack, llm: Any, new_page: Any, page_errors: Any) -> None:
    page = new_page()
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url))
    page.goto(stack.http + "/#/subagents")
    page.wait_for_selector("#runs-empty")
    assert "No sub-agent runs yet" in page.inner_text("#runs-empty")

    add_rule(llm, "opsparent", {"tool_calls": [task("survey the files", "opschilda: look"),
                                                    task("ask the oracle", "opschildb: ask")]},
             {"content": "parent done"})
    add_rule(llm, "opschilda", {"tool_calls": [task(f"dig deeper {EVIL}", "opsgrand: dig")]},
             {"content": "child a done"})
    add_rule(llm, "opsgrand", {"content": f"found it {EVIL} with {API_KEY}"})
    add_rule(llm, "opschildb", {"error": {"status": 400, "message": "the oracle refused", "type": "invalid_request_error"}})
    client = stack.client()
    try:
        done = client.ask("opsparent please")
        assert done["status"] == "completed", done
        by = runs(stack)
        a, b, g = by["survey the files"], by["ask the oracle"], by[f"dig deeper {EVIL}"]
        assert (a["status"], b["status"], g["status"]) == ("completed", "failed", "completed")

        page.click("#run-refresh")
        page.wait_for_selector(f".run-node[data-run='{a['id']}']")
        turn = page.locator(f".run-turn[data-turn='{done['turn_id']}']")
        assert client.session_id in turn.locator(".check-head").inner_text()
        assert turn.locator("ul.run-roots > li.run-node").count() == 2  # both started by the main agent
        nested = turn.locator(f"li[data-run='{a['id']}'] > ul.run-tree > li[data-run='{g['id']}']")
        assert nested.count() == 1 and nested.get_attribute("data-depth") == "2"
        assert page.locator(f"li[data-run='{b['id']}'] [data-role=status]").first.inner_text() == "failed"
        assert "dig deeper <img" in nested.inner_text()
        screenshot(page, "subagent-runs-laptop")

        nested.locator(".run-head").click()
        page.wait_for_selector(f".run-detail[data-run='{g['id']}']")
        result = page.inner_text(".run-detail [data-role=result]")
        assert result.startswith("found it <img src=x") and API_KEY not in result and "********" in result
        assert page.locator(".run-detail img, .run-tree img").count() == 0
        assert page.evaluate("() => document.body.dataset.pwned") is None
        assert a["id"] in page.inner_text(".run-detail")  # its parent run
        page.click(f"li[data-run='{b['id']}'] > .run-head")
        page.wait_for_selector(f".run-detail[data-run='{b['id']}'] [data-role=error]")
        assert "the oracle refused" in page.inner_text(".run-detail [data-role=error]")
        screenshot(page, "subagent-run-detail")
        page.set_viewport_size(PHONE)
        assert page.evaluate("() => document.scrollingElement.scrollWidth <= window.innerWidth")
        page.wait_for_timeout(400)  # the sidebar's slide-out, for the picture only
        screenshot(page, "subagent-runs-phone")
        page.set_viewport_size(LAPTOP)

        page.select_option("#run-status", "failed")
        page.wait_for_selector(f"li.run-node.dim[data-run='{a['id']}']")  # context of the match, dimmed
        assert page.locator(f"li.run-node[data-run='{b['id']}']:not(.dim)").count() == 1
        page.select_option("#run-status", "interrupted")
        page.wait_for_selector("#runs-empty")
        assert "No runs are interrupted" in page.inner_text("#runs-empty")
        page.select_option("#run-status", "")
        page.wait_for_selector(f".run-node[data-run='{a['id']}']")

        # a run that is still running: shown running, then followed to its end without a click
        add_rule(llm, "opsturtle", {"tool_calls": [task("slow one", "opssnail: go")]}, {"content": "turtle done"})
        add_rule(llm, "opssnail", {"content": "snail arrived", "delay_ms": SLOW_MS})
        accepted = client.say("opsturtle please")
        assert accepted["type"] == "accepted"
        wait_for(lambda: runs(stack).get("slow one", {}).get("status") == "running", 30, "the slow run never ran")
        slow = runs(stack)["slow one"]
        page.click("#run-refresh")
        page.wait_for_selector(f".run-node[data-run='{slow['id']}'][data-status=running]")
        assert page.is_visible("#run-live")
        page.click(f"li[data-run='{slow['id']}'] > .run-head")
        page.wait_for_selector(".run-detail [data-role=pending]")
        page.wait_for_selector(f".run-node[data-run='{slow['id']}'][data-status=completed]", timeout=30_000)
        page.wait_for_selector(".run-detail[data-status=completed] [data-role=result]:text('snail arrived')")
        assert page.is_hidden("#run-live")
        client.wait_completed(accepted["seq"])

        # another: the page is left while it runs, and stops asking
        add_rule(llm, "opsturtle", {"tool_calls": [task("slow two", "opssnail: again")]}, {"content": "turtle 2"})
        add_rule(llm, "opssnail", {"content": "snail two", "delay_ms": SLOW_MS})
        accepted = client.say("opsturtle again")
        wait_for(lambda: runs(stack).get("slow two", {}).get("status") == "running", 30, "the second slow run never ran")
        two = runs(stack)["slow two"]
        page.click("#run-refresh")
        page.wait_for_selector(f".run-node[data-run='{two['id']}'][data-status=running]")
        page.click(".nav-link[data-page=chat]")
        page.wait_for_selector("#chat-page")
        asked = tree_requests(seen)
        client.wait_completed(accepted["seq"])
        page.wait_for_timeout(4000)  # longer than the page's polling interval
        assert tree_requests(seen) == asked, "the page kept polling after it was left"
        page.click(".nav-link[data-page=subagents]")
        page.wait_for_selector(f".run-node[data-run='{two['id']}'][data-status=completed]")
    finally:
        client.close()
    assert [e for e in page_errors.errors if "status of 4" not in e] == []
