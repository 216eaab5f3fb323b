"""Rows of device pairing: one-time codes and device tokens, by their SHA-256 only.

The plaintext of a code or a token never reaches this module; picobot.auth.pairing hashes first.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import CursorResult, delete, or_, select, update
from sqlalchemy.orm import Session

from picobot.storage.models import DeviceTokenRow, PairingCodeRow

USED_CODE_KEEP_SECS = 24 * 3600  # a used code's hash lingers a day, then goes

# Session.execute is typed as returning a Result; for DML it is a CursorResult, the one with rowcount.
_Dml = CursorResult[Any]


def add_code(s: Session, code_hash: str, now: float, ttl: float) -> None:
    s.add(PairingCodeRow(code_hash=code_hash, created_at=now, expires_at=now + ttl, used_at=None))


def purge_codes(s: Session, now: float) -> int:
    result = cast(_Dml, s.execute(delete(PairingCodeRow).where(or_(
        PairingCodeRow.expires_at < now - USED_CODE_KEEP_SECS,
        PairingCodeRow.used_at < now - USED_CODE_KEEP_SECS,
    ))))
    return result.rowcount or 0


def consume_code(s: Session, code_hash: str, now: float) -> bool:
    """Mark an unused, unexpired code used. One UPDATE, so two racing redeems cannot both win."""
    result = cast(_Dml, s.execute(
        update(PairingCodeRow)
        .where(PairingCodeRow.code_hash == code_hash, PairingCodeRow.used_at.is_(None),
               PairingCodeRow.expires_at > now)
        .values(used_at=now)
    ))
    return result.rowcount == 1


def add_device(s: Session, device_id: str, token_hash: str, name: str, kind: str, now: float) -> DeviceTokenRow:
    row = DeviceTokenRow(id=device_id, token_hash=token_hash, name=name[:128], kind=kind, created_at=now,
                         last_used_at=None, revoked_at=None)
    s.add(row)
    s.flush()
    return row


def find_live(s: Session, token_hash: str) -> DeviceTokenRow | None:
    return s.scalars(select(DeviceTokenRow).where(DeviceTokenRow.token_hash == token_hash,
                                                  DeviceTokenRow.revoked_at.is_(None))).first()


def touch(s: Session, device_id: str, now: float) -> None:
    s.execute(update(DeviceTokenRow).where(DeviceTokenRow.id == device_id).values(last_used_at=now))


def list_devices(s: Session, include_revoked: bool = False) -> list[DeviceTokenRow]:
    q = select(DeviceTokenRow).order_by(DeviceTokenRow.created_at)
    if not include_revoked:
        q = q.where(DeviceTokenRow.revoked_at.is_(None))
    return list(s.scalars(q))


def revoke(s: Session, device_id: str, now: float) -> bool:
    result = cast(_Dml, s.execute(update(DeviceTokenRow)
                                  .where(DeviceTokenRow.id == device_id, DeviceTokenRow.revoked_at.is_(None))
                                  .values(revoked_at=now)))
    return result.rowcount == 1
