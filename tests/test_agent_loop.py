"""The AgentLoop in-process (no Celery): a real provider against the fake LLM, real tools."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from picobot.agent.loop import AgentLoop, LoopSettings
from picobot.agent.snapshot import TurnController
from picobot.agent.tool_batch import ToolBatch, ordering
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import ChatMessage, ToolCall
from picobot.errors import TurnCancelled
from picobot.providers.openai_provider import OpenAIProvider
from picobot.tools import build_registry
from picobot.tools.base import Tool, ToolContext, ToolResult
from picobot.tools.files import WriteFileTool
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


# --- tool batches: parallelism, ordering, cancellation ---------------------------------


class ProbeTool(Tool):
    """Counts how many of its calls run at once; calls with the same key touch the same thing."""

    name = "probe"
    description = "Test probe."
    parameters = {"type": "object", "properties": {"key": {"type": "string"}, "n": {"type": "integer"}},
                  "required": ["n"]}

    def __init__(self, read_only: bool = False, hold_secs: float = 0.2) -> None:
        self.read_only = read_only
        self.hold_secs = hold_secs
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.order: list[int] = []

    def footprint(self, args: dict[str, Any], ctx: ToolContext) -> frozenset[str]:
        return frozenset({args["key"]}) if args.get("key") else frozenset()

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
            self.order.append(args["n"])
        time.sleep(self.hold_secs)  # long enough for every call allowed to run to be running
        with self.lock:
            self.active -= 1
        return f"probe {args['n']}"


def _tool_loop(llm, *extra: Tool, **settings) -> AgentLoop:  # type: ignore[no-untyped-def]
    provider = OpenAIProvider("default", base_url=f"{llm.url}/v1", api_key="sk-loop-test-key", timeout=10)
    return AgentLoop(provider, build_registry(extra=extra), LoopSettings(model="fake", **settings))


def _run_calls(llm, tmp_path: Path, marker: str, calls: list[dict], *extra: Tool,  # type: ignore[no-untyped-def]
               ctx: ToolContext | None = None, controller: TurnController | None = None, **settings):
    add_rule(llm, marker, {"tool_calls": calls}, {"content": "done"})
    ctx = ctx or _ctx(tmp_path)
    return _tool_loop(llm, *extra, **settings).run([], [ChatMessage(role="user", content=marker)], ctx,
                                                   controller or TurnController("s", "t"), lambda: [])


def test_max_parallel_caps_the_calls_running_at_once(llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    probe = ProbeTool()
    calls = [{"name": "probe", "arguments": {"n": n}} for n in range(5)]
    result = _run_calls(llm, tmp_path, "five-probes", calls, probe, max_parallel_tools=2)
    assert result.status == "completed"
    assert probe.most == 2  # capped, and still parallel
    assert [m.content for m in result.messages if m.role == "tool"] == [f"probe {n}" for n in range(5)]


def test_calls_on_one_thing_run_in_request_order_unless_all_read_only(llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    writer = ProbeTool()
    calls = [{"name": "probe", "arguments": {"key": "same-file", "n": n}} for n in range(4)]
    _run_calls(llm, tmp_path, "same-key-writes", calls, writer)
    assert writer.most == 1 and writer.order == [0, 1, 2, 3]
    reader = ProbeTool(read_only=True)
    _run_calls(llm, tmp_path, "same-key-reads", calls, reader)
    assert reader.most == 4


def test_edits_of_one_file_in_one_response_all_apply(llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # a file big enough that one edit takes a while: unordered edits would overwrite each other
    filler = "x" * 200_000 + "\n"
    (tmp_path / "notes.txt").write_text("".join(f"line {n}\n{filler}" for n in range(12)))
    calls = [{"name": "edit", "arguments": {"path": "notes.txt" if n % 2 else "./notes.txt",
                                            "old_text": f"line {n}\n", "new_text": f"LINE {n}\n"}}
             for n in range(12)]
    calls.append({"name": "read", "arguments": {"path": "notes.txt", "limit": 1}})
    result = _run_calls(llm, tmp_path, "many-edits", calls)
    assert all(not m.is_error for m in result.messages if m.role == "tool"), result.messages
    text = (tmp_path / "notes.txt").read_text()
    assert all(f"LINE {n}\n" in text for n in range(12))
    assert result.messages[-2].content.startswith("     1\tLINE 0")  # the read ran after the edits


def test_a_write_waiting_for_its_slot_never_lands_after_stop(llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ctx = _ctx(tmp_path)
    blocker = StubbornTool()  # holds the only slot until the stop
    blocker.stop_once_started(ctx)
    calls = [{"name": "stubborn", "arguments": {"linger_secs": 0}},
             {"name": "write", "arguments": {"path": "late.txt", "content": "should not exist"}}]
    seen: list[str] = []  # every status the write's block ever had
    controller = TurnController("s", "t")
    controller.listener = lambda: seen.extend(b["status"] for b in controller.blocks
                                              if b["type"] == "tool" and b["name"] == "write")
    result = _run_calls(llm, tmp_path, "stop-before-write", calls, blocker, ctx=ctx, controller=controller,
                        max_parallel_tools=1)
    assert result.status == "cancelled"
    assert "running" not in seen and seen[-1] == "error"  # never started, reported as cancelled
    assert blocker.ended.wait(10)
    assert not (tmp_path / "late.txt").exists() and not (tmp_path / "after-stop.txt").exists()
    tool_results = [m.content for m in result.messages if m.role == "tool"]
    assert tool_results[0] == "stubborn done" and tool_results[1].startswith("[cancelled]")


class StubbornTool(Tool):
    """Ignores cancellation for a while after it, then tries to write a file."""

    name = "stubborn"
    description = "Test tool."
    parameters = {"type": "object", "properties": {"linger_secs": {"type": "number"}}}

    def __init__(self) -> None:
        self.outcome: list[str] = []
        self.started = threading.Event()
        self.ended = threading.Event()

    def stop_once_started(self, ctx: ToolContext) -> None:
        threading.Thread(target=lambda: self.started.wait(10) and ctx.cancel.cancel(), daemon=True).start()

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.started.set()
        try:
            ctx.cancel.wait(30)
            time.sleep(args["linger_secs"])
            WriteFileTool().execute({"path": "after-stop.txt", "content": "too late"}, ctx)
            self.outcome.append("wrote")
        except TurnCancelled:
            self.outcome.append("refused")
        finally:
            self.ended.set()
        return "stubborn done"


def test_stop_waits_for_tools_cut_short_so_nothing_lands_after_the_turn(llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stubborn = StubbornTool()
    ctx = _ctx(tmp_path)
    stubborn.stop_once_started(ctx)
    result = _run_calls(llm, tmp_path, "stubborn-short", [{"name": "stubborn", "arguments": {"linger_secs": 0.3}}],
                        stubborn, ctx=ctx)
    assert result.status == "cancelled"
    assert stubborn.ended.is_set()  # the loop waited for the tool thread before returning
    assert stubborn.outcome == ["refused"] and not (tmp_path / "after-stop.txt").exists()


def test_a_tool_outliving_a_stopped_turn_cannot_write(llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    stubborn = StubbornTool()
    ctx = _ctx(tmp_path)
    stubborn.stop_once_started(ctx)
    result = _run_calls(llm, tmp_path, "stubborn-long", [{"name": "stubborn", "arguments": {"linger_secs": 2.5}}],
                        stubborn, ctx=ctx)
    assert result.status == "cancelled" and not stubborn.ended.is_set()  # the loop stopped waiting
    assert result.messages[-1].content.startswith("[cancelled]")
    assert stubborn.ended.wait(10)
    assert stubborn.outcome == ["refused"] and not (tmp_path / "after-stop.txt").exists()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.frozensets(st.sampled_from("abc"), max_size=2), st.booleans()), max_size=8),
       st.integers(min_value=1, max_value=4))
def test_batch_orders_conflicts_caps_and_keeps_request_order(specs: list[tuple[frozenset[str], bool]],
                                                             cap: int) -> None:
    calls = [ToolCall(id=f"c{i}", name="t", arguments="{}") for i in range(len(specs))]
    after = ordering([f for f, _ in specs], [ro for _, ro in specs])
    lock = threading.Lock()
    log: list[tuple[str, int]] = []
    running = [0, 0]  # now, most

    def execute(call: ToolCall) -> ToolResult:
        i = int(call.id[1:])
        with lock:
            log.append(("start", i))
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.001)
        with lock:
            running[0] -= 1
            log.append(("end", i))
        return ToolResult(f"r{i}")

    results = ToolBatch(calls, after, execute, TurnController("s", "t"), cap).run(CancelToken(), 2.0)
    assert [r.content for r in results if r] == [f"r{i}" for i in range(len(calls))]
    assert running[1] <= cap
    for i, (fi, ri) in enumerate(specs):
        for j in range(i):
            fj, rj = specs[j]
            if fi & fj and not (ri and rj):  # a conflict: j ended before i started
                assert log.index(("end", j)) < log.index(("start", i))
