"""Insert-if-absent and insert-or-update, race-free on SQLite and PostgreSQL alike.

"Look, then insert" loses a race on PostgreSQL: two transactions both see nothing and the
second insert dies on the key. `INSERT … ON CONFLICT` decides in the database instead: the
loser's insert waits for the winner's commit and then does nothing (or updates), and the
caller reads the winner's row. SQLite serialises writers, but runs the same statements.
Each statement is built once per dialect (the dialects' ON CONFLICT constructs differ).
"""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import Connection, Table
from sqlalchemy.dialects import postgresql, sqlite

_DIALECTS = {"sqlite": sqlite, "postgresql": postgresql}


class InsertIfAbsent:
    """`INSERT … ON CONFLICT (keys) DO NOTHING RETURNING <returning>`."""

    def __init__(self, table: Table, keys: Sequence[str], returning: str = "id"):
        # RETURNING tells inserted from skipped: psycopg reports no rowcount for this statement
        self._stmts = {name: mod.insert(table).on_conflict_do_nothing(index_elements=list(keys))
                       .returning(table.c[returning]) for name, mod in _DIALECTS.items()}

    def run(self, conn: Connection, values: dict[str, Any]) -> Any | None:
        """The inserted row's `returning` column, or None when a row with these keys exists."""
        return conn.execute(self._stmts[conn.dialect.name], values).scalar()


class Upsert:
    """`INSERT … ON CONFLICT (keys) DO UPDATE SET <update> = excluded.<update>`: the last writer wins."""

    def __init__(self, table: Table, keys: Sequence[str], update: Sequence[str]):
        self._stmts = {}
        for name, mod in _DIALECTS.items():
            stmt = mod.insert(table)
            self._stmts[name] = stmt.on_conflict_do_update(
                index_elements=list(keys), set_={col: stmt.excluded[col] for col in update})

    def run(self, conn: Connection, values: dict[str, Any]) -> None:
        conn.execute(self._stmts[conn.dialect.name], values)
