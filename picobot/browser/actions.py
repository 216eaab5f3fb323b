"""What each `browser` action does to a page (async Playwright, on the engine's loop thread).

Every function takes the page and the checked arguments and returns the answer's text; errors the
model can act on are ToolError. Element refs (`e1`, `e2`, ...) are `data-picobot-ref` attributes set
by `snapshot`: an element keeps its ref for as long as it stays in the page, so two snapshots of the
same DOM give the same refs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from picobot.errors import ToolError

MAX_ELEMENTS = 150
MAX_WAIT_MS = 20_000
SETTLE_MS = 3_000  # after a click or a key: how long a navigation it started may take to show its page

_INTERACTIVE = ("a[href],button,input:not([type=hidden]),select,textarea,summary,[role=button],[role=link],"
                "[role=checkbox],[role=radio],[role=tab],[role=menuitem],[role=option],[contenteditable=''],"
                "[contenteditable=true],[onclick]")

@dataclass(frozen=True)
class Step:
    """One checked `browser` call (tool.checked)."""

    action: str
    profile: str | None = None
    url: str | None = None
    ref: str | None = None
    selector: str | None = None
    text: str | None = None
    key: str | None = None
    ms: Any = None
    submit: Any = False


async def perform(page: Any, step: Step, folder: Path, max_chars: int) -> tuple[str, Path | None]:
    """The answer's text, and the screenshot's file for `screenshot`."""
    action = step.action
    if action == "screenshot":
        return await screenshot(page, folder)
    if action == "navigate":
        return await navigate(page, step.url or "", max_chars), None
    if action == "snapshot":
        return await snapshot(page, max_chars), None
    if action == "click":
        return await click(page, step.ref, step.selector), None
    if action == "type":
        return await type_text(page, step.ref, step.selector, step.text or "", bool(step.submit)), None
    if action == "press":
        return await press(page, step.key or ""), None
    if action == "back":
        return await back(page), None
    return await wait(page, step.text, step.ms), None


# Visible interactive elements as [ref, kind, label, value or href]; refs already given are kept.
_SNAPSHOT_JS = """([selector, max]) => {
  const root = document.documentElement;
  let next = parseInt(root.getAttribute('data-picobot-next') || '1', 10);
  const out = [];
  const clip = (s, n) => (s || '').replace(/\\s+/g, ' ').trim().slice(0, n);
  for (const el of document.querySelectorAll(selector)) {
    const box = el.getBoundingClientRect(); const st = getComputedStyle(el);
    if ((!box.width && !box.height) || st.visibility === 'hidden' || st.display === 'none') continue;
    let ref = el.getAttribute('data-picobot-ref');
    if (!ref) { ref = 'e' + next++; el.setAttribute('data-picobot-ref', ref); }
    const tag = el.tagName.toLowerCase();
    const kind = el.getAttribute('role') || (tag === 'a' ? 'link' : tag === 'input' ? 'input:' + (el.type || 'text') : tag);
    const field = tag === 'input' || tag === 'textarea' || tag === 'select';
    const label = clip(el.getAttribute('aria-label') || (field ? (el.placeholder || el.name || el.id) : el.innerText)
                       || el.title || el.alt || el.name, 80);
    let extra = tag === 'a' ? el.getAttribute('href') : (field && el.type !== 'password' ? el.value : '');
    out.push([ref, kind, label, clip(extra, 120)]);
    if (out.length >= max) break;
  }
  root.setAttribute('data-picobot-next', String(next));
  return out;
}"""


async def page_text(page: Any, max_chars: int) -> str:
    """The rendered page's visible text (after JavaScript), cut at max_chars."""
    try:
        text = await page.evaluate("() => document.body ? document.body.innerText : ''")
    except Exception:  # a page mid-navigation has no body to read yet
        text = ""
    text = "\n".join(line.strip() for line in str(text).splitlines() if line.strip())
    return text if len(text) <= max_chars else text[:max_chars] + f"\n[... {len(text) - max_chars} more characters]"


async def heading(page: Any) -> str:
    try:
        title = await page.title()
    except Exception:
        title = ""
    return f"Title: {title}\nURL: {page.url}"


async def navigate(page: Any, url: str, max_chars: int) -> str:
    await page.goto(url, wait_until="load")
    return f"{await heading(page)}\n\n{await page_text(page, max_chars)}"


async def snapshot(page: Any, max_chars: int) -> str:
    rows = await page.evaluate(_SNAPSHOT_JS, [_INTERACTIVE, MAX_ELEMENTS])
    lines = [f"[{ref}] {kind} {label!r}" + (f" -> {extra}" if extra else "") for ref, kind, label, extra in rows]
    elements = "\n".join(lines) if lines else "(no interactive elements)"
    return f"{await heading(page)}\n\nElements:\n{elements}\n\nText:\n{await page_text(page, max_chars)}"


def _target(page: Any, ref: str | None, selector: str | None) -> Any:
    if ref:
        return page.locator(f'[data-picobot-ref="{ref}"]').first
    if selector:
        return page.locator(selector).first
    raise ToolError("Give `ref` (from a snapshot) or `selector`.")


async def _settled(page: Any) -> None:
    """Let a navigation the action started reach its page (bounded; a click that did not navigate returns at once)."""
    try:
        await page.wait_for_load_state("load", timeout=SETTLE_MS)
    except Exception:  # still loading: the answer shows what is there now
        pass


async def click(page: Any, ref: str | None, selector: str | None) -> str:
    await _target(page, ref, selector).click()
    await _settled(page)
    return f"Clicked.\n{await heading(page)}"


async def type_text(page: Any, ref: str | None, selector: str | None, text: str, submit: bool) -> str:
    target = _target(page, ref, selector)
    await target.fill(text)
    if submit:
        await target.press("Enter")
        await _settled(page)
    return f"Typed {len(text)} characters{' and pressed Enter' if submit else ''}.\n{await heading(page)}"


async def press(page: Any, key: str) -> str:
    await page.keyboard.press(key)
    await _settled(page)
    return f"Pressed {key}.\n{await heading(page)}"


async def back(page: Any) -> str:
    response = await page.go_back(wait_until="load")
    return f"{'Went back' if response is not None else 'No earlier page'}.\n{await heading(page)}"


async def wait(page: Any, text: str | None, ms: int | None) -> str:
    if text:
        limit = min(ms or MAX_WAIT_MS, MAX_WAIT_MS)
        try:
            await page.get_by_text(text).first.wait_for(state="visible", timeout=limit)
        except Exception as exc:
            if type(exc).__name__ != "TimeoutError":
                raise
            raise ToolError(f"The text did not appear within {limit} ms.") from None
        return f"The text appeared.\n{await heading(page)}"
    await asyncio.sleep(min(ms or 1000, MAX_WAIT_MS) / 1000)
    return f"Waited {min(ms or 1000, MAX_WAIT_MS)} ms.\n{await heading(page)}"


async def screenshot(page: Any, folder: Path) -> tuple[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.png"
    await page.screenshot(path=str(path), type="png")
    return f"Screenshot saved as {path.name} (in screenshots/).\n{await heading(page)}", path
