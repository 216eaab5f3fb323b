"""The Usage page in a real Chromium against a real web process: a bar per day for tokens and for cost,
scaled to the busiest day, a 7/30/90-day range selector, and the spend by user, agent, model and job —
stored names shown as text, never as markup."""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta, timezone
from typing import Any, Iterator

import pytest
from sqlalchemy import insert

from picobot.cli.embedded_redis import free_port
from picobot.storage.db import Database
from picobot.storage.models import UsageRow
from tests.browser.conftest import PHONE, screenshot
from tests.stack import Stack, base_config

pytestmark = pytest.mark.slow

EVIL = "web:<img src=x onerror=document.body.dataset.pwned=1>"


def today() -> date:
    """The server's UTC day, read when a test runs (a module constant goes stale when the suite crosses midnight)."""
    return datetime.now(timezone.utc).date()


def day(ago: int) -> str:
    return (today() - timedelta(days=ago)).isoformat()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    port = free_port()
    s = Stack(tmp_path_factory.mktemp("usageui"), fake_llm.url, config=base_config(fake_llm.url, port))
    s.port = port
    try:
        s.start_web()
        yield s
    finally:
        s.stop()


@pytest.fixture
def db(stack: Stack) -> Iterator[Database]:
    d = Database(stack.database_url)
    yield d
    d.dispose()


def seed(db: Database, ago: int, user: str, tokens: int, cost: float, **more: Any) -> None:
    row = {"created_at": time.time(), "day": day(ago), "kind": "turn", "session_id": f"{user}:default",
           "turn_id": None, "run_id": None, "job_id": None, "channel": user.split(":")[0], "user": user,
           "agent": "default", "provider": "default", "model": "fake-model", "input_tokens": tokens,
           "output_tokens": 0, "cached_input_tokens": 0, "cost_usd": cost, **more}
    with db.begin() as conn:
        conn.execute(insert(UsageRow), [row])


def bars(page: Any, chart: str) -> list[tuple[str, float, float]]:
    """(day, value, height) of each bar of a chart, left to right."""
    return page.eval_on_selector_all(f"#{chart} rect", "rs => rs.map(r => [r.dataset.day, Number(r.dataset.value), "
                                                       "Number(r.getAttribute('height'))])")


def table(page: Any, dim: str) -> list[list[str]]:
    return page.eval_on_selector_all(f"#usage-by-{dim} tbody tr",
                                     "rs => rs.map(r => [...r.cells].map(c => c.innerText.trim()))")


def test_usage_page_charts_days_and_tables(stack: Stack, db: Database, new_page: Any, page_errors: Any) -> None:
    page = new_page()
    page.goto(stack.http + "/")
    page.click(".nav-link[data-page=usage]")  # listed in the navigation's Manage section
    page.wait_for_selector("#usage-tokens-chart")
    assert len(bars(page, "usage-tokens-chart")) == 30  # the default range, every day a slot, all empty
    assert all(h == 0 for _, _, h in bars(page, "usage-tokens-chart"))
    assert "no model calls in this range" in page.inner_text("#usage-by-user")

    seed(db, 0, "web:alice", 4000, 0.04)
    seed(db, 2, "telegram:9", 1000, 0.30, agent="helper", provider="anthropic", model="claude-q", job_id="nightly")
    seed(db, 2, EVIL, 1000, 0.01)
    seed(db, 20, "web:alice", 500, 0.005)  # inside 30 days, outside 7
    page.select_option("#usage-range", "7")
    page.wait_for_function("() => document.querySelectorAll('#usage-tokens-chart rect').length === 7")
    tokens = bars(page, "usage-tokens-chart")
    assert [d for d, _, _ in tokens] == [day(n) for n in range(6, -1, -1)]
    assert [v for _, v, _ in tokens] == [0, 0, 0, 0, 2000, 0, 4000]
    assert [h for _, _, h in tokens] == [0, 0, 0, 0, 50, 0, 100]  # heights are shares of the busiest day
    cost = bars(page, "usage-cost-chart")
    assert [h for _, _, h in cost][4] == 100 and round(cost[6][2], 3) == round(100 * 0.04 / 0.31, 3)
    assert page.inner_text("#usage-total [data-role=cost]") == "$0.3500 estimated"
    assert page.inner_text("#usage-total [data-role=calls]") == "3 calls"

    assert table(page, "user") == [["telegram:9", "1", "1.0k", "0", "0", "$0.3000"],
                                   ["web:alice", "1", "4.0k", "0", "0", "$0.0400"],
                                   [EVIL, "1", "1.0k", "0", "0", "$0.0100"]]  # the most spent first
    assert [r[0] for r in table(page, "agent")] == ["helper", "default"]
    assert [r[0] for r in table(page, "model")] == ["anthropic:claude-q", "default:fake-model"]
    assert [r[0] for r in table(page, "job")] == ["nightly", "(no job: chats)"]
    assert page.locator("#usage-page img").count() == 0
    assert page.evaluate("() => document.body.dataset.pwned") is None

    page.select_option("#usage-range", "90")
    page.wait_for_function("() => document.querySelectorAll('#usage-tokens-chart rect').length === 90")
    assert [r[:2] for r in table(page, "user")][1] == ["web:alice", "2"]  # the older call is in range now
    screenshot(page, "usage-laptop")
    page.set_viewport_size(PHONE)
    assert page.evaluate("() => document.scrollingElement.scrollWidth <= window.innerWidth")  # no sideways page
    page.wait_for_timeout(400)  # the sidebar's slide-out, for the picture only
    screenshot(page, "usage-phone")
    assert page_errors.errors == []


def test_an_unpaired_browser_never_sees_the_usage(stack: Stack, browser: Any) -> None:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        assert page.goto(stack.http + "/#/usage").status == 401
        assert page.locator("#usage-tokens-chart").count() == 0
        assert page.request.get(stack.http + "/api/usage").status == 401
    finally:
        ctx.close()
