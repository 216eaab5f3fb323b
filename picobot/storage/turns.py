"""Turn records: one row per turn, with its status from start to completion."""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from picobot.domain.messages import Usage
from picobot.storage.models import TURN_RUNNING, TurnRow


def start(s: Session, turn_id: str, session_id: str, worker: str, attempt: int, inbound_seqs: list[int]) -> TurnRow:
    row = TurnRow(
        id=turn_id, session_id=session_id, status=TURN_RUNNING, worker=worker, attempt=attempt,
        started_at=time.time(), input_tokens=0, output_tokens=0, inbound_seqs=inbound_seqs,
    )
    s.add(row)
    return row


def finish(s: Session, turn_id: str, status: str, usage: Usage, final_text: str | None, error: str | None,
           inbound_seqs: list[int]) -> None:
    row = s.get(TurnRow, turn_id)
    if row is None:
        return
    row.status = status
    row.finished_at = time.time()
    row.input_tokens = usage.input_tokens
    row.output_tokens = usage.output_tokens
    row.final_text = final_text
    row.error = error
    row.inbound_seqs = inbound_seqs


def get(s: Session, turn_id: str) -> TurnRow | None:
    return s.get(TurnRow, turn_id)


def running(s: Session, session_id: str | None = None) -> list[TurnRow]:
    q = select(TurnRow).where(TurnRow.status == TURN_RUNNING)
    if session_id:
        q = q.where(TurnRow.session_id == session_id)
    return list(s.scalars(q))
