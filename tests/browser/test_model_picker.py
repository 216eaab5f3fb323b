"""The chat header's model picker in a real Chromium: it shows the dialog's model, switches it
(the fake LLM's next request asks for the chosen model id), follows dialog switches and reloads."""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

import httpx
import pytest

from picobot.cli.embedded_redis import free_port
from tests.browser.conftest import PHONE, screenshot
from tests.browser.test_web_ui import open_chat, send, wait_idle
from tests.conftest import add_rule
from tests.stack import Stack
from tests.test_model_switch import switch_config
from tests.http_client import HTTP

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    port = free_port()
    s = Stack(tmp_path_factory.mktemp("modelpicker"), fake_llm.url, config=switch_config(fake_llm.url, port))
    s.port = port
    try:
        s.start(workers=1, beat=False)
        yield s
    finally:
        s.stop()


def _asked(llm: Any, text: str) -> list[str]:
    found = HTTP.get(llm.url + "/_fake/requests").json()["requests"]
    return [r["body"]["model"] for r in found
            if text in json.dumps([m for m in r["body"].get("messages", []) if m.get("role") == "user"][-1:])]


def _picked(page: Any) -> str:
    return page.eval_on_selector("#model-picker", "s => s.selectedOptions[0] ? s.selectedOptions[0].dataset.ref : ''")


def _wait_model(page: Any, ref: str) -> None:
    page.wait_for_function("ref => document.querySelector('.model-picker').dataset.model === ref", arg=ref)


def test_the_picker_switches_the_dialogs_model_and_follows_dialog_switches(stack: Stack, llm: Any,
                                                                           new_page: Any) -> None:
    page = new_page()
    open_chat(page, stack)
    _wait_model(page, "default:default")
    options = page.eval_on_selector_all("#model-picker option", "os => os.map(o => o.dataset.ref)")
    assert options == ["default:default", "default:second", "other:second"]
    assert _picked(page) == "default:default" and not page.is_disabled("#model-picker")

    page.select_option("#model-picker", "default:second")
    _wait_model(page, "default:second")
    assert page.get_attribute(".model-picker", "data-chosen") == "1"
    text = f"picked-{uuid.uuid4().hex[:8]}"
    add_rule(llm, text, {"content": "answered by the picked model"})
    send(page, text)
    wait_idle(page)
    assert _asked(llm, text) == ["second-model"]
    screenshot(page, "chat-model-picker-laptop")

    page.click("#new-chat")  # a new dialog starts on the agent's default
    page.wait_for_function("() => document.querySelectorAll('.messages .msg').length === 0")
    _wait_model(page, "default:default")
    assert page.get_attribute(".model-picker", "data-chosen") == "0"

    page.click("#dialog-list .dialog:not(.current) .dialog-btn")  # back: the picker follows
    _wait_model(page, "default:second")
    page.reload()
    page.wait_for_selector(".app[data-conn=open]")
    _wait_model(page, "default:second")
    assert _picked(page) == "default:second"

    page.select_option("#model-picker", "default")  # the agent's own model: back to the default
    _wait_model(page, "default:default")
    assert page.get_attribute(".model-picker", "data-chosen") == "0"


def test_a_typed_model_command_updates_the_picker_and_junk_is_refused(stack: Stack, new_page: Any) -> None:
    page = new_page(PHONE)
    open_chat(page, stack)
    _wait_model(page, "default:default")
    send(page, "/model fast")
    _wait_model(page, "other:second")
    assert _picked(page) == "other:second"
    send(page, "/model default:third")
    page.wait_for_selector(".notice:has-text('may not use')")
    assert _picked(page) == "other:second"
    screenshot(page, "chat-model-picker-phone")
