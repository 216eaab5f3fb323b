"""`task` actions get, list, get_result and cancel: the runs of the calling session, and only those."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from picobot.errors import ToolError
from picobot.storage import agent_runs
from picobot.storage.models import RUN_ACTIVE, RUN_COMPLETED
from picobot.subagents.control import cancel_run
from picobot.tools.base import ToolContext

if TYPE_CHECKING:
    from picobot.runtime.ports import AgentPorts

LIST_LIMIT = 20
_RUN_ID = re.compile(r"[0-9a-f]{32}")


def manage(rt: "AgentPorts", action: str, run_id: Any, ctx: ToolContext) -> str:
    if action == "list":
        return _list(rt, ctx.session_id)
    run = _own_run(rt, run_id, ctx.session_id)
    if action == "get":
        return _describe(run)
    if action == "get_result":
        return _result(run)
    if action == "cancel":
        return _cancel(rt, run)
    raise ToolError(f"Unknown action {action!r}: use run, get, list, get_result or cancel.")


def _own_run(rt: "AgentPorts", run_id: Any, session_id: str) -> dict[str, Any]:
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id.strip().lower()):
        raise ToolError("Give `run_id`: the 32-character id task returned (action=list shows them).")
    with rt.db.connect() as conn:
        run = agent_runs.get(conn, run_id.strip().lower())
    if run is None or run["session_id"] != session_id:
        raise ToolError(f"There is no run {run_id} in this chat; action=list shows its runs.")
    return run


def _list(rt: "AgentPorts", session_id: str) -> str:
    with rt.db.connect() as conn:
        runs = agent_runs.of_session(conn, session_id, LIST_LIMIT)
    if not runs:
        return "No sub-agent runs in this chat yet."
    return "\n".join(_line(r) for r in runs)


def _line(run: dict[str, Any]) -> str:
    mode = "background" if run["background"] else "foreground"
    return f"{run['id']} {run['status']} {run['subagent_type']} {mode}: {run['description'][:80]}"


def _describe(run: dict[str, Any]) -> str:
    lines = [_line(run), f"depth {run['depth']}, tokens in {run['input_tokens']} / out {run['output_tokens']}"]
    if run["started_at"]:
        end = run["finished_at"] or time.time()
        lines.append(f"ran {end - run['started_at']:.1f} s" + ("" if run["finished_at"] else " so far"))
    if run["error"]:
        lines.append(f"error: {run['error']}")
    if run["status"] == RUN_COMPLETED:
        lines.append("action=get_result gives its result.")
    return "\n".join(lines)


def _result(run: dict[str, Any]) -> str:
    if run["status"] == RUN_COMPLETED:
        return run["result"] or ""
    if run["status"] in RUN_ACTIVE:
        return f"Run {run['id']} is {run['status']}; it has no result yet."
    return f"Run {run['id']} ended {run['status']} without a result: {run['error'] or 'no reason recorded'}."


def _cancel(rt: "AgentPorts", run: dict[str, Any]) -> str:
    if run["status"] not in RUN_ACTIVE:
        return f"Run {run['id']} has already ended ({run['status']})."
    if not run["background"]:
        raise ToolError("A foreground run ends with the call that started it; only background runs can be cancelled.")
    cancel_run(rt.db, rt.redis, run["id"], "cancelled by the agent")
    return f"Run {run['id']} is being cancelled; it reports nothing more."
