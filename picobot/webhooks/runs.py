"""The `hook_runs` table: Core statements built once (the accept path is hot).

A run's stored status is `accepted` until its turn commits (`completed` / `failed`); `running`
is read, not stored: the run's input row says whether a turn has claimed it.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from sqlalchemy import Connection, and_, bindparam, insert, or_, select, update

from picobot.storage.models import INBOUND_CLAIMED, INBOUND_PENDING, HookRunRow, InboundRow, TurnRow
from picobot.storage.upsert import InsertIfAbsent

ACCEPTED, RUNNING, COMPLETED, FAILED = "accepted", "running", "completed", "failed"
CB_PENDING, CB_DELIVERED, CB_FAILED, CB_REFUSED = "pending", "delivered", "failed", "refused"
INPUT_PREFIX = "hook:"

_r = HookRunRow.__table__
_i = InboundRow.__table__
_t = TurnRow.__table__

_INPUT_JOIN = _r.outerjoin(_i, and_(_i.c.channel == _r.c.channel,
                                    _i.c.platform_message_id == (INPUT_PREFIX + _r.c.id)))
_VIEW = select(_r, _i.c.status.label("input_status")).select_from(_INPUT_JOIN)
_BY_ID = _VIEW.where(_r.c.id == bindparam("id"))
_BY_KEY = select(_r.c.id).where(_r.c.hook == bindparam("hook"), _r.c.idempotency_key == bindparam("key"))
_INSERT = insert(_r)
_INSERT_KEYED = InsertIfAbsent(_r, ["hook", "idempotency_key"])
_SETTLE = (update(_r).where(_r.c.id == bindparam("rid"), _r.c.status == ACCEPTED)
           .values(status=bindparam("b_status"), result=bindparam("b_result"), error=bindparam("b_error"),
                   turn_id=bindparam("turn"), ended_at=bindparam("now"), callback_status=bindparam("cb"),
                   callback_next_at=bindparam("cb_at")))
_RECENT = _VIEW.order_by(_r.c.created_at.desc()).limit(bindparam("n"))
_DUE_CALLBACKS = (select(_r.c.id).where(_r.c.callback_status == CB_PENDING, _r.c.callback_next_at <= bindparam("before"))
                  .order_by(_r.c.callback_next_at).limit(100))
_CLAIM_CALLBACK = (update(_r).where(_r.c.id == bindparam("rid"), _r.c.callback_status == CB_PENDING,
                                    _r.c.callback_next_at <= bindparam("now"))
                   .values(callback_next_at=bindparam("lease")))
_CALLBACK_DONE = (update(_r).where(_r.c.id == bindparam("rid"))
                  .values(callback_status=bindparam("cb"), callback_attempts=bindparam("attempts"),
                          callback_next_at=bindparam("next_at"), callback_error=bindparam("b_error")))
# runs whose input ended but which were not settled (a crash between the commit and the hook cannot
# happen: the run settles in the turn's transaction; this catches inputs cancelled by /stop or deleted)
_UNSETTLED = (select(_r.c.id, _i.c.status.label("input_status"), _t.c.status.label("turn_status"),
                     _t.c.final_text, _t.c.error, _t.c.id.label("turn_id"))
              .select_from(_INPUT_JOIN.outerjoin(_t, _t.c.id == _i.c.turn_id))
              .where(_r.c.status == ACCEPTED, _r.c.created_at < bindparam("before"),
                     or_(_i.c.id.is_(None), _i.c.status.notin_([INBOUND_PENDING, INBOUND_CLAIMED])))
              .limit(100))


def key_hash(idempotency_key: str) -> str:
    """What is stored of an Idempotency-Key: fixed length, never the sender's text."""
    return hashlib.sha256(idempotency_key.encode("utf-8", "surrogatepass")).hexdigest()


def input_id(run_id: str) -> str:
    return INPUT_PREFIX + run_id


def run_of_input(pmid: str) -> str | None:
    return pmid[len(INPUT_PREFIX):] if pmid.startswith(INPUT_PREFIX) else None


def by_key(conn: Connection, hook: str, key: str) -> str | None:
    return conn.execute(_BY_KEY, {"hook": hook, "key": key}).scalar()


def insert_run(conn: Connection, values: dict[str, Any]) -> bool:
    """Store a new run; False when a run with the same (hook, idempotency key) exists."""
    row = {"turn_id": None, "result": None, "error": None, "ended_at": None, "callback_status": None,
           "callback_attempts": 0, "callback_next_at": None, "callback_error": None, "status": ACCEPTED,
           **values}
    if row.get("idempotency_key") is None:
        conn.execute(_INSERT, row)
        return True
    return _INSERT_KEYED.run(conn, row) is not None


def get(conn: Connection, run_id: str) -> dict[str, Any] | None:
    row = conn.execute(_BY_ID, {"id": run_id}).first()
    return None if row is None else view(row)


def recent(conn: Connection, limit: int = 50) -> list[dict[str, Any]]:
    return [view(r) for r in conn.execute(_RECENT, {"n": limit})]


def view(row: Any) -> dict[str, Any]:
    """A run as the API shows it (no session internals, never the idempotency key)."""
    status = row.status
    if status == ACCEPTED and row.input_status == INBOUND_CLAIMED:
        status = RUNNING
    callback = None if row.callback_status is None else {
        "status": row.callback_status, "attempts": row.callback_attempts, "last_error": row.callback_error}
    return {"run_id": row.id, "hook": row.hook, "mode": row.mode, "status": status, "result": row.result,
            "error": row.error, "created_at": row.created_at, "ended_at": row.ended_at, "callback": callback}


def settle(conn: Connection, run_id: str, status: str, result: str | None, error: str | None,
           turn_id: str | None, callback: bool) -> bool:
    """Give an accepted run its outcome (once); a callback becomes due now when the hook has one."""
    now = time.time()
    return bool(conn.execute(_SETTLE, {
        "rid": run_id, "b_status": status, "b_result": result, "b_error": None if error is None else error[:4000],
        "turn": turn_id, "now": now, "cb": CB_PENDING if callback else None, "cb_at": now if callback else None,
    }).rowcount)


def unsettled(conn: Connection, before: float) -> list[Any]:
    return list(conn.execute(_UNSETTLED, {"before": before}))


def due_callbacks(conn: Connection, before: float) -> list[str]:
    return list(conn.execute(_DUE_CALLBACKS, {"before": before}).scalars())


def claim_callback(conn: Connection, run_id: str, lease_secs: float) -> dict[str, Any] | None:
    """Lease a due callback (no other worker sends it meanwhile); the row, or None when not due."""
    now = time.time()
    if not conn.execute(_CLAIM_CALLBACK, {"rid": run_id, "now": now, "lease": now + lease_secs}).rowcount:
        return None
    row = conn.execute(_BY_ID, {"id": run_id}).first()
    return None if row is None else dict(row._mapping)


def callback_outcome(conn: Connection, run_id: str, status: str, attempts: int, next_at: float | None,
                     error: str | None) -> None:
    conn.execute(_CALLBACK_DONE, {"rid": run_id, "cb": status, "attempts": attempts, "next_at": next_at,
                                  "b_error": None if error is None else error[:2000]})
