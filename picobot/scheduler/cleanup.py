"""session_cleanup: archive dialogs idle for longer than gateway.session_ttl_secs.

A dialog is idle when nothing touched it (`updated_at`: a message, a turn) for the TTL and it has
no running turn and no waiting input. The chat's current dialog is archived too: that is what the
TTL means — the chat's next message starts a new dialog (archived ones stay listed and can be
switched back to). Nothing is deleted. No TTL set: nothing happens.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sqlalchemy import exists, select, update

from picobot.storage.models import INBOUND_CLAIMED, INBOUND_PENDING, TURN_RUNNING, InboundRow, SessionRow, TurnRow

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.scheduler")

_s, _t, _i = SessionRow.__table__, TurnRow.__table__, InboundRow.__table__
BATCH = 500


def cleanup_sessions(rt: "Ports", now: float | None = None) -> int:
    """Archive the idle dialogs; returns how many."""
    ttl = rt.config.gateway.session_ttl_secs
    if not ttl:
        return 0
    now = time.time() if now is None else now
    idle = (select(_s.c.id).where(
        _s.c.updated_at < now - ttl, _s.c.archived_at.is_(None), _s.c.deleted_at.is_(None),
        ~exists().where(_t.c.session_id == _s.c.id, _t.c.status == TURN_RUNNING),
        ~exists().where(_i.c.session_id == _s.c.id, _i.c.status.in_([INBOUND_PENDING, INBOUND_CLAIMED])),
    ).limit(BATCH))
    total = 0
    while True:
        with rt.db.begin() as conn:
            ids = list(conn.execute(idle).scalars())
            if ids:
                conn.execute(update(_s).where(_s.c.id.in_(ids), _s.c.archived_at.is_(None))
                             .values(archived_at=now))
        total += len(ids)
        if len(ids) < BATCH:
            break
    if total:
        log.info("session cleanup archived %d idle dialog(s)", total)
    return total
