"""The web UI in a real Chromium against a real stack (web, worker, beat, Redis) and the fake LLM.

Screenshots of the main pages land in test-artifacts/ (laptop 1280x800 and phone 390x844).
"""

from __future__ import annotations

import base64
import re
import time
from typing import Any

import httpx
import pytest

from tests.browser.conftest import LAPTOP, PHONE, pair_through_page, pairing_url, screenshot
from tests.conftest import add_rule
from tests.stack import API_KEY, Stack
from tests.http_client import HTTP

pytestmark = pytest.mark.slow

IDLE = """() => !document.querySelector('.turn.live') &&
  ![...document.querySelectorAll('.pending .msg.user .chip')].some(c => /sending|started|steered|queued/.test(c.className))"""
# A 1x1 PNG, as a file the composer's file input receives.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")


def open_chat(page: Any, stack: Stack) -> None:
    page.goto(stack.http + "/")
    page.wait_for_selector("body[data-history-painted]")
    page.wait_for_selector(".app[data-conn=open]")


def send(page: Any, text: str) -> None:
    page.fill("#composer-input", text)
    page.keyboard.press("Enter")


def wait_idle(page: Any, timeout: float = 30_000) -> None:
    page.wait_for_function(IDLE, timeout=timeout)


def user_texts(page: Any) -> list[str]:
    # textContent, not innerText: off-screen messages skip rendering (content-visibility: auto)
    return page.locator(".messages .msg.user .user-text").all_text_contents()


def test_unpaired_browser_gets_401_and_pairs_with_a_one_time_code(stack: Stack, browser: Any) -> None:
    ctx = browser.new_context(viewport=LAPTOP)
    page = ctx.new_page()
    resp = page.goto(stack.http + "/")
    assert resp is not None and resp.status == 401
    assert "picobot pair" in page.content()
    assert page.locator("#chat-page").count() == 0  # never the app
    assert "script-src 'self'" in resp.headers["content-security-policy"]
    screenshot(page, "pair-laptop")

    link = pairing_url(stack)
    page.goto(link)
    assert page.input_value("#code").replace("-", "") == link.split("code=")[1]  # shown as ABCD-EFGH
    page.fill("#name", "Browser test laptop")
    page.click("#pair-submit")
    page.wait_for_selector("#chat-page")
    cookie = next(c for c in ctx.cookies() if c["name"] == "picobot_token")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # script in the page cannot read the token

    # the code was single use: a second browser cannot reuse it
    other = browser.new_context(viewport=PHONE)
    p2 = other.new_page()
    p2.goto(link)
    screenshot(p2, "pair-phone")
    p2.click("#pair-submit")
    assert "wrong, expired or already used" in p2.content()
    assert p2.locator("#chat-page").count() == 0
    listed = stack.cli("pair", "--list").stdout
    assert "Browser test laptop" in listed
    other.close()
    ctx.close()


def test_chat_streams_a_tool_using_answer_with_reasoning(stack: Stack, llm: Any, new_page: Any, page_errors: Any) -> None:
    answer = "The answer is **84**. " + " ".join(f"word{i}" for i in range(60))
    add_rule(llm, "(12+30)*2",
             {"reasoning": "I should use the calculator.", "delay_ms": 200,
              "tool_calls": [{"name": "calculator", "arguments": {"expression": "(12+30)*2"}}]},
             {"content": answer, "chunk_delay_ms": 40})
    page = new_page()
    open_chat(page, stack)
    send(page, "what is (12+30)*2 ?")
    page.wait_for_selector(".turn.live .tool[data-status=done]", timeout=20_000)
    lengths = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        texts = page.locator(".turn.live .md").all_inner_texts()
        lengths.append(len(" ".join(texts)))
        if page.locator(".turn.live").count() == 0:
            break
        page.wait_for_timeout(60)
    grew = sorted(set(n for n in lengths if n > 0))
    assert len(grew) >= 3, f"the answer should grow on screen while it streams: {lengths}"
    wait_idle(page)
    tool = page.locator(".messages .tool").first
    assert tool.locator(".tool-name").text_content() == "calculator"
    tool.locator("summary").click()
    assert "(12+30)*2" in tool.locator(".tool-args").text_content()
    assert "84" in tool.locator(".tool-result").text_content()
    assert page.locator(".messages .reasoning").count() == 1
    assert page.locator(".messages .md strong", has_text="84").count() == 1
    page.wait_for_function("() => /in ·/.test(document.querySelector('#usage').textContent)")
    assert "% of 32k" in page.inner_text("#usage")
    screenshot(page, "chat-laptop")
    assert not page_errors.errors, page_errors.errors


def test_stop_a_long_turn(stack: Stack, llm: Any, new_page: Any) -> None:
    add_rule(llm, "tell me a long story", {"content": "Once upon a time " * 200, "chunk_delay_ms": 100})
    page = new_page()
    open_chat(page, stack)
    send(page, "tell me a long story")
    page.wait_for_function("() => (document.querySelector('.turn.live .md')?.textContent || '').length > 20",
                           timeout=20_000)
    assert page.is_visible("#stop-btn")
    page.click("#stop-btn")
    page.wait_for_selector(".messages .notice:has-text('Stopped')", timeout=15_000)
    wait_idle(page)
    assert not page.is_visible("#stop-btn")
    assert user_texts(page) == ["tell me a long story"]


def test_send_while_busy_steers_by_default_and_queues_on_request(stack: Stack, llm: Any, new_page: Any) -> None:
    add_rule(llm, "slow first", {"content": "first answer " * 40, "chunk_delay_ms": 60})
    page = new_page()
    open_chat(page, stack)
    send(page, "slow first")
    page.wait_for_selector(".turn.live.running", timeout=20_000)
    send(page, "steer me in")
    page.wait_for_selector(".chip.fate-steered", timeout=10_000)
    page.click(".segmented [data-mode=queue]")
    send(page, "queue me after")
    page.wait_for_selector(".chip.fate-queued", timeout=10_000)
    screenshot(page, "chat-busy-laptop")
    wait_idle(page, 60_000)
    texts = user_texts(page)
    assert texts == ["slow first", "steer me in", "queue me after"], texts
    assert page.locator(".fate-rejected, .fate-lost").count() == 0
    # the queued message ran as its own turn after the first one: its answer comes last
    assert page.locator(".messages .msg.assistant").last.text_content().startswith("You said: queue me after")


def test_rejected_message_shows_its_fate(stack: Stack, new_page: Any) -> None:
    page = new_page()
    open_chat(page, stack)
    page.evaluate("t => { const i = document.querySelector('#composer-input'); i.value = t; }", "x" * 40000)
    page.click("#send-btn")
    page.wait_for_selector(".chip.fate-rejected")
    assert "limit" in page.inner_text(".pending")


def test_sessions_new_switch_rename_archive_delete_and_reload(stack: Stack, llm: Any, new_page: Any) -> None:
    page = new_page()
    open_chat(page, stack)
    send(page, "hello from dialog one")
    wait_idle(page)
    page.click("#new-chat")
    page.wait_for_function("() => document.querySelectorAll('.messages .msg').length === 0")
    send(page, "hello from dialog two")
    wait_idle(page)
    page.wait_for_function("() => document.querySelectorAll('#dialog-list .dialog').length === 2")

    page.click("#dialog-list .dialog:not(.current) .dialog-btn")
    page.wait_for_function("() => /dialog one/.test(document.querySelector('.messages').textContent)")
    assert "dialog two" not in page.text_content(".messages")

    page.click("[aria-label='Rename this dialog']")
    page.fill(".rename-input", "My first dialog")
    page.keyboard.press("Enter")
    page.wait_for_selector("#dialog-list .dialog.current .dialog-title:has-text('My first dialog')")
    assert page.inner_text("#chat-title") == "My first dialog"

    before = user_texts(page)
    page.reload()
    page.wait_for_selector("body[data-history-painted]")
    page.wait_for_selector(".app[data-conn=open]")
    assert user_texts(page) == before == ["hello from dialog one"]
    assert page.locator(".fate-rejected, .fate-lost").count() == 0
    assert page.inner_text("#chat-title") == "My first dialog"
    screenshot(page, "chat-dialogs-laptop")

    page.click("[aria-label='Archive this dialog']")
    page.wait_for_function("() => /dialog two/.test(document.querySelector('.messages').textContent)")
    page.wait_for_function("() => document.querySelectorAll('#dialog-list .dialog').length === 1")
    page.check("#show-archived")
    page.wait_for_selector("#dialog-list .dialog.archived:has-text('My first dialog')")

    page.click("[aria-label='Delete this dialog']")
    page.click("[aria-label='Delete this dialog']")  # the second click confirms
    page.wait_for_function("() => !/dialog two/.test(document.querySelector('.messages').textContent)")
    page.wait_for_function("() => ![...document.querySelectorAll('#dialog-list .dialog')].some(d => /dialog two/.test(d.textContent))")


def test_image_attachment_is_sent_as_a_content_block(stack: Stack, llm: Any, new_page: Any) -> None:
    page = new_page()
    open_chat(page, stack)
    page.set_input_files("#attach-input", files=[{"name": "dot.png", "mimeType": "image/png", "buffer": PNG}])
    page.wait_for_selector(".thumbs .thumb img")
    send(page, "what is in this picture")
    wait_idle(page)
    img = page.locator(".messages .msg.user img.attachment")
    assert img.count() == 1 and img.get_attribute("src").startswith("data:image/png;base64,")
    sent = HTTP.get(llm.url + "/_fake/requests").json()["requests"]
    last = [r for r in sent if "what is in this picture" in str(r)][-1]
    assert "image_url" in str(last)


def test_management_pages_show_health_and_masked_config(stack: Stack, new_page: Any) -> None:
    page = new_page()
    open_chat(page, stack)
    page.click(".nav-link[data-page=health]")
    page.wait_for_selector("#health-status")
    for name in ("database", "redis", "workers", "beat", "provider"):
        assert page.locator(f".check[data-check={name}]").count() == 1
    assert "ok" in page.get_attribute(".check[data-check=database]", "class")
    stamp = page.inner_text(".live-stamp")
    page.wait_for_function("s => document.querySelector('.live-stamp').innerText !== s", arg=stamp, timeout=10_000)
    screenshot(page, "health-laptop")

    page.click(".nav-link[data-page=config]")
    page.wait_for_selector(".config-section[data-section=providers]")
    text = page.inner_text("#config-page")
    assert "masked" in text and API_KEY not in page.content()
    assert "fake-model" in text
    screenshot(page, "config-laptop")

    page.click(".nav-link[data-page=devices]")
    page.wait_for_selector("#devices-table")
    assert page.locator("#devices-table tr:has-text('this browser')").count() == 1
    screenshot(page, "devices-laptop")


def test_phone_layout_has_a_drawer_and_every_page(stack: Stack, llm: Any, new_page: Any) -> None:
    page = new_page(PHONE)
    open_chat(page, stack)
    send(page, "what is 6*7 ?")
    wait_idle(page)
    sidebar = page.locator("#sidebar")
    assert sidebar.bounding_box()["x"] + sidebar.bounding_box()["width"] <= 1  # off screen
    assert page.locator("#composer-input").bounding_box()["width"] > 200
    screenshot(page, "chat-phone")
    page.click("#chat-page .menu-btn")
    page.wait_for_timeout(300)
    assert sidebar.bounding_box()["x"] >= -1
    screenshot(page, "nav-phone")
    page.click(".nav-link[data-page=health]")
    page.wait_for_selector("#health-status")
    page.wait_for_timeout(300)
    assert sidebar.bounding_box()["x"] < 0  # the drawer closed on navigation
    screenshot(page, "health-phone")
    page.click("#health-page .menu-btn")
    page.click(".nav-link[data-page=config]")
    page.wait_for_selector(".config-section")
    page.wait_for_timeout(300)  # the drawer's slide
    screenshot(page, "config-phone")


HOSTILE = [
    '<img src=x onerror="window.__pwned=1">',
    "[click me](javascript:window.__pwned=2)",
    "<script>window.__pwned=3</script>",
    "[data](data:text/html,<script>alert(1)</script>)",
    "![pic](javascript:window.__pwned=4)",
    "<a href=\"javascript:window.__pwned=5\">a</a>",
    "[tab](java\tscript:window.__pwned=6)",
    "<svg onload=window.__pwned=7>",
]


def test_hostile_markdown_and_tool_output_cannot_run_script(stack: Stack, llm: Any, new_page: Any) -> None:
    payload = "\n\n".join(HOSTILE)
    add_rule(llm, "hostile-check",
             {"tool_calls": [{"name": "calculator", "arguments": {"expression": '<img src=x onerror="window.__pwned=8">'}}],
              "reasoning": "<img src=x onerror=window.__pwned=9>"},
             {"content": payload + "\n\nsafe link: [ok](https://example.com/ok)"})
    page = new_page()
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    open_chat(page, stack)
    page.evaluate("() => document.addEventListener('securitypolicyviolation', e => (window.__csp = (window.__csp||[]).concat(e.violatedDirective)))")
    send(page, "hostile-check " + payload)
    wait_idle(page)
    page.locator(".messages .tool summary").first.click()
    page.locator(".messages .reasoning summary").first.click()
    page.wait_for_timeout(500)
    assert page.evaluate("window.__pwned") is None
    assert page.locator(".transcript img[src='x'], .transcript script, .transcript svg[onload]").count() == 0
    hrefs = page.eval_on_selector_all(".transcript a[href]", "els => els.map(a => a.href)")
    assert hrefs and all(re.match(r"^(https?:|mailto:)", h) for h in hrefs), hrefs
    assert "https://example.com/ok" in hrefs
    # the payload is shown as text, not swallowed
    assert '<img src=x onerror="window.__pwned=1">' in page.text_content(".messages")
    assert "<img src=x onerror=" in page.text_content(".messages .tool-args")  # arguments, as text
    assert page.evaluate("window.__csp || []") == [], violations
    screenshot(page, "chat-hostile-laptop")

    # the pages as served carry no inline script or style at all
    html = HTTP.get(stack.http + "/", headers={"Authorization": f"Bearer {stack.token}"}).text
    assert "<script>" not in html and "style=" not in html and "<style" not in html
    assert re.findall(r"<script[^>]*>", html) == [m for m in re.findall(r"<script[^>]*>", html) if "src=" in m]


def test_reconnects_after_a_server_restart_and_catches_up_without_duplicates(stack: Stack, llm: Any,
                                                                            new_page: Any) -> None:
    add_rule(llm, "answer while I am away", {"content": "Answered while the web was down.", "delay_ms": 2500})
    page = new_page()
    open_chat(page, stack)
    send(page, "before the restart")
    wait_idle(page)
    send(page, "answer while I am away")
    page.wait_for_selector(".turn.live.running", timeout=20_000)
    stack.kill("web")  # the worker carries on and stores the answer; nobody is connected to see it
    page.wait_for_selector(".app[data-conn=reconnecting]", timeout=20_000)
    page.wait_for_selector(".conn-banner", state="visible")
    screenshot(page, "chat-reconnecting-laptop")
    time.sleep(3)
    stack.start_web()
    page.wait_for_selector(".app[data-conn=open]", timeout=30_000)
    page.wait_for_selector(".messages .md:has-text('Answered while the web was down.')", timeout=20_000)
    wait_idle(page)
    assert user_texts(page) == ["before the restart", "answer while I am away"]
    send(page, "after the restart")
    wait_idle(page)
    assert user_texts(page) == ["before the restart", "answer while I am away", "after the restart"]
    answers = page.locator(".messages .msg.assistant").all_text_contents()
    assert len(answers) == 3 and answers.count("Answered while the web was down.") == 1, answers


def test_revoked_browser_is_sent_back_to_pairing(stack: Stack, browser: Any) -> None:
    ctx = browser.new_context(viewport=LAPTOP)
    page = ctx.new_page()
    pair_through_page(page, stack, "to be revoked")
    page.wait_for_selector(".app[data-conn=open]")
    devices = HTTP.get(stack.http + "/api/pairing/devices", headers={"Authorization": f"Bearer {stack.token}"}).json()
    victim = next(d for d in devices["devices"] if d["name"] == "to be revoked")
    assert stack.cli("pair", "--revoke", victim["id"]).returncode == 0
    page.click(".nav-link[data-page=health]")  # any API call now gets 401 -> the pairing page
    page.wait_for_selector("#pair-submit", timeout=10_000)
    assert page.locator("#chat-page").count() == 0
    ctx.close()


MARKDOWN_CASES = [
    ("# Title\n\nText with **bold**, *em*, ~~gone~~ and `code`.",
     "<h3 class=\"md-h\">Title</h3><p>Text with <strong>bold</strong>, <em>em</em>, <del>gone</del> and <code>code</code>.</p>"),
    ("- a\n- b\n  - nested\n\n1. one\n2. two", None),
    ("| x | y |\n|---|--:|\n| 1 | 2 |", None),
    ("snake_case_name, 2*3 and a_b", "<p>snake_case_name, 2*3 and a_b</p>"),
    ("see https://example.com/a_(b). and <https://x.org>", None),
]


def test_markdown_renderer_builds_the_expected_nodes(stack: Stack, new_page: Any) -> None:
    page = new_page()
    open_chat(page, stack)
    base = page.evaluate("document.querySelector('script[type=module]').src.replace(/app\\.js$/, '')")
    render = """async ([base, src]) => {
        const md = await import(base + 'markdown.js');
        const box = document.createElement('div');
        box.append(md.renderMarkdown(src));
        return box.innerHTML.replace(/<div class="code">.*?<\\/pre><\\/div>/gs, '[code]');
    }"""
    out = [page.evaluate(render, [base, src]) for src, _ in MARKDOWN_CASES]
    for (src, want), got in zip(MARKDOWN_CASES, out, strict=True):
        if want is not None:
            assert got == want, (src, got)
    assert "<ul><li>a</li><li>b<ul><li>nested</li></ul></li></ul><ol><li>one</li><li>two</li></ol>" == out[1]
    assert '<th class="align-left">x</th><th class="align-right">y</th>' in out[2] and "<td" in out[2]
    assert 'href="https://example.com/a_(b)"' in out[4] and 'href="https://x.org/"' in out[4]
    assert page.evaluate(render, [base, "```js\nlet a = '<b>';\n```"]) == "[code]"
    text = page.evaluate("""async ([base]) => {
        const md = await import(base + 'markdown.js');
        const box = document.createElement('div');
        box.append(md.renderMarkdown("```js\\nlet a = '<b>';\\n```"));
        return [box.querySelector('code').textContent, box.querySelector('code').className, box.querySelectorAll('b').length];
    }""", [base])
    assert text == ["let a = '<b>';", "lang-js", 0]
    unsafe = ["javascript:alert(1)", "JaVaScRiPt:alert(1)", " javascript:alert(1)", "java\tscript:alert(1)",
              "data:text/html,x", "vbscript:x", "/relative", "//evil.example/x", "&#106;avascript:alert(1)"]
    results = page.evaluate("""async ([base, urls]) => {
        const md = await import(base + 'markdown.js');
        return urls.map(u => md.safeUrl(u));
    }""", [base, unsafe + ["https://ok.example/x", "mailto:a@b.c"]])
    assert results[:-2] == [None] * len(unsafe) and results[-2:] == ["https://ok.example/x", "mailto:a@b.c"]


def test_a_long_dialog_shows_its_end_first_and_older_messages_on_request(stack: Stack, new_page: Any) -> None:
    from picobot.domain.messages import ChatMessage
    from picobot.storage import messages, sessions
    from picobot.storage.db import Database

    chat_id = "web-long-" + str(int(time.time()))
    db = Database(stack.database_url)
    try:
        with db.write() as s:
            sid = sessions.create(s, "web", chat_id, title="Long").id
            messages.append(s, sid, None, [ChatMessage(role="user" if i % 2 == 0 else "assistant", content=f"line {i}")
                                           for i in range(300)])
    finally:
        db.dispose()
    page = new_page()
    page.context.add_init_script(f"localStorage.setItem('picobot.chat_id', '{chat_id}')")
    open_chat(page, stack)
    page.wait_for_function("() => document.querySelectorAll('.messages .msg').length === 200")
    texts = page.locator(".messages .msg").all_text_contents()
    assert texts[0] == "line 100" and texts[-1] == "line 299"  # the newest 200, in order
    # still at the end once the page settles (off-screen messages size themselves lazily)
    page.wait_for_function("() => { const s = document.querySelector('#chat-scroll'); "
                           "return s.scrollHeight - s.scrollTop - s.clientHeight < 5; }", timeout=5000)
    page.click(".load-earlier")
    page.wait_for_function("() => document.querySelectorAll('.messages .msg').length === 300")
    texts = page.locator(".messages .msg").all_text_contents()
    assert texts == [f"line {i}" for i in range(300)]
    assert not page.is_visible(".load-earlier")


def test_a_chat_that_moved_host_shows_the_note_in_its_dialog(stack: Stack, new_page: Any) -> None:
    """The worker-host move note (runtime/placement.py) is drawn as a notice, as text, between the turns."""
    from picobot.domain.messages import ChatMessage
    from picobot.runtime.placement import MARKER_HOST_MOVED
    from picobot.storage import messages, sessions
    from picobot.storage.db import Database

    chat_id = "web-moved-" + str(int(time.time() * 1000))
    note = ("This chat moved from worker host <b id=injected>alpha</b>, which stopped, to beta. Files written in "
            "the workspace before the move stay on alpha and are not reachable now; recreate what is still needed.")
    db = Database(stack.database_url)
    try:
        with db.write() as s:
            sid = sessions.create(s, "web", chat_id, title="Moved").id
            messages.append(s, sid, None, [ChatMessage(role="user", content="before"),
                                           ChatMessage(role="assistant", content="answered on alpha"),
                                           ChatMessage(role="system", content=note, marker=MARKER_HOST_MOVED),
                                           ChatMessage(role="user", content="after"),
                                           ChatMessage(role="assistant", content="answered on beta")])
    finally:
        db.dispose()
    page = new_page()
    page.context.add_init_script(f"localStorage.setItem('picobot.chat_id', '{chat_id}')")
    open_chat(page, stack)
    page.wait_for_selector(".notice.host-moved")
    assert page.locator(".notice.host-moved").text_content() == note  # the markup as characters
    assert page.locator("#injected").count() == 0
    order = page.evaluate("() => [...document.querySelectorAll('.messages .msg, .messages .notice.host-moved')]"
                          ".map(e => e.classList.contains('host-moved') ? 'note' : e.textContent)")
    assert order == ["before", "answered on alpha", "note", "after", "answered on beta"], order
