"""Engine setup, transactions and migrations for SQLite (WAL) and PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


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


class Database:
    """One per process. `write()` and `read()` give transactional ORM sessions; `begin()` and
    `connect()` give Core connections for the per-message hot paths, which run statements built
    once at import (building a statement and its cache key costs more than running it)."""

    def __init__(self, url: str):
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            path = url.split(":///", 1)[1] if ":///" in url else ""
            if path and path != ":memory:":
                Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.engine = _sqlite_engine(url, immediate=True)
            self.read_engine = _sqlite_engine(url, immediate=False)
        else:
            self.engine = create_engine(url, pool_size=10, max_overflow=100, pool_pre_ping=True)
            self.read_engine = self.engine
        self._write = sessionmaker(self.engine, expire_on_commit=False)
        self._read = sessionmaker(self.read_engine, expire_on_commit=False)
        self._migrated = False
        self._lock = threading.Lock()
        # SQLite has one writer and its busy handler sleeps and retries rather than queueing, so
        # many threads of one process contending for it mostly sleep while the lock is free.
        # Queueing them here first hands the lock over at once; other processes still use busy_timeout.
        self._write_gate: threading.Lock | None = threading.Lock() if self.is_sqlite else None

    @contextmanager
    def write(self) -> Iterator[Session]:
        if self._write_gate is None:
            with self._write() as s, s.begin():
                yield s
            return
        with self._write_gate, self._write() as s, s.begin():
            yield s

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A write transaction on a Core connection (same write lock as `write()`)."""
        if self._write_gate is None:
            with self.engine.begin() as conn:
                yield conn
            return
        with self._write_gate, self.engine.begin() as conn:
            yield conn

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
        from alembic import command
        from alembic.config import Config as AlembicConfig

        with self._lock:
            cfg = AlembicConfig()
            cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
            with self.engine.connect() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                conn.commit()
            self._migrated = True

    def ping(self) -> None:
        with self.read_engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")

    def dispose(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()
