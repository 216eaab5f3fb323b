"""Rows of API keys for the OpenAI-compatible endpoint, by their SHA-256 only.

The plaintext of a key never reaches this module; picobot.auth.apikeys hashes first.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import Connection, CursorResult, bindparam, select, update
from sqlalchemy.orm import Session

from picobot.storage.models import ApiKeyRow


def add(s: Session, key_id: str, name: str, key_hash: str, prefix: str, agent: str, now: float) -> ApiKeyRow:
    row = ApiKeyRow(id=key_id, name=name, key_hash=key_hash, prefix=prefix, agent=agent, created_at=now,
                    last_used_at=None, revoked_at=None)
    s.add(row)
    s.flush()
    return row


def live_by_name(s: Session, name: str) -> ApiKeyRow | None:
    return s.scalars(select(ApiKeyRow).where(ApiKeyRow.name == name, ApiKeyRow.revoked_at.is_(None))).first()


_k = ApiKeyRow.__table__
# every /v1 request checks its key: one Core statement, built once
_FIND_LIVE = select(_k).where(_k.c.key_hash == bindparam("h"), _k.c.revoked_at.is_(None))


def find_live(conn: Connection, key_hash: str) -> Any:
    """The live key's row (id, name, agent, prefix, times), or None."""
    return conn.execute(_FIND_LIVE, {"h": key_hash}).first()


def touch(s: Session, key_id: str, now: float) -> None:
    s.execute(update(ApiKeyRow).where(ApiKeyRow.id == key_id).values(last_used_at=now))


def list_keys(s: Session, include_revoked: bool = False) -> list[ApiKeyRow]:
    q = select(ApiKeyRow).order_by(ApiKeyRow.created_at)
    if not include_revoked:
        q = q.where(ApiKeyRow.revoked_at.is_(None))
    return list(s.scalars(q))


def revoke(s: Session, name: str, now: float) -> bool:
    # Session.execute is typed as returning a Result; for DML it is a CursorResult, the one with rowcount
    result = cast(CursorResult[Any], s.execute(update(ApiKeyRow).where(ApiKeyRow.name == name,
                                                                       ApiKeyRow.revoked_at.is_(None))
                                              .values(revoked_at=now)))
    return (result.rowcount or 0) >= 1
