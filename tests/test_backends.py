"""The whole path on the other backends: PostgreSQL storage, and an Anthropic provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from picobot.cli.embedded_redis import free_port
from tests.conftest import add_rule
from tests.stack import API_KEY, Stack, base_config

pytestmark = pytest.mark.slow


def _run(stack: Stack) -> Iterator[Stack]:
    try:
        stack.start(workers=1, beat=False)
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def pg_stack(tmp_path: Path, fake_llm, pg_url: str) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    yield from _run(Stack(tmp_path, fake_llm.url, database_url=pg_url))


@pytest.fixture
def anthropic_stack(tmp_path: Path, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    cfg = base_config(fake_llm.url, free_port())
    cfg["providers"]["default"] = {"type": "anthropic", "base_url": fake_llm.url, "api_key": "${PICOBOT_TEST_KEY}",
                                   "llm_timeout_secs": 30}
    cfg["models"]["default"] = {"model_id": "claude-fake", "max_tokens": 1024, "context_window_tokens": 200000}
    stack = Stack(tmp_path, fake_llm.url, config=cfg)
    stack.port = cfg["gateway"]["port"]
    yield from _run(stack)


def test_tool_turn_on_postgresql(pg_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    c = pg_stack.client()
    done = c.ask("what is 7*6")
    assert done["status"] == "completed" and "42" in done["final_text"]
    assert pg_stack.health()["checks"]["database"]["detail"] == "postgresql"
    c2 = pg_stack.client(c.chat_id)
    assert [m["role"] for m in c2.ready["history"]][-4:] == ["user", "assistant", "tool", "assistant"]


def test_anthropic_thinking_is_replayed_with_its_signature(anthropic_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "think-then-tool", {"reasoning": "I should compute this", "tool_calls": [
        {"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"content": "It is 42."})
    c = anthropic_stack.client()
    done = c.ask("think-then-tool")
    assert done["status"] == "completed" and done["final_text"] == "It is 42."
    reasoning = [b for f in c.frames if f["type"] == "turn_updated" for b in f["blocks"] if b["type"] == "reasoning"]
    assert reasoning and "compute" in reasoning[-1]["text"]
    second = llm.requests()[-1]
    assert second["protocol"] == "anthropic"
    assistant = [m for m in second["body"]["messages"] if m["role"] == "assistant"][-1]
    kinds = [b["type"] for b in assistant["content"]]
    assert kinds[0] == "thinking" and assistant["content"][0]["signature"] and "tool_use" in kinds
    assert second["auth"] is not None and API_KEY not in json.dumps(second)
    # the signed state never reaches clients
    c.send({"type": "history", "id": "h"})
    hist = c.recv_until(lambda f: f.get("id") == "h")
    assert "signature" not in json.dumps(hist) and "signature" not in json.dumps(c.frames)
