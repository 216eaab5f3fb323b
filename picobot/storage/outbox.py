"""Outbound deliveries to external channels, recorded in the turn's transaction."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from picobot.storage.models import OutboxRow
from picobot.storage.upsert import InsertIfAbsent

# A turn run twice (a worker died after committing) records each delivery once: first one wins.
_ADD = InsertIfAbsent(OutboxRow.__table__, ["idempotency_key"])


def add(s: Session, channel: str, chat_id: str, payload: dict[str, Any], idempotency_key: str,
        session_id: str | None = None, turn_id: str | None = None, kind: str = "message") -> bool:
    """Record a delivery; False when one with this idempotency key is recorded already."""
    row_id = _ADD.run(s.connection(), {
        "channel": channel, "chat_id": chat_id, "session_id": session_id, "turn_id": turn_id, "kind": kind,
        "payload": payload, "idempotency_key": idempotency_key, "status": "pending", "attempts": 0,
        "created_at": time.time(),
    })
    return row_id is not None


def pending(s: Session, channel: str | None = None, limit: int = 100) -> list[OutboxRow]:
    q = select(OutboxRow).where(OutboxRow.status == "pending").order_by(OutboxRow.id).limit(limit)
    if channel:
        q = q.where(OutboxRow.channel == channel)
    return list(s.scalars(q))


def mark_sent(s: Session, row_id: int) -> None:
    row = s.get(OutboxRow, row_id)
    if row is not None:
        row.status = "sent"
        row.sent_at = time.time()


def mark_failed(s: Session, row_id: int, error: str, permanent: bool) -> None:
    row = s.get(OutboxRow, row_id)
    if row is not None:
        row.attempts += 1
        row.last_error = error
        if permanent:
            row.status = "failed"
