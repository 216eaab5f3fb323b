"""`scheduler_manage`: the agent lists, reads, creates, edits, pauses, resumes and deletes scheduled jobs.

Thin: every rule (job JSON, schedules, who may see which job) lives in picobot/scheduler; this
module turns a tool call into a JobService call as the turn's chat; its errors (JobError naming
the field, an unknown or another chat's job) are ToolErrors the model reads. The web and cli_chat
channels are the install's owner (a paired device); the description stays tiny (prompt budget).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from picobot.domain.scope import OWNER_CHANNELS
from picobot.errors import ToolError
from picobot.tools.base import Tool, ToolContext

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports
    from picobot.scheduler.manage import Actor

ACTIONS = ("list", "get", "put", "delete", "pause", "resume")
_TIME_FIELDS = ("next_due_at", "created_at", "updated_at", "due_at", "started_at", "ended_at")
_LIST_FIELDS = ("id", "kind", "state", "schedule_text", "next_due_at", "last_outcome", "target")


class SchedulerTool(Tool):
    name = "scheduler_manage"
    description = (
        "put job: {id, kind: agent_task|silent_agent_task|outbound_message, schedule: {type: "
        "cron|interval|delay|at, expression|seconds|at}, payload: {prompt}|{text}, target?: this chat}."
    )
    parameters = {
        "type": "object",
        "properties": {"action": {"enum": list(ACTIONS)}, "job_id": {"type": "string"}, "job": {"type": "object"}},
        "required": ["action"],
    }

    def __init__(self, rt: Ports):
        self.rt = rt

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        from picobot.scheduler.manage import JobService

        action = args["action"]
        service, actor = JobService(self.rt), actor_of(ctx)
        if action == "list":
            jobs = service.list(actor)
            return _dump([{k: j.get(k) for k in _LIST_FIELDS} for j in jobs], ctx) if jobs else "No jobs."
        if action == "get":
            return _dump(service.get(actor, _job_id(args), runs=10), ctx)
        target = _job(args) if action == "put" else _job_id(args)
        with ctx.gate.side_effect():  # a stopped turn changes nothing more
            return _dump(getattr(service, action)(actor, target), ctx)


def actor_of(ctx: ToolContext) -> Actor:
    from picobot.scheduler.manage import Actor

    return Actor(channel=ctx.channel, chat_id=ctx.chat_id, sender_id=ctx.sender_id,
                 owner=ctx.channel in OWNER_CHANNELS)


def _job(args: dict[str, Any]) -> dict[str, Any]:
    job = args.get("job")
    if not isinstance(job, dict) or not job:
        raise ToolError("job: put needs `job`, the job JSON object ({id, kind, schedule, payload}).")
    if args.get("job_id") and job.get("id") not in (None, args["job_id"]):
        raise ToolError("job.id: differs from job_id; give one id.")
    return {**job, "id": job.get("id") or args["job_id"]} if args.get("job_id") else job


def _job_id(args: dict[str, Any]) -> str:
    job_id = args.get("job_id")
    if not isinstance(job_id, str) or not job_id.strip():
        raise ToolError(f"job_id: {args['action']} needs `job_id` (list shows them).")
    return job_id


def _dump(value: Any, ctx: ToolContext) -> str:
    return json.dumps(_readable(value, _zone(ctx.timezone)), ensure_ascii=False)


def _zone(name: str) -> Any:
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError, OSError):
        return timezone.utc


def _readable(value: Any, tz: Any) -> Any:
    """Times as the model reads them: ISO text in the user's zone rather than epoch seconds."""
    if isinstance(value, list):
        return [_readable(v, tz) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key in _TIME_FIELDS and isinstance(item, (int, float)) and not isinstance(item, bool):
            item = datetime.fromtimestamp(item, tz).isoformat(timespec="seconds")
        out[key] = _readable(item, tz)
    return out
