"""The `task` tool: delegate to a sub-agent in the foreground or background, and manage runs.

Every run is admitted (limits checked, row inserted) in one transaction, then runs with a tool set
narrowed from its parent's: by the definition, by the depth limit, never widened. A foreground run
executes in this tool call's thread; a background one is queued as a Celery task and reports back
through the parent session's inbox (see inbox.py).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import uuid
from typing import TYPE_CHECKING, Any

from picobot.agent.snapshot import TurnController
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import Usage
from picobot.domain.text import repair_text
from picobot.errors import ConfigError, ToolError
from picobot.runtime.agent_setup import agent_tools, loop_settings
from picobot.runtime.provider_chain import agent_provider
from picobot.storage import agent_runs
from picobot.storage.agent_runs import NewRun
from picobot.storage.models import RUN_COMPLETED, RUN_FAILED, RUN_QUEUED, RUN_RUNNING
from picobot.subagents.catalog import SubagentCatalog
from picobot.subagents.definitions import GENERAL, Definition
from picobot.subagents.manage import manage
from picobot.subagents.runner import TASK_TOOL, ChildSpec, Outcome, child_tools, report_run, run_child
from picobot.tools.base import RunningAgent, Tool, ToolContext
from picobot.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from picobot.config.schema import ResolvedAgent
    from picobot.runtime.ports import AgentPorts

log = logging.getLogger("picobot.subagents")

MAX_DESCRIPTION_CHARS = 500
MAX_PROMPT_CHARS = 50_000
MAX_TYPES_CHARS = 400  # the custom types listed in the tool's description
MAX_PLAN_ITEM_ID = 10_000
_AGENT_PROMPT = (
    "Another agent handed you one task. Work on it alone with your tools; nobody will answer questions. "
    "Your final answer is returned to that agent as the task's result: make it a complete, concise report."
)

_DESCRIPTION = (
    "Hand a self-contained task to a sub-agent (own history, your tools or fewer); prompt: full "
    "instructions. Parallel calls run at once. background: the result comes later as a message. "
    "action + run_id manage runs. Types: general, explore (read-only), a named agent"
)


@dataclasses.dataclass(frozen=True)
class _Request:
    description: str
    prompt: str
    subagent_type: str
    background: bool
    plan_item_id: int | None = None  # the dialog's plan item the run works on: it follows the run


class TaskTool(Tool):
    name = TASK_TOOL
    parameters = {
        "type": "object",
        "properties": {
            "description": {"type": "string"},
            "prompt": {"type": "string"},
            "subagent_type": {"type": "string"},
            "background": {"type": "boolean"},
            "action": {"enum": ["run", "get", "list", "get_result", "cancel"]},
            "run_id": {"type": "string"},
            "plan_item_id": {"type": "integer"},
        },
        "additionalProperties": False,
    }

    def __init__(self, rt: "AgentPorts", depth: int = 0, parent_run_id: str | None = None,
                 catalog: SubagentCatalog | None = None):
        self.rt = rt
        self.depth = depth  # of the agent holding this tool: 0 is the session's own agent
        self.parent_run_id = parent_run_id
        cfg = rt.config
        self.catalog = catalog or SubagentCatalog(cfg.home, cfg.workspace_path(), list(cfg.subagents.sources))

    # A read-only property where Tool has a plain attribute: mypy is right that assigning it would fail, and
    # nothing assigns a tool's description; the list of agent types must be read fresh on each schema build.
    @property
    def description(self) -> str:  # type: ignore[override]
        custom = [f"{d.name} ({d.description})" for d in self.catalog.all().values() if d.source != "builtin"]
        listed = "; ".join(custom)
        if len(listed) > MAX_TYPES_CHARS:
            listed = listed[:MAX_TYPES_CHARS - 3] + "..."
        text = f"{_DESCRIPTION}; {listed}." if listed else f"{_DESCRIPTION}."
        agents = "; ".join(f"{a.id} ({a.description})" if a.description else a.id
                           for a in self.rt.config.agent_files().current().agents.values())
        if agents:
            text += f" Agents: {agents[:MAX_TYPES_CHARS]}."
        return text

    def for_child(self, run_id: str) -> "TaskTool":
        return TaskTool(self.rt, self.depth + 1, run_id, self.catalog)

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        action = args.get("action") or "run"
        if action != "run":
            return manage(self.rt, action, args.get("run_id"), ctx)
        request = _request(args)
        if ctx.agent is None:
            raise ToolError("task runs only inside an agent's turn.")
        if request.background and self.depth > 0:
            raise ToolError("Only the main agent can start background runs; call task again without background.")
        target = self._named_agent(request, ctx)
        if target is not None:
            run, spec, tools, child = self._prepare_agent(request, target, ctx)
            self._admit(run, ctx)
            self._report(run, RUN_QUEUED if request.background else RUN_RUNNING)
            if request.background:
                return self._start_background(run, ctx.agent)
            return self._run_foreground(run, spec, tools, ctx.agent, child, target)
        definition = self.catalog.get(request.subagent_type)
        note = ""
        if definition is None:
            note = (f"\n\nNote: there is no sub-agent type {request.subagent_type!r}; it ran as 'general'. "
                    f"Types: {', '.join(self.catalog.all())}.")
            definition = GENERAL
        run, spec, tools = self._prepare(request, definition, ctx.agent, ctx)
        self._admit(run, ctx)
        self._report(run, RUN_QUEUED if request.background else RUN_RUNNING)
        if request.background:
            return self._start_background(run, ctx.agent) + note
        return self._run_foreground(run, spec, tools, ctx.agent, ctx) + note

    # --- a named agent ----------------------------------------------------------------------

    def _named_agent(self, req: _Request, ctx: ToolContext) -> "ResolvedAgent | None":
        """The agent `subagent_type` names when no sub-agent type has that name; ToolError when it is not
        among the calling agent's `delegates`."""
        if self.catalog.get(req.subagent_type) is not None:
            return None
        name = req.subagent_type
        try:
            self.rt.config.agent(name)
        except ConfigError:
            return None  # no such agent either: the old way (runs as 'general', with a note)
        if ctx.delegates is not None and name not in ctx.delegates:
            allowed = ", ".join(ctx.delegates) or "none"
            raise ToolError(f"Not started: agent {ctx.agent_name!r} may not hand work to {name!r}; "
                            f"its delegates are: {allowed}. Do it yourself or choose one of those.")
        try:
            return self.rt.config.agent(name)
        except ConfigError as exc:
            raise ToolError(f"Not started: agent {name!r} cannot run: {exc.reason}") from None

    def _prepare_agent(self, req: _Request, target: "ResolvedAgent",
                       ctx: ToolContext) -> tuple[NewRun, ChildSpec, ToolRegistry, ToolContext]:
        cfg = self.rt.config.subagents
        run_id = uuid.uuid4().hex
        depth = self.depth + 1
        own = agent_tools(self.rt.tools(), target)  # its own tools, not its caller's
        may_delegate = TASK_TOOL in own and depth < cfg.max_depth
        tools = child_tools(own, lambda t: True, self.for_child(run_id) if may_delegate else None)
        parts = [_AGENT_PROMPT, target.instructions or target.agent.system_prompt or ""]
        system_prompt = "\n\n".join(p for p in parts if p)
        settings = loop_settings(self.rt.config, target)
        spec = ChildSpec(run_id, system_prompt, f"Task: {req.description}\n\n{req.prompt}",
                         min(cfg.timeout_secs, target.timeout_secs or math.inf),
                         min(cfg.max_iterations, settings.max_tool_iterations))
        child = dataclasses.replace(ctx, agent_name=target.name, delegates=target.delegates, skills=target.skills)
        snapshot = {"name": target.name, "source": f"agent:{target.source}", "path": None, "read_only": False,
                    "allowed_tools": list(target.tools) if target.tools is not None else None,
                    "max_execution_secs": target.timeout_secs, "generation": target.generation,
                    "requested_type": req.subagent_type, "plan_item_id": req.plan_item_id, "run": {
            "tools": tools.names(), "system_prompt": spec.system_prompt, "task_text": spec.task_text,
            "timeout_secs": spec.timeout_secs, "max_iterations": spec.max_iterations,
            "provider": target.provider_key, "settings": dataclasses.asdict(settings),
            "workspace": str(ctx.workspace), "channel": ctx.channel, "chat_id": ctx.chat_id, "timezone": ctx.timezone,
            "agent_name": target.name, "delegates": _listed(target.delegates), "skills": _listed(target.skills),
        }}
        run = NewRun(run_id, ctx.session_id, ctx.turn_id, self.parent_run_id, depth, req.background, target.name,
                     snapshot, req.description, req.prompt, ctx.sender_id)
        return run, spec, tools, child

    # --- preparing a run ------------------------------------------------------------------

    def _prepare(self, req: _Request, definition: Definition, parent: RunningAgent,
                 ctx: ToolContext) -> tuple[NewRun, ChildSpec, ToolRegistry]:
        cfg = self.rt.config.subagents
        run_id = uuid.uuid4().hex
        depth = self.depth + 1
        delegates = not definition.read_only and (definition.allowed_tools is None or TASK_TOOL in definition.allowed_tools)
        task_tool = self.for_child(run_id) if delegates and depth < cfg.max_depth and TASK_TOOL in parent.tools else None
        tools = child_tools(parent.tools, lambda t: _allowed(definition, t), task_tool)
        system_prompt = definition.system_prompt(req.description, req.prompt)
        if delegates and task_tool is None:
            system_prompt += (f"\n\nYou cannot start sub-agents yourself: the delegation depth limit "
                              f"(subagents.max_depth = {cfg.max_depth}) is reached.")
        spec = ChildSpec(run_id, system_prompt, f"Task: {req.description}\n\n{req.prompt}",
                         min(cfg.timeout_secs, definition.max_execution_secs or math.inf),
                         min(cfg.max_iterations, parent.settings.max_tool_iterations))
        snapshot = {**definition.snapshot(), "requested_type": req.subagent_type, "plan_item_id": req.plan_item_id,
                    "run": {
            "tools": tools.names(), "system_prompt": spec.system_prompt, "task_text": spec.task_text,
            "timeout_secs": spec.timeout_secs, "max_iterations": spec.max_iterations,
            "provider": parent.provider.key, "settings": dataclasses.asdict(parent.settings),
            "workspace": str(ctx.workspace), "channel": ctx.channel, "chat_id": ctx.chat_id, "timezone": ctx.timezone,
        }}
        run = NewRun(run_id, ctx.session_id, ctx.turn_id, self.parent_run_id, depth, req.background, definition.name,
                     snapshot, req.description, req.prompt, ctx.sender_id)
        return run, spec, tools

    def _report(self, run: NewRun, status: str, text: str = "") -> None:
        """The run's admission or end, for the plugins (a plan item follows it)."""
        report_run(self.rt, run.id, run.session_id, status, text, run.subagent_type, run.description,
                   run.definition.get("plan_item_id"))

    def _admit(self, run: NewRun, ctx: ToolContext) -> None:
        limit = self.rt.config.subagents.max_children_per_turn
        with self.rt.db.begin() as conn:
            agent_runs.lock_session(conn, run.session_id)
            started = agent_runs.children_started(conn, run.turn_id, run.parent_run_id)
            if started >= limit:
                raise ToolError(f"Not started: this agent already started {started} sub-agent runs in this turn, "
                                f"the limit (subagents.max_children_per_turn = {limit}). Do the rest yourself.")
            agent_runs.insert_run(conn, run, worker=None if run.background else self.rt.worker_name)

    # --- foreground -----------------------------------------------------------------------

    def _run_foreground(self, run: NewRun, spec: ChildSpec, tools: Any, parent: RunningAgent,
                        ctx: ToolContext, target: "ResolvedAgent | None" = None) -> str:
        outcome = self._outcome(run, spec, tools, parent, ctx, target)
        self._report(run, outcome.status, outcome.text)
        if outcome.status != RUN_COMPLETED:
            raise ToolError(f"Sub-agent run {run.id} ({run.subagent_type}) {outcome.status}: {outcome.text}.")
        return f"Sub-agent run {run.id} ({run.subagent_type}) completed:\n\n{outcome.text}"

    def _outcome(self, run: NewRun, spec: ChildSpec, tools: Any, parent: RunningAgent,
                 ctx: ToolContext, target: "ResolvedAgent | None") -> Outcome:
        events: TurnController = parent.events
        events.subagent_started(run.id, _block_info(run, RUN_RUNNING))
        controller = TurnController(ctx.session_id, run.id,
                                    show_tool_results=self.rt.config.gateway.show_tool_results)
        controller.listener = lambda: events.subagent_progress(run.id, controller.snapshot()["blocks"])
        cancel = CancelToken()
        unhook = ctx.cancel.on_cancel(lambda: cancel.cancel("stopped"))  # /stop of the parent stops the child
        self.rt.track_turn(run.id, True)
        try:
            if target is None:
                provider, settings = parent.provider, parent.settings
            else:  # a named agent: its own model
                provider, settings = agent_provider(self.rt, target), loop_settings(self.rt.config, target)
            outcome = run_child(spec, provider, tools, settings, ctx, cancel, controller, parent.hooks,
                                parent.stage)
        except Exception as exc:  # a bug or infrastructure failure: recorded, and the parent model is told
            log.exception("sub-agent run %s crashed", run.id)
            outcome = Outcome(RUN_FAILED, f"internal error while running it ({type(exc).__name__})", Usage())
        finally:
            unhook()
            self.rt.track_turn(run.id, False)
        with self.rt.db.begin() as conn:
            result, error = (outcome.text, None) if outcome.status == RUN_COMPLETED else (None, outcome.text)
            agent_runs.finish(conn, run.id, run.session_id, outcome.status, result, error, outcome.usage)
        events.subagent_progress(run.id, status=outcome.status, usage=_usage(outcome.usage))
        return outcome

    # --- background -----------------------------------------------------------------------

    def _start_background(self, run: NewRun, parent: RunningAgent) -> str:
        parent.events.subagent_started(run.id, _block_info(run, RUN_QUEUED))
        try:
            self.rt.queue.enqueue_subagent(run.id)
        except Exception as exc:  # queued in SQL: the sweeper enqueues it again
            log.warning("background run %s stored but not enqueued (%s)", run.id, type(exc).__name__)
        return (f"Started background run {run.id} ({run.subagent_type}). Its result will arrive later as a "
                f"message in this chat; do not wait for it. Check on it with action=get run_id={run.id}.")


def _listed(names: tuple[str, ...] | None) -> list[str] | None:
    return list(names) if names is not None else None


def _allowed(definition: Definition, tool: Tool) -> bool:
    if definition.read_only and not tool.read_only:
        return False
    return definition.allowed_tools is None or tool.name in definition.allowed_tools


def _block_info(run: NewRun, status: str) -> dict[str, Any]:
    return {"subagent_type": run.subagent_type, "description": run.description, "background": run.background,
            "depth": run.depth, "status": status}


def _usage(usage: Usage) -> dict[str, int]:
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}


def _request(args: dict[str, Any]) -> _Request:
    description = _text(args, "description", MAX_DESCRIPTION_CHARS, "a short title of the task")
    prompt = _text(args, "prompt", MAX_PROMPT_CHARS, "the complete instructions for the sub-agent")
    kind = repair_text(str(args.get("subagent_type") or "general")).strip()[:64] or "general"
    # a named agent is asked for by `subagent_type` (one argument less in every prompt)
    return _Request(description, prompt, kind, bool(args.get("background", False)), _plan_item(args))


def _plan_item(args: dict[str, Any]) -> int | None:
    item = args.get("plan_item_id")
    if isinstance(item, float) and item.is_integer():  # 2.0: an integer to JSON Schema too
        item = int(item)
    if item is not None and (isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= MAX_PLAN_ITEM_ID):
        raise ToolError("`plan_item_id`: the number of an item of this dialog's plan (todo list shows them).")
    return item


def _text(args: dict[str, Any], key: str, limit: int, what: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"`{key}` is missing or empty: give {what}.")
    if len(value) > limit:
        raise ToolError(f"`{key}` has {len(value)} characters; the limit is {limit}. Shorten it, or put the "
                        "material in a file the sub-agent can read and name the file.")
    return repair_text(value.strip())
