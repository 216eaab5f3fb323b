"""The durable inbox of background runs: a finished run becomes queued input of its parent session.

The result is written as an inbound row in the same transaction that ends the run, so it can be
lost by neither a crash nor a Redis restart; the session then runs a continuation turn for it like
for any message (the sweeper starts it if the wake-up is lost). It is steer input: reports that
arrive together are answered in one turn, and one that arrives while a turn of the dialog runs
joins that turn at its next safe boundary. The row is recognisable:
its platform message id is `subagent:<run id>` (which also makes a second delivery a no-op) and
its text opens with a header saying it comes from PicoBot, not from the user.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from picobot.domain.messages import Usage
from picobot.storage import agent_runs, inbound
from picobot.storage.models import MODE_STEER, RUN_COMPLETED

PLATFORM_ID_PREFIX = "subagent:"
MAX_REPORT_CHARS = 20_000
HEADER = "[Sub-agent result: delivered by PicoBot, not written by the user]"


def finish_and_post(conn: Connection, run: dict[str, Any], status: str, text: str, usage: Usage,
                    report: bool = True) -> bool:
    """End the running run and, when `report`, queue its report for the parent session. False if fenced out."""
    result, error = (text, None) if status == RUN_COMPLETED else (None, text)
    if not agent_runs.finish(conn, run["id"], run["session_id"], status, result, error, usage):
        return False
    if report:
        post(conn, run, status, text)
    return True


def post(conn: Connection, run: dict[str, Any], status: str, text: str) -> bool:
    """Queue the report of a background run for its session; False when the session is gone."""
    view = agent_runs.session_view(conn, run["session_id"])
    if view is None:
        return False
    inbound.enqueue(conn, run["session_id"], view.channel, report_text(run, status, text), run["sender_id"],
                    MODE_STEER, PLATFORM_ID_PREFIX + run["id"])
    return True


def report_text(run: dict[str, Any], status: str, text: str) -> str:
    if len(text) > MAX_REPORT_CHARS:
        text = text[:MAX_REPORT_CHARS] + f"\n[... cut; task action=get_result run_id={run['id']} has all of it]"
    what = "Result" if status == RUN_COMPLETED else "What happened"
    return (f"{HEADER}\nBackground run {run['id']} ({run['subagent_type']}: {run['description']}) {status}.\n\n"
            f"{what}:\n{text}\n\nTell the user what came of it.")
