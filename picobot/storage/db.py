"""Engine setup, transactions and migrations for SQLite (WAL) and PostgreSQL."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

from picobot.storage.group_commit import GroupCommit
from picobot.storage.schema_head import SCHEMA_HEAD

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

T = TypeVar("T")


def _sqlite_engine(url: str, immediate: bool) -> Engine:
    engine = create_engine(url, pool_size=8, max_overflow=200, pool_timeout=60)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front so they wait on busy_timeout instead of
        # failing on a lock upgrade; readers use a deferred (snapshot) transaction.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class WriteTurn:
    """A process's turn at SQLite's one write lock, taken before `BEGIN IMMEDIATE`.

    SQLite's busy handler polls: a writer that finds the lock taken sleeps 1, 2, 5, 10, 15, 20, 25, ...
    ms and tries again, so it waits on for up to that long after the lock is free, and a process that
    writes often (a worker finishing turns) takes it again in the meantime. Here the threads of a process
    queue on a lock, and the one at the head of each process waits in `flock` on `<database>-writer.lock`,
    which the kernel hands over as soon as its holder lets go. A writer that does not take the turn (an
    older version, the sqlite3 shell) still works: it meets SQLite's own lock and busy_timeout.
    """

    def __init__(self, db_path: str | None):
        self._gate = threading.Lock()
        self._lock_path = f"{db_path}-writer.lock" if db_path else None
        self._fd: int | None = None
        self._fd_pid = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._gate:
            fd = self._file()
            if fd is None:
                yield
                return
            fcntl.flock(fd, fcntl.LOCK_EX)  # releases the GIL while it waits
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _file(self) -> int | None:
        if self._lock_path is None:
            return None
        if self._fd is None or self._fd_pid != os.getpid():  # a forked child opens its own: flock is per open file
            try:
                self._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:  # a read-only directory: SQLite's busy handler alone orders the writers
                self._lock_path = None
                return None
            self._fd_pid = os.getpid()
        return self._fd


class Database:
    """One per process. `write()` and `read()` give transactional ORM sessions; `begin()` and
    `connect()` give Core connections for the per-message hot paths, which run statements built
    once at import (building a statement and its cache key costs more than running it)."""

    def __init__(self, url: str):
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            path = self._sqlite_file()
            if path:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.engine = _sqlite_engine(url, immediate=True)
            self.read_engine = _sqlite_engine(url, immediate=False)
        else:
            self.engine = create_engine(url, pool_size=10, max_overflow=100, pool_pre_ping=True)
            self.read_engine = self.engine
        self._write = sessionmaker(self.engine, expire_on_commit=False)
        self._read = sessionmaker(self.read_engine, expire_on_commit=False)
        self._migrated = False
        self._lock = threading.Lock()
        # SQLite has one writer: writers queue for it in WriteTurn rather than in its busy handler.
        self._write_turn: WriteTurn | None = WriteTurn(self._sqlite_file()) if self.is_sqlite else None
        self._group: GroupCommit | None = None
        # On in the web, which acknowledges input while its clients wait; off in workers, whose many
        # busy threads would hold the write lock longer for a batch than for one write (measured: each
        # statement waits for the interpreter lock again).
        self.group_commit = False

    def _sqlite_file(self) -> str | None:
        path = self.url.split(":///", 1)[1] if ":///" in self.url else ""
        path = path.split("?", 1)[0]
        if not path or path == ":memory:" or path.startswith("file:"):
            return None
        return str(Path(path).expanduser())

    @contextmanager
    def write(self) -> Iterator[Session]:
        if self._write_turn is None:
            with self._write() as s, s.begin():
                yield s
            return
        with self._write_turn.held(), self._write() as s, s.begin():
            yield s

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A write transaction on a Core connection (same write lock as `write()`)."""
        if self._write_turn is None:
            with self.engine.begin() as conn:
                yield conn
            return
        with self._write_turn.held(), self.engine.begin() as conn:
            yield conn

    def grouped(self, fn: Callable[[Connection], T]) -> T:
        """`fn(conn)` in a write transaction shared with other threads' grouped writes (group commit,
        picobot/storage/group_commit.py); returns once committed. For the intake of many small inputs.
        Without `group_commit` it is one transaction of its own."""
        if not self.group_commit:
            with self.begin() as conn:
                return fn(conn)
        if self._group is None:
            with self._lock:
                if self._group is None:
                    self._group = GroupCommit(self.begin)
        return self._group.run(fn)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A read-only Core connection (each statement sees committed data)."""
        with self.read_engine.connect() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._read() as s, s.begin():
            yield s

    def migrate(self) -> None:
        """Bring the schema to the newest revision (idempotent)."""
        with self._lock:
            if self._at_head():
                self._migrated = True
                return
            from alembic import command
            from alembic.config import Config as AlembicConfig

            cfg = AlembicConfig()
            cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
            with self.engine.connect() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                conn.commit()
            self._migrated = True

    def _at_head(self) -> bool:
        """The schema is at SCHEMA_HEAD (anything else, a missing table included, takes alembic's path)."""
        try:
            with self.engine.connect() as conn:
                found = [row[0] for row in conn.exec_driver_sql("SELECT version_num FROM alembic_version")]
        except SQLAlchemyError:
            return False
        return found == [SCHEMA_HEAD]

    def ping(self) -> None:
        with self.read_engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")

    def dispose(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()
