"""The inbound queue: every accepted user input, drained by turns in sequence order."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from picobot.storage import sessions
from picobot.storage.models import (
    INBOUND_CANCELLED, INBOUND_CLAIMED, INBOUND_DONE, INBOUND_PENDING, MODE_QUEUE, MODE_STEER, InboundRow,
)


def enqueue(
    s: Session, session_id: str, channel: str, content: Any, sender_id: str, mode: str = MODE_STEER,
    platform_message_id: str | None = None,
) -> tuple[InboundRow, bool]:
    """Record input durably; returns (row, created). A repeated platform id returns the first row."""
    if platform_message_id:
        existing = s.scalars(
            select(InboundRow).where(InboundRow.channel == channel, InboundRow.platform_message_id == platform_message_id)
        ).first()
        if existing is not None:
            return existing, False
    seq = sessions.next_seq(s, session_id)
    row = InboundRow(
        session_id=session_id, seq=seq, mode=mode, content=content, sender_id=sender_id, channel=channel,
        platform_message_id=platform_message_id, status=INBOUND_PENDING, attempts=0, created_at=time.time(),
    )
    s.add(row)
    if not platform_message_id:
        s.flush()
        return row, True
    try:
        with s.begin_nested():  # a concurrent duplicate of the same platform event loses here
            s.flush()
    except IntegrityError:
        s.expunge(row)
        existing = s.scalars(
            select(InboundRow).where(InboundRow.channel == channel, InboundRow.platform_message_id == platform_message_id)
        ).one()
        return existing, False
    return row, True


def claim_first(s: Session, session_id: str, turn_id: str) -> list[InboundRow]:
    """Claim the oldest pending input and the steer input right behind it (up to a queued one)."""
    rows = list(s.scalars(
        select(InboundRow).where(InboundRow.session_id == session_id, InboundRow.status == INBOUND_PENDING)
        .order_by(InboundRow.seq).limit(64)
    ))
    taken: list[InboundRow] = []
    for row in rows:
        if taken and row.mode == MODE_QUEUE:
            break
        taken.append(row)
    _claim(taken, turn_id)
    return taken


def claim_steer(s: Session, session_id: str, turn_id: str) -> list[InboundRow]:
    """Claim pending steer input that arrived while the turn runs (never /queue input)."""
    rows = list(s.scalars(
        select(InboundRow).where(
            InboundRow.session_id == session_id, InboundRow.status == INBOUND_PENDING, InboundRow.mode == MODE_STEER
        ).order_by(InboundRow.seq)
    ))
    _claim(rows, turn_id)
    return rows


def _claim(rows: list[InboundRow], turn_id: str) -> None:
    now = time.time()
    for row in rows:
        row.status = INBOUND_CLAIMED
        row.turn_id = turn_id
        row.attempts += 1
        row.claimed_at = now


def finish(s: Session, turn_id: str, status: str = INBOUND_DONE) -> None:
    s.execute(update(InboundRow).where(InboundRow.turn_id == turn_id, InboundRow.status == INBOUND_CLAIMED).values(status=status))


def release_claims(s: Session, turn_id: str) -> int:
    """Put a dead turn's input back in the queue, to be run again."""
    return s.execute(
        update(InboundRow).where(InboundRow.turn_id == turn_id, InboundRow.status == INBOUND_CLAIMED)
        .values(status=INBOUND_PENDING, turn_id=None)
    ).rowcount


def cancel_pending(s: Session, session_id: str) -> int:
    return s.execute(
        update(InboundRow).where(InboundRow.session_id == session_id, InboundRow.status == INBOUND_PENDING)
        .values(status=INBOUND_CANCELLED)
    ).rowcount


def pending_query(session_id: str):  # type: ignore[no-untyped-def]
    return select(InboundRow.id).where(InboundRow.session_id == session_id, InboundRow.status == INBOUND_PENDING).limit(1)


def has_pending(s: Session, session_id: str) -> bool:
    return s.scalars(pending_query(session_id)).first() is not None


def count_pending(s: Session, session_id: str) -> int:
    return s.scalar(
        select(func.count()).select_from(InboundRow)
        .where(InboundRow.session_id == session_id, InboundRow.status == INBOUND_PENDING)
    ) or 0


def sessions_with_work(s: Session) -> list[str]:
    """Sessions that have pending or claimed input."""
    return list(s.scalars(
        select(InboundRow.session_id).where(InboundRow.status.in_([INBOUND_PENDING, INBOUND_CLAIMED])).distinct()
    ))
