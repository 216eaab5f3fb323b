"""Session plans: a dialog's one plan of work, kept in SQL and shown to the model, the user and the web UI.

    todo tool (tool.py)          create, update, add, list, clear: one plan per dialog (storage/plans.py)
    every change                 -> `plan_updated` to the dialog's sockets (and its chat's, for unread marks)
    a turn of a dialog with one  -> a short summary of it as a runtime note (survives compaction)
    /plan                        -> the plan as text, in every channel
    a socket watching a dialog   -> `session_plan` (its plan or null)
    `task` with plan_item_id     -> the item follows the sub-agent run (picobot_subagent_run)

The core and the other capabilities know none of this: the plugin (plugin.py) answers their hooks.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from picobot.storage import plans as sql
from picobot.storage.plans import Plan

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from picobot.runtime.ports import Ports

T = TypeVar("T")

STATUSES = ("pending", "in_progress", "done", "blocked")
MAX_ITEMS = 50  # per plan: a plan longer than that is a backlog, not a plan
MAX_TEXT_CHARS = 500  # an item's text, a note
MAX_TITLE_CHARS = 200
SUMMARY_CHARS = 300  # the runtime note of a turn
_MARKS = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]", "blocked": "[!]"}


def read(ports: "Ports", session_id: str) -> Plan | None:
    with ports.db.connect() as conn:
        return sql.get(conn, session_id)


def change(ports: "Ports", session_id: str, edit: Callable[["Connection", float], T]) -> tuple[T, Plan | None]:
    """Run `edit(conn, now)` in one transaction, then tell the dialog's watchers the plan as it is now
    (unless the edit returned False: nothing changed)."""
    with ports.db.begin() as conn:
        outcome = edit(conn, time.time())
        plan = sql.get(conn, session_id)
    if outcome is not False:
        publish(ports, session_id, plan)
    return outcome, plan


def frame(session_id: str, plan: Plan | None, kind: str = "plan_updated") -> dict[str, Any]:
    return {"type": kind, "session_id": session_id, "plan": plan.as_dict() if plan is not None else None}


def publish(ports: "Ports", session_id: str, plan: Plan | None) -> None:
    ports.publisher.publish(frame(session_id, plan))


def render(plan: Plan | None) -> str:
    """The plan as text (the tool's answers, /plan)."""
    if plan is None:
        return "No plan in this dialog."
    done = sum(1 for i in plan.items if i.status == "done")
    lines = [f"Plan: {plan.title} ({done}/{len(plan.items)} done)"]
    for item in plan.items:
        note = f" — {item.note}" if item.note else ""
        lines.append(f"{item.id}. {_MARKS.get(item.status, '[?]')} {item.text}{note}")
    return "\n".join(lines)


def summary(plan: Plan) -> str:
    """At most SUMMARY_CHARS: the title, progress and the unfinished items (the turn's runtime note)."""
    done = sum(1 for i in plan.items if i.status == "done")
    text = f"[Plan] {plan.title[:80]} ({done}/{len(plan.items)} done; todo list shows it)"
    for item in plan.items:
        if item.status == "done":
            continue
        line = f"\n{item.id} {item.status}: {item.text[:60]}"
        if len(text) + len(line) > SUMMARY_CHARS - 4:
            return text + "\n…"
        text += line
    return text
