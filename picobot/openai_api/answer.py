"""Where one input's answer is read from: its inbound row and the turn that claimed it (SQL, the record)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, select

from picobot.storage.models import (INBOUND_CANCELLED, INBOUND_DONE, INBOUND_FAILED, TURN_RUNNING, InboundRow,
                                    TurnRow)

_i = InboundRow.__table__
_t = TurnRow.__table__

_ANSWER = (select(_i.c.status, _i.c.turn_id, _t.c.status.label("turn_status"), _t.c.final_text, _t.c.error,
                  _t.c.input_tokens, _t.c.output_tokens)
           .select_from(_i.outerjoin(_t, _t.c.id == _i.c.turn_id))
           .where(_i.c.session_id == bindparam("sid"), _i.c.seq == bindparam("seq")))


@dataclass(frozen=True)
class Answer:
    status: str  # completed | failed | cancelled (the turn's, or the input's when it never ran)
    text: str
    error: str | None
    input_tokens: int
    output_tokens: int
    turn_id: str | None


def find(conn: Connection, session_id: str, seq: int) -> Answer | None:
    """The finished answer to input `seq` of the session, or None while it waits or runs."""
    row = conn.execute(_ANSWER, {"sid": session_id, "seq": seq}).first()
    if row is None:
        return None
    if row.status == INBOUND_CANCELLED:
        return Answer("cancelled", "", "The message was cancelled (/stop) before a turn took it.", 0, 0, None)
    if row.status not in (INBOUND_DONE, INBOUND_FAILED) or row.turn_status in (None, TURN_RUNNING):
        return None
    return Answer(row.turn_status, row.final_text or "", row.error, int(row.input_tokens or 0),
                  int(row.output_tokens or 0), row.turn_id)
