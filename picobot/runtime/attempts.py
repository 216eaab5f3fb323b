"""No input can wedge its dialog: it is tried `gateway.max_turn_attempts` times, then reported.

A claim counts one attempt (`inbound.attempts`). When a turn cannot be finished — its worker
died, it lost its lease, or it raised where no failed turn could be recorded — its input is
given back here: back to the queue while attempts remain, else ended as a visible failed turn
(the input and a notice stored, `turn_completed` with status `failed`). The stored input is
kept from the model afterwards, so the same input cannot fail the dialog's later turns too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from picobot.domain.messages import MARKER_TURN_ERROR, ChatMessage
from picobot.storage import inbound, messages, turns
from picobot.storage.models import INBOUND_FAILED

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.turns")

MARKER_FAILED_INPUT = "failed_input"  # an input given up on: shown in history, never sent to the model


def give_back(conn: Connection, session_id: str, turn_id: str, max_attempts: int, why: str,
              ports: "Ports | None" = None, after: list | None = None) -> dict[str, Any] | None:
    """Re-queue a dead turn's input, or end it failed; returns the `turn_completed` event when it ended.

    Part of the caller's transaction; the caller publishes the event after the commit and runs what
    `after` collected (the plugins' after-commit work: an external chat's notice, recorded here
    when `ports` is given, wakes its delivery lane).
    """
    rows = inbound.claimed_by(conn, turn_id)
    if not rows:
        return None
    tried = max(r.attempts for r in rows)
    if tried < max_attempts:
        inbound.release_claims(conn, turn_id)
        return None
    error = (f"Your message could not be answered: {why}, {tried} time(s) "
             f"(gateway.max_turn_attempts is {max_attempts}). Send it again, perhaps reworded.")
    inbound.set_status(conn, [r.id for r in rows], INBOUND_FAILED)
    turns.mark_failed(conn, turn_id, error)
    _record(conn, session_id, turn_id, rows, error)
    if ports is not None:
        found = _notify(conn, ports, session_id, turn_id, rows, error)
        if after is not None:
            after.extend(found)
    log.warning("turn %s: input %s of %s given up after %d attempt(s): %s", turn_id, [r.seq for r in rows],
                session_id, tried, why)
    return failed_event(session_id, turn_id, [r.seq for r in rows], error)


def _record(conn: Connection, session_id: str, turn_id: str, rows: list[inbound.Input], error: str) -> None:
    """Store the input and the notice; if the input itself cannot be stored, the notice alone."""
    note = ChatMessage(role="assistant", content=f"⚠ {error}", marker=MARKER_TURN_ERROR)
    inputs = [ChatMessage(role="user", content=r.content, marker=MARKER_FAILED_INPUT) for r in rows]
    try:
        with conn.begin_nested():
            messages.append(conn, session_id, turn_id, inputs + [note])
            return
    except (SQLAlchemyError, ValueError) as exc:  # ValueError: text the database cannot encode
        log.warning("turn %s: the failed input could not be stored (%s); storing the notice alone",
                    turn_id, type(exc).__name__)
    messages.append(conn, session_id, turn_id, [note])


def _notify(conn: Connection, ports: "Ports", session_id: str, turn_id: str, rows: list[inbound.Input],
            error: str) -> list:
    """Tell the plugins in this transaction that the turn ended failed (an external chat's notice)."""
    from picobot.plugins.types import TurnView
    from picobot.storage import sessions

    view = sessions.claim_view(conn, session_id)
    if view is None:
        return []
    turn = TurnView(session_id=session_id, turn_id=turn_id, channel=view.channel, chat_id=view.chat_id,
                    sender_id=rows[0].sender_id if rows else "", agent=view.agent, status="failed", final_text="",
                    error=error, input_ids=tuple(r.platform_message_id for r in rows if r.platform_message_id),
                    committed=False)
    return ports.plugins.call("picobot_turn_committed", conn=conn, turn=turn, ports=ports)


def failed_event(session_id: str, turn_id: str, seqs: list[int], error: str) -> dict[str, Any]:
    return {"type": "turn_completed", "session_id": session_id, "turn_id": turn_id, "status": "failed",
            "final_text": "", "error": error, "inbound_seqs": seqs, "usage": {"input_tokens": 0, "output_tokens": 0}}
