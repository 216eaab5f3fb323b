"""Recording skill events in SQL; a failed write is logged, never undoes the action it records."""

from __future__ import annotations

import logging
from typing import Iterable

from sqlalchemy.exc import SQLAlchemyError

from picobot.storage import skills as skill_rows
from picobot.storage.db import Database

log = logging.getLogger("picobot.skills")


class SkillEvents:
    def __init__(self, db: Database):
        self.db = db

    def record(self, event: str, names: Iterable[str], session_id: str | None, via: str = "tool",
               scope: str = "") -> None:
        names = list(names)
        if not names:
            return
        try:
            with self.db.begin() as conn:
                skill_rows.record(conn, event, names, session_id, via, scope)
        except SQLAlchemyError as exc:
            # the skill already changed on disk; failing the call now would only mislead
            log.warning("could not record skill event %s for %s: %s", event, names, type(exc).__name__)
