"""Plans on the plugin SDK: the `todo` tool, /plan, the plan's note in each turn, the socket's
`session_plan`, and plan items that follow the sub-agent runs working on them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from picobot import plans
from picobot.domain.messages import ChatMessage
from picobot.plugins import Command, hookimpl
from picobot.security.redact import redact
from picobot.storage import plans as sql

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from picobot.plugins.types import StageContext, SubagentRunView
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.plans")

RUN_NOTE_CHARS = 200  # of a sub-agent's result or error, kept as the item's note
_RUN_STATUS = {"queued": "in_progress", "running": "in_progress", "completed": "done"}  # anything else: blocked


class PlansPlugin:
    @hookimpl
    def picobot_tools(self, ports: "Ports") -> list[Any]:
        from picobot.plans.tool import TodoTool

        return [TodoTool(ports)]

    @hookimpl
    def picobot_commands(self, ports: "Ports") -> list[Command]:
        def plan(ctx: "StageContext", args: str) -> dict[str, Any]:
            session_id = _current(ports, ctx.channel, ctx.chat_id)
            found = plans.read(ports, session_id) if session_id else None
            return {"text": plans.render(found),
                    "data": {"session_id": session_id, "plan": found.as_dict() if found else None}}

        return [Command("plan", "This dialog's plan (the todo tool's)", plan)]

    @hookimpl
    def picobot_turn_notes(self, ctx: "StageContext", ports: "Ports") -> list[ChatMessage]:
        """The plan's summary before the turn's input: it outlives the compaction of the tool calls that made it."""
        found = plans.read(ports, ctx.session_id)
        return [ChatMessage(role="system", content=plans.summary(found))] if found and found.items else []

    @hookimpl
    def picobot_session_state(self, session_id: str, ports: "Ports") -> list[dict[str, Any]]:
        """`session_plan` when the dialog has a plan (none: a dialog without one costs its sockets nothing)."""
        found = plans.read(ports, session_id)
        return [plans.frame(session_id, found, "session_plan")] if found is not None else []

    @hookimpl
    def picobot_subagent_run(self, run: "SubagentRunView", ports: "Ports") -> None:
        """The item a run works on: in progress while it runs, then done, or blocked with what went wrong."""
        if run.plan_item_id is None:
            return
        status = _RUN_STATUS.get(run.status, "blocked")
        note = None if status == "in_progress" else redact(f"sub-agent {run.status}: {run.text}", ports.secrets)
        note = note[:RUN_NOTE_CHARS] if note is not None else None

        def edit(conn: "Connection", now: float) -> bool:
            plan_id = sql.lock(conn, run.session_id, now)
            return (plan_id is not None and run.plan_item_id is not None
                    and sql.set_status(conn, plan_id, run.plan_item_id, status, note, now))

        if not plans.change(ports, run.session_id, edit)[0]:
            log.info("run %s: dialog %s has no plan item %s", run.id, run.session_id, run.plan_item_id)


def _current(ports: "Ports", channel: str, chat_id: str) -> str | None:
    from picobot.storage import sessions

    with ports.db.read() as s:
        row = sessions.current(s, channel, chat_id)
        return row.id if row is not None else None
