"""Run one sub-agent: its own history and tools, the parent's provider and model, an AgentLoop.

The run executes in the calling thread. A foreground run is called from the parent's tool thread
(tool threads are the loop's own, never Celery pool threads), so waiting for it holds no pool slot;
a background run is called from its Celery task.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any, Callable

from picobot.agent.context import runtime_note
from picobot.agent.loop import AgentLoop, LoopSettings
from picobot.agent.snapshot import TurnController
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import ChatMessage, Usage
from picobot.plugins.types import StageContext, SubagentRunView
from picobot.providers.base import Provider
from picobot.storage.models import RUN_CANCELLED, RUN_COMPLETED, RUN_FAILED
from picobot.tools.base import Tool, ToolContext
from picobot.tools.registry import ToolRegistry

TASK_TOOL = "task"
MAX_STORED_RESULT_CHARS = 100_000


@dataclass(frozen=True)
class ChildSpec:
    """Everything one run needs besides its parent's context."""

    run_id: str
    system_prompt: str
    task_text: str  # the user message the sub-agent starts from
    timeout_secs: float
    max_iterations: int


@dataclass
class Outcome:
    status: str  # completed | failed | cancelled
    text: str  # the result when completed, else what went wrong
    usage: Usage


def child_tools(parent: ToolRegistry, allowed: Callable[[Tool], bool], task_tool: Tool | None) -> ToolRegistry:
    """The parent's tools that `allowed` keeps, never one for the main agent only; `task` only as `task_tool`
    (None removes it)."""
    def keep(tool: Tool) -> bool:
        if getattr(tool, "main_agent_only", False):
            return False
        return (task_tool is not None) if tool.name == TASK_TOOL else allowed(tool)

    return parent.narrowed(keep, {TASK_TOOL: task_tool} if task_tool is not None else None)


def report_run(rt: Any, run_id: str, session_id: str, status: str, text: str = "", subagent_type: str = "",
               description: str = "", plan_item_id: int | None = None) -> None:
    """Tell the plugins a run was admitted or ended (`picobot_subagent_run`: a plan item follows it)."""
    view = SubagentRunView(run_id, session_id, status, subagent_type, description, text, plan_item_id)
    rt.plugins.call("picobot_subagent_run", run=view, ports=rt)


def run_child(spec: ChildSpec, provider: Provider, tools: ToolRegistry, settings: LoopSettings,
              ctx: ToolContext, cancel: CancelToken, controller: TurnController, hooks: Any = None,
              parent_stage: StageContext | None = None) -> Outcome:
    """Run the sub-agent until it answers, fails, hits a limit or `cancel` is set."""
    timer = threading.Timer(spec.timeout_secs, cancel.cancel, args=("timeout",))
    timer.daemon = True
    timer.start()
    child_ctx = replace(ctx, cancel=cancel, agent=None)  # a fresh write gate, tied to the child's cancel
    settings = replace(settings, max_tool_iterations=spec.max_iterations)
    history = [ChatMessage(role="system", content=spec.system_prompt),
               runtime_note(ctx.timezone, ctx.channel, ctx.workspace)]
    try:
        # the hooks see the parent's dialog, turn and inputs with this run's id: a budget charges the parent
        base = parent_stage or StageContext(ctx.session_id, ctx.channel, ctx.chat_id, ctx.sender_id, ctx.turn_id)
        stage = replace(base, run_id=spec.run_id)
        result = AgentLoop(provider, tools, settings, hooks=hooks).run(
            history, [ChatMessage(role="user", content=spec.task_text)], child_ctx, controller, _no_steering,
            stage=stage)
    finally:
        timer.cancel()
    usage = result.usage
    if result.status == "cancelled":
        if cancel.reason == "timeout":
            return Outcome(RUN_FAILED, f"it ran out of time after {spec.timeout_secs:g} s (the run's time limit)", usage)
        return Outcome(RUN_CANCELLED, "it was stopped before it finished", usage)
    if result.status != "completed":  # failed, or a plugin refused its next model call (a budget)
        return Outcome(RUN_FAILED, result.error or "it failed", usage)
    rounds = sum(1 for m in result.messages if m.role == "assistant" and m.tool_calls)
    if rounds > spec.max_iterations:
        return Outcome(RUN_FAILED, f"it made {spec.max_iterations} rounds of tool calls (subagents.max_iterations) "
                                   "without a final answer; give it a smaller or clearer task", usage)
    text = result.final_text.strip() or "(the sub-agent finished without saying anything)"
    return Outcome(RUN_COMPLETED, text[:MAX_STORED_RESULT_CHARS], usage)


def _no_steering() -> list[ChatMessage]:
    return []  # nobody types into a sub-agent's conversation
