"""Browser fixtures: Debian's Chromium driven headless by Playwright, against the real stack.

Chromium comes from `scripts/install-browser` (apt); Playwright never downloads a browser.
Each test gets a fresh browser context (so a fresh per-browser chat id) carrying the
pairing cookie of a device paired once per module through the real pairing page.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.stack import ROOT, Stack

CHROMIUM = os.environ.get("PICOBOT_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
ARTIFACTS = ROOT / "test-artifacts"
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: scripts/install-browser should have installed it")
        pytest.skip(f"{CHROMIUM} is missing; run scripts/install-browser")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def pairing_url(stack: Stack) -> str:
    r = stack.cli("pair", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["url"]


def pair_through_page(page: Any, stack: Stack, name: str = "") -> None:
    page.goto(pairing_url(stack))
    if name:
        page.fill("#name", name)
    page.click("#pair-submit")
    page.wait_for_selector("#chat-page")


@pytest.fixture(scope="module")
def paired_cookies(stack: Stack, browser: Any) -> list[dict[str, Any]]:
    """Cookies of a browser paired through /pair (once per module)."""
    ctx = browser.new_context(viewport=LAPTOP)
    page = ctx.new_page()
    pair_through_page(page, stack, "module browser")
    cookies = ctx.cookies()
    ctx.close()
    return cookies


class PageErrors:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def attach(self, page: Any) -> None:
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error"
                and "status of 401" not in m.text else None)


@pytest.fixture
def page_errors() -> PageErrors:
    return PageErrors()


@pytest.fixture
def new_page(browser: Any, paired_cookies: list[dict[str, Any]], page_errors: PageErrors) -> Iterator[Any]:
    """new_page(viewport=LAPTOP) -> a paired page on a fresh context (its own chat)."""
    contexts: list[Any] = []

    def make(viewport: dict[str, int] = LAPTOP) -> Any:
        ctx = browser.new_context(viewport=viewport)
        ctx.add_cookies(paired_cookies)
        contexts.append(ctx)
        page = ctx.new_page()
        page_errors.attach(page)
        return page

    yield make
    for ctx in contexts:
        ctx.close()


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"web-{re.sub(r'[^a-z0-9-]', '-', name.lower())}.png"
    page.screenshot(path=str(path))
    return path
