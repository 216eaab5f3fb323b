"""The schema's newest revision, and whether a SQLite file is at it, read without SQLAlchemy.

`picobot web` checks the schema, then runs gunicorn in the same process (no second interpreter start):
whatever the check imported stays in gunicorn's master and is counted again in the worker it forks. A
SQLite file already at the newest revision (every start but the first after an upgrade) is told by one
query with the standard library, so the master stays without SQLAlchemy and the ORM (~25 MB of RSS);
anything else — another database, a missing or older schema, an unreadable file — takes the full path
(`Database.migrate`), which the stdlib check never replaces, only skips.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

# The newest migration's revision: a database already there is migrated with one query instead of alembic's
# start-up (about half a second of CPU in every process). tests/test_migrations.py holds it to alembic's head.
SCHEMA_HEAD = "0022"

SQLITE_PREFIX = "sqlite:///"


def sqlite_file(url: str) -> Path | None:
    """The file of a plain `sqlite:///PATH` URL; None for any other URL (a driver, a query, memory)."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    path = url[len(SQLITE_PREFIX):]
    if not path or path == ":memory:" or "?" in path or "\x00" in path:
        return None
    return Path(path)


def sqlite_at_head(url: str) -> bool:
    """True when `url` is a SQLite file whose schema is at SCHEMA_HEAD; False when not or not known.

    Never creates the file (an existing one is opened read and write, as SQLAlchemy would, so that a
    database in WAL mode is readable whatever state its side files are in)."""
    path = sqlite_file(url)
    try:
        if path is None or not path.is_file():
            return False
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=5)
    except (OSError, ValueError, sqlite3.Error):
        return False
    try:
        found = [row[0] for row in conn.execute("SELECT version_num FROM alembic_version")]
    except sqlite3.Error:  # no such table, not a database, locked for longer than the timeout
        return False
    finally:
        conn.close()
    return found == [SCHEMA_HEAD]
