"""What a resolved agent turns into for a run: its loop settings and its tools (its allowlist applied)."""

from __future__ import annotations

from typing import Any

from picobot.agent.loop import LoopSettings
from picobot.config.schema import ResolvedAgent
from picobot.tools.registry import ToolRegistry


def loop_settings(cfg: Any, resolved: ResolvedAgent) -> LoopSettings:
    """The AgentLoop settings of `resolved`'s model and limits."""
    return LoopSettings(
        model=resolved.model.model_id, temperature=resolved.model.temperature,
        max_tokens=resolved.model.max_tokens, options=dict(resolved.model.options),
        max_tool_iterations=resolved.agent.max_tool_iterations,
        tool_result_max_chars=resolved.agent.tool_result_max_chars,
        context_tool_result_trim_chars=resolved.agent.context_tool_result_trim_chars,
        idle_timeout_secs=resolved.provider.llm_timeout_secs + 5,
        max_parallel_tools=cfg.tools.max_parallel,
    )


def agent_tools(registry: ToolRegistry, resolved: ResolvedAgent) -> ToolRegistry:
    """`registry` narrowed to the agent's `tools` allowlist (all of it when the agent has none)."""
    if resolved.tools is None:
        return registry
    allowed = frozenset(resolved.tools)
    return registry.narrowed(lambda tool: tool.name in allowed)
