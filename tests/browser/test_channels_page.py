"""The Channels page in a real Chromium: every channel's state, a failed delivery retried, and a WeChat
QR login done from the page against the fake iLink."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from picobot.cli.embedded_redis import free_port
from scripts.fake_wechat import FakeWeChat
from tests.browser.conftest import screenshot
from tests.stack import ROOT, Stack, base_config

pytestmark = pytest.mark.slow

EVIL = "<img src=x onerror=document.body.dataset.pwned=1>"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeWeChat]:
    f = FakeWeChat(hold_secs=0.5, qr_hold_secs=0.1).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any, fake: FakeWeChat) -> Iterator[Stack]:
    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["channels"] = {
        "wx": {"type": "wechat", "enabled": True, "base_url": fake.base_url, "cdn_base_url": fake.cdn_url},
        "sink": {"type": "tests.channel_sink:SinkAdapter", "enabled": True, "sink_url": "http://127.0.0.1:9/"},
    }
    s = Stack(tmp_path_factory.mktemp("channelsui"), fake_llm.url, config=cfg)
    s.port = port
    s.env["PYTHONPATH"] = str(ROOT)  # the web process imports the test channel type
    try:
        s.start_web()
        yield s
    finally:
        s.stop()


def _failed_delivery(stack: Stack) -> None:
    from picobot.storage import outbox
    from picobot.storage.db import Database

    db = Database(stack.database_url)
    try:
        with db.begin() as conn:
            outbox.add(conn, "sink", "chat-1", {"text": f"a reply {EVIL}"}, "k-ui-1", kind="message")
        with db.begin() as conn:
            [row] = outbox.latest(conn, None, 1)
            outbox.mark_failed(conn, row.id, f"the platform said no {EVIL}", "bad_request")
    finally:
        db.dispose()


def test_channels_page_states_retry_and_a_qr_login(stack: Stack, fake: FakeWeChat, new_page: Any,
                                                    page_errors: Any) -> None:
    _failed_delivery(stack)
    page = new_page()
    page.goto(stack.http + "/")
    page.wait_for_selector(".app[data-conn=open]")
    page.click(".nav-link[data-page=channels]")
    page.wait_for_selector("#channels")
    assert page.locator(".check[data-channel=web][data-state=live]").count() == 1
    wx = page.locator(".check[data-channel=wx][data-state=login_required]")
    wx.wait_for()
    failed = page.locator(".check[data-channel=sink] tr[data-status=failed]")
    failed.wait_for()
    assert "the platform said no" in failed.inner_text()
    assert page.evaluate("() => document.body.dataset.pwned") is None
    screenshot(page, "channels-laptop")
    failed.locator("button", has_text="Retry").click()
    page.wait_for_selector(".check[data-channel=sink] tr[data-status=pending]")
    fake.qr_plan = ["wait", "scaned", "confirmed"]
    wx.locator("button", has_text="Log in (QR)").click()
    page.wait_for_function(
        "() => ['done', 'waiting'].includes(document.querySelector('[data-channel=wx] [data-role=login-state]')?.innerText)")
    page.wait_for_selector(".check[data-channel=wx] [data-role=login-state]:text('done')", timeout=30_000)
    page.wait_for_selector(".check[data-channel=wx]:not([data-state=login_required])", timeout=30_000)
    screenshot(page, "channels-after-login")
    assert page_errors.errors == []
