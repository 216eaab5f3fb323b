"""The AgentLoop in-process (no Celery): a real provider against the fake LLM, real tools."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from picobot.agent.loop import AgentLoop, LoopSettings
from picobot.agent.snapshot import TurnController
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import ChatMessage
from picobot.providers.openai_provider import OpenAIProvider
from picobot.tools import build_registry
from picobot.tools.base import ToolContext
from tests.conftest import add_rule


def _loop(llm, **settings) -> AgentLoop:  # type: ignore[no-untyped-def]
    provider = OpenAIProvider("default", base_url=f"{llm.url}/v1", api_key="sk-loop-test-key", timeout=10)
    return AgentLoop(provider, build_registry(), LoopSettings(model="fake", **settings))


def _ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(session_id="s", channel="cli_chat", chat_id="c", sender_id="u", turn_id="t",
                       workspace=tmp_path, cancel=CancelToken())


def test_round_limit_ends_with_a_whole_chain(llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "loop-forever", {"tool_calls": [{"name": "get_time", "arguments": {}}]}, repeat=True)
    controller = TurnController("s", "t")
    result = _loop(llm, max_tool_iterations=3).run(
        [], [ChatMessage(role="user", content="loop-forever")], _ctx(tmp_path), controller, lambda: [])
    assert result.status == "completed"
    assert "3 rounds" in result.final_text
    roles = [m.role for m in result.messages]
    assert roles == ["user"] + ["assistant", "tool"] * 4 + ["assistant"]
    assert result.messages[-2].is_error  # the unexecuted fourth call still has a result


def test_cancel_during_a_slow_model_call_returns_quickly(llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "slow-call", {"content": "late", "delay_ms": 10000})
    ctx = _ctx(tmp_path)
    threading.Timer(0.5, ctx.cancel.cancel).start()
    started = time.monotonic()
    result = _loop(llm).run([], [ChatMessage(role="user", content="slow-call")], ctx, TurnController("s", "t"),
                            lambda: [])
    assert result.status == "cancelled"
    assert time.monotonic() - started < 5  # not the 10 s the model would take
    assert [m.role for m in result.messages] == ["user"]


def test_steering_input_arrives_after_a_final_answer_gets_its_own_reply(llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "first q", {"content": "first answer"})
    add_rule(llm, "second q", {"content": "second answer"})
    pending = [[ChatMessage(role="user", content="second q")], []]
    controller = TurnController("s", "t")
    result = _loop(llm).run([], [ChatMessage(role="user", content="first q")], _ctx(tmp_path), controller,
                            lambda: pending.pop(0) if pending else [])
    assert [(m.role, m.content) for m in result.messages] == [
        ("user", "first q"), ("assistant", "first answer"), ("user", "second q"), ("assistant", "second answer")]
    streamed = "".join(b["text"] for b in controller.snapshot()["blocks"] if b["type"] == "text")
    assert "first answer" in streamed and "second answer" in streamed


def test_provider_failure_becomes_a_failed_result_without_the_key(llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "always-429", *[{"error": {"status": 429, "message": "slow down"}}] * 5)
    result = _loop(llm).run([], [ChatMessage(role="user", content="always-429")], _ctx(tmp_path),
                            TurnController("s", "t"), lambda: [])
    assert result.status == "failed" and "provider" in result.error
    assert "sk-loop-test-key" not in result.error
