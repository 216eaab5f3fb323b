"""Sub-agents on the plugin SDK: the `task` tool, recovery of dead workers' runs, /stop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from picobot.plugins import hookimpl
from picobot.runtime.task_names import SUBAGENT_TASK

if TYPE_CHECKING:
    from picobot.runtime.ports import AgentPorts


class SubagentsPlugin:
    @hookimpl
    def picobot_tasks(self, register: Any) -> None:
        register(SUBAGENT_TASK, _run_background, queue="subagents")

    @hookimpl
    def picobot_tools(self, ports: "AgentPorts") -> list[Any]:
        if not ports.config.subagents.enabled:
            return []
        from picobot.subagents.tool import TaskTool

        return [TaskTool(ports)]

    @hookimpl
    def picobot_sweep(self, ports: "AgentPorts") -> None:
        from picobot.subagents.recovery import recover_runs

        recover_runs(ports)  # a background run's report is input for the sweeper's session check

    @hookimpl
    def picobot_session_stopped(self, session_id: str, ports: "AgentPorts") -> None:
        from picobot.subagents.control import stop_session_runs

        stop_session_runs(ports.db, ports.redis, session_id)  # background runs of the dialog too


def _run_background(ports: "AgentPorts", run_id: str) -> str:
    """Run one background sub-agent run and deliver its result to the parent session."""
    from picobot.subagents.background import run_background_run

    return run_background_run(ports, run_id)
