"""Hostile plugins through real processes: wrong types, huge and unencodable text, slow and raising hooks.

A home plugin (`$PICOBOT_HOME/plugins/hostile.py`) misbehaves only on magic words, so each test
shows one way of misbehaving; the stack keeps answering, and `before_toolcall` fails closed.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

import pytest

from tests.stack import Stack
from tests.http_client import HTTP

HOSTILE = '''
import json, time
from picobot.plugins import hookimpl

def _last_user(messages):
    for m in reversed(messages):
        if getattr(m, "role", "") == "user":
            return m.content if isinstance(m.content, str) else json.dumps(m.content)
    return ""

@hookimpl
def on_input(message):
    if "hostile-type" in message.text:
        return {"not": "a string"}

@hookimpl
def pre_action(messages):
    if "hostile-slow" in _last_user(messages):
        time.sleep(3)
        return "a note that comes too late"

@hookimpl
def before_output(text):
    if "hostile-huge" in text:
        return "\\ud800 start " + "x" * 1_200_000

@hookimpl
def after_toolcall(call, result):
    if call.name == "calculator":
        raise RuntimeError("hostile after_toolcall")

@hookimpl
def before_toolcall(call):
    if "666" in json.dumps(call.arguments):
        time.sleep(3)
'''

TIMEOUT = 0.5


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("hostile"), fake_llm.url)
    (s.home / "plugins").mkdir()
    (s.home / "plugins" / "hostile.py").write_text(HOSTILE)
    cfg = json.loads((s.home / "config.json").read_text())
    cfg["plugins"] = {"hook_timeout_secs": TIMEOUT}
    (s.home / "config.json").write_text(json.dumps(cfg))
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def test_a_wrong_return_type_is_ignored_and_the_model_answers(hostile: Stack, llm: Any) -> None:
    done = hostile.client().ask("hostile-type please")
    assert done["status"] == "completed" and done["final_text"] == "You said: hostile-type please"


def test_a_slow_hook_is_skipped_after_its_timeout(hostile: Stack, llm: Any) -> None:
    started = time.monotonic()
    done = hostile.client().ask("hostile-slow please")
    assert done["status"] == "completed" and "hostile-slow" in done["final_text"]
    requests = [r["body"] for r in _requests(llm)]
    assert requests and "a note that comes too late" not in json.dumps(requests)
    assert time.monotonic() - started < 3 + 10  # the turn did not wait for the sleeping hook to return


def test_a_huge_unencodable_answer_is_repaired_and_cut(hostile: Stack, llm: Any) -> None:
    c = hostile.client()
    done = c.ask("hostile-huge please", timeout=90)
    text = done["final_text"]
    assert done["status"] == "completed" and text.startswith("\ufffd start ")
    assert len(text) <= 1_000_000 and text.endswith("[... cut by PicoBot: plugin output too long]")
    c.send({"type": "history", "id": "h"})
    stored = c.recv_until(lambda f: f.get("id") == "h")["messages"][-1]
    assert stored["role"] == "assistant" and stored["content"] == text


def test_a_raising_after_toolcall_leaves_the_result(hostile: Stack, llm: Any) -> None:
    done = hostile.client().ask("what is 2+3 ?")
    assert done["status"] == "completed" and "returned: 5" in done["final_text"]


def test_a_before_toolcall_that_times_out_denies_the_call(hostile: Stack, llm: Any) -> None:
    done = hostile.client().ask("what is 666+1 ?")
    assert done["status"] == "completed" and "[denied]" in done["final_text"] and "667" not in done["final_text"]
    # the worker reports its plugins' errors with its next heartbeat (every 2 s): wait for it
    deadline = time.monotonic() + 15
    plugins = hostile.health()["checks"]["plugins"]
    while "hostile" not in plugins["detail"] and time.monotonic() < deadline:
        time.sleep(0.5)
        plugins = hostile.health()["checks"]["plugins"]
    assert plugins["ok"] and "hostile" in plugins["detail"]


def _requests(llm: Any) -> list[dict[str, Any]]:
    import httpx

    return HTTP.get(llm.url + "/_fake/requests", timeout=10).json()["requests"]
