"""A background run, as its Celery task executes it: claim, run, deliver the result to the parent session."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from picobot.agent.loop import LoopSettings
from picobot.agent.snapshot import TurnController
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import Usage
from picobot.runtime import placement
from picobot.runtime.session_messages import SessionMessenger
from picobot.storage import agent_runs
from picobot.storage.models import RUN_CANCELLED, RUN_FAILED
from picobot.subagents.control import StopPoller
from picobot.subagents.inbox import finish_and_post
from picobot.subagents.runner import TASK_TOOL, ChildSpec, Outcome, child_tools, report_run, run_child
from picobot.tools.base import ToolContext

if TYPE_CHECKING:
    from picobot.runtime.ports import AgentPorts

log = logging.getLogger("picobot.subagents")


def run_background_run(rt: "AgentPorts", run_id: str) -> str:
    """Run a queued run to its end; returns its final status ("skipped" if it was not queued,
    "forwarded" when its chat's files are on another live worker host: sent to that host's queue)."""
    with rt.db.connect() as conn:
        queued = agent_runs.get(conn, run_id)
    queue = placement.route(rt, queued["session_id"]) if queued is not None else None
    if queue is not None:
        rt.queue.enqueue_subagent(run_id, queue=queue)
        return "forwarded"
    with rt.db.begin() as conn:
        if not agent_runs.claim(conn, run_id, rt.worker_name):
            return "skipped"  # cancelled while queued, or another worker has it
        run = agent_runs.get(conn, run_id)
    assert run is not None
    rt.track_turn(run_id, True)  # the heartbeat reports it: the sweeper knows it is alive
    try:
        outcome = _execute(rt, run)
    except Exception as exc:  # a bug or an infrastructure failure: the parent is still told
        log.exception("background run %s crashed", run_id)
        outcome = Outcome(RUN_FAILED, f"internal error while running it ({type(exc).__name__})", Usage())
    finally:
        rt.track_turn(run_id, False)
    # stopped by /stop or `task action=cancel`: the one who stopped it knows; nothing to report
    report = outcome.status != RUN_CANCELLED
    with rt.db.begin() as conn:
        posted = finish_and_post(conn, run, outcome.status, outcome.text, outcome.usage, report)
    report_run(rt, run_id, run["session_id"], outcome.status, outcome.text, run["subagent_type"],
               run["description"], (run["definition"] or {}).get("plan_item_id"))
    if posted and report:
        _wake(rt, run["session_id"])
    log.info("background run %s %s", run_id, outcome.status)
    return outcome.status


def _execute(rt: "AgentPorts", run: dict[str, Any]) -> Outcome:
    parent = run["definition"]["run"]
    names = set(parent["tools"])  # as admitted: what the parent had then, narrowed; never more now
    root = rt.tools().get(TASK_TOOL)  # background runs are started by the main agent only (depth 0)
    task_tool = (root.for_child(run["id"])
                 if TASK_TOOL in names and root is not None and hasattr(root, "for_child") else None)
    tools = child_tools(rt.tools(), lambda t: t.name in names, task_tool)
    cancel = CancelToken()
    poller = StopPoller(rt.redis, run["id"], cancel)
    try:
        spec = ChildSpec(run["id"], parent["system_prompt"], parent["task_text"], float(parent["timeout_secs"]),
                         int(parent["max_iterations"]))
        return run_child(spec, rt.provider(parent["provider"]), tools, LoopSettings(**parent["settings"]),
                         _context(rt, run, parent), cancel, TurnController(run["session_id"], run["id"]), rt.plugins)
    finally:
        poller.close()


def _context(rt: "AgentPorts", run: dict[str, Any], parent: dict[str, Any]) -> ToolContext:
    workspace = Path(parent["workspace"])
    workspace.mkdir(parents=True, exist_ok=True)
    return ToolContext(
        session_id=run["session_id"], channel=parent["channel"], chat_id=parent["chat_id"], sender_id=run["sender_id"],
        turn_id=run["turn_id"], workspace=workspace, timezone=parent["timezone"],
        send_message=SessionMessenger(rt, run["session_id"], parent["channel"], parent["chat_id"]),
        settings=rt.config.tools.model_dump(), secrets=rt.secrets,
        # a named agent's run keeps its name and allowlists (as admitted); a sub-agent type's has none
        agent_name=parent.get("agent_name") or "default", delegates=_names(parent.get("delegates")),
        skills=_names(parent.get("skills")),
    )


def _names(value: Any) -> tuple[str, ...] | None:
    return tuple(str(v) for v in value) if isinstance(value, list) else None


def _wake(rt: "AgentPorts", session_id: str) -> None:
    try:
        rt.queue.enqueue_turn(session_id)
    except Exception as exc:  # the report is stored: the sweeper starts its turn once Redis is back
        log.warning("sub-agent report for %s stored but not enqueued (%s)", session_id, type(exc).__name__)
