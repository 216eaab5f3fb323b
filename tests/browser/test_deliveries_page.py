"""The Deliveries page in a real Chromium against a real web process: the outbox listed newest first,
filtered by state and channel, paged with Load more, a failed row retried in place, a refused retry
shown, hostile and secret-bearing error texts shown as masked text."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from picobot.cli.embedded_redis import free_port
from picobot.storage import outbox
from picobot.storage.db import Database
from tests.browser.conftest import LAPTOP, PHONE, screenshot
from tests.stack import API_KEY, Stack, base_config

pytestmark = pytest.mark.slow

EVIL = "<img src=x onerror=document.body.dataset.pwned=1>"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    port = free_port()
    s = Stack(tmp_path_factory.mktemp("deliveriesui"), fake_llm.url, config=base_config(fake_llm.url, port))
    s.port = port
    try:
        s.start_web()  # no worker: a retried row stays pending, where the page shows it
        yield s
    finally:
        s.stop()


@pytest.fixture
def db(stack: Stack) -> Iterator[Database]:
    d = Database(stack.database_url)
    yield d
    d.dispose()


def add(db: Database, channel: str, chat_id: str, text: str, end: str | None = None, error: str = "") -> int:
    key = f"{channel}:{chat_id}:{text}"
    with db.begin() as conn:
        outbox.add(conn, channel, chat_id, {"text": text}, key, kind="reply")
    with db.begin() as conn:
        [row] = [r for r in outbox.latest(conn, None, 3) if r.idempotency_key == key]
        if end == "failed":
            assert outbox.mark_failed(conn, row.id, error, "400")
        elif end == "sent":
            assert outbox.mark_sent(conn, row.id, {"message_ids": ["m"]})
        elif end == "deferred":
            assert outbox.mark_deferred(conn, row.id, "outside the 24 h window", "window")
    return row.id


def rows(page: Any) -> list[str]:
    return page.eval_on_selector_all("#deliveries-table tbody tr", "rs => rs.map(r => r.dataset.delivery)")


def test_deliveries_page_filters_pages_and_retries(stack: Stack, db: Database, new_page: Any,
                                                   page_errors: Any) -> None:
    page = new_page()
    page.goto(stack.http + "/#/deliveries")
    page.wait_for_selector("#deliveries-empty")  # nothing delivered yet: an empty state, not a blank page
    assert "No deliveries yet" in page.inner_text("#deliveries-empty")

    sent = [add(db, "alpha", f"chat-{i % 4}", f"hello {i}", "sent") for i in range(55)]
    failed = add(db, "beta", "chat-b", f"a reply {EVIL}", "failed",
                 f"the platform said no {EVIL} (key {API_KEY})")
    held = add(db, "beta", "chat-b", "later", "deferred")
    stale = add(db, "gamma", "chat-g", "refused again", "failed", "rejected")

    page.click("#delivery-refresh")
    page.wait_for_selector(f"#deliveries-table tr[data-delivery='{stale}']")
    assert rows(page) == [str(i) for i in [stale, held, failed, *sent[::-1]][:50]]  # newest first, one page
    page.click("#delivery-more")
    page.wait_for_function("() => document.querySelectorAll('#deliveries-table tbody tr').length === 58")
    assert rows(page)[-1] == str(sent[0]) and page.is_hidden("#delivery-more")
    assert page.get_attribute("#delivery-counts [data-count=failed]", "data-count") == "failed"
    assert page.inner_text("#delivery-counts [data-count=failed]") == "2 failed"

    page.select_option("#delivery-status", "failed")
    page.wait_for_function("() => document.querySelectorAll('#deliveries-table tbody tr').length === 2")
    row = page.locator(f"#deliveries-table tr[data-delivery='{failed}']")
    shown = row.inner_text()
    assert "the platform said no <img src=x" in shown and API_KEY not in shown and "********" in shown
    assert "beta" in shown and "chat-b" in shown and "reply" in shown
    assert page.locator("#deliveries-table img").count() == 0
    assert page.evaluate("() => document.body.dataset.pwned") is None

    page.select_option("#delivery-status", "")
    page.select_option("#delivery-channel", "beta")
    # the failed-only table also has two rows: wait for beta's own (its deferred row), not any two
    page.wait_for_selector(f"#deliveries-table tr[data-delivery='{held}']")
    page.wait_for_function("() => document.querySelectorAll('#deliveries-table tbody tr').length === 2")
    assert rows(page) == [str(held), str(failed)]
    assert page.inner_text("#delivery-counts").split() == ["1", "failed", "1", "deferred"]  # beta's own counts
    assert page.locator(f"tr[data-delivery='{held}'] [data-role=state]").inner_text() == "deferred"
    assert page.locator(f"tr[data-delivery='{held}'] [data-action=retry]").count() == 0  # only failed rows
    screenshot(page, "deliveries-laptop")
    page.set_viewport_size(PHONE)
    assert page.evaluate("() => document.scrollingElement.scrollWidth <= window.innerWidth")  # no sideways page
    page.wait_for_timeout(400)  # the sidebar's slide-out, for the picture only
    screenshot(page, "deliveries-phone")
    page.set_viewport_size(LAPTOP)

    row.locator("[data-action=retry]").click()
    page.wait_for_selector(f"#deliveries-table tr[data-delivery='{failed}'][data-status=pending]")
    assert page.locator(f"tr[data-delivery='{failed}'] [data-role=attempts]").inner_text() == "0"
    assert page.locator(f"tr[data-delivery='{failed}'] [data-action=retry]").count() == 0
    with db.connect() as conn:
        assert outbox.status_of(conn, failed) == "pending"

    page.select_option("#delivery-channel", "gamma")
    page.wait_for_selector(f"#deliveries-table tr[data-delivery='{stale}'][data-status=failed]")
    with db.begin() as conn:  # someone else retries it first: the page's retry is refused, and says why
        assert outbox.retry(conn, stale) is not None
    page.click(f"tr[data-delivery='{stale}'] [data-action=retry]")
    page.wait_for_selector(f"tr[data-delivery='{stale}'] [data-role=retry-error]")
    assert "only failed ones are retried" in page.inner_text(f"tr[data-delivery='{stale}'] [data-role=retry-error]")

    page.select_option("#delivery-channel", "")
    page.select_option("#delivery-status", "failed")
    page.wait_for_selector("#deliveries-empty")
    assert "No deliveries match these filters" in page.inner_text("#deliveries-empty")
    assert [e for e in page_errors.errors if "status of 409" not in e] == []


def test_an_unpaired_browser_never_sees_the_deliveries(stack: Stack, browser: Any) -> None:
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        resp = page.goto(stack.http + "/#/deliveries")
        assert resp.status == 401 and page.locator("#deliveries-table").count() == 0
        assert page.request.get(stack.http + "/api/deliveries").status == 401
    finally:
        ctx.close()
