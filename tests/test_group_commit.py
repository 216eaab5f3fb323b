"""Group commit (picobot/storage/group_commit.py) and SQLite's writer turn, on SQLite and PostgreSQL.

Batches are made deterministic by parking the writer thread inside a first write until the others
are queued behind it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from sqlalchemy import Connection

from picobot.storage import channel_events, inbound, sessions
from picobot.storage.db import Database
from picobot.storage.group_commit import GroupCommit


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    d = Database(db_url)
    d.migrate()
    d.group_commit = True  # as the web sets it
    yield d
    d.dispose()


def _wait(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.005)


def _group(db: Database) -> GroupCommit:
    db.grouped(lambda conn: None)  # the writer exists from here on
    assert db._group is not None
    return db._group


def _parked(db: Database) -> tuple[threading.Event, Any]:
    """A grouped write that holds the writer thread until the event is set; returns (release, its future)."""
    release, inside = threading.Event(), threading.Event()

    def hold(conn: Connection) -> None:
        inside.set()
        release.wait(20)

    pool = ThreadPoolExecutor(1)
    future = pool.submit(db.grouped, hold)
    pool.shutdown(wait=False)
    assert inside.wait(20)
    return release, future


def test_concurrent_intakes_commit_together_and_are_durable(db: Database, db_url: str) -> None:
    group = _group(db)
    release, first = _parked(db)
    batches_before = group.batches
    keys = [f"ev{i}" for i in range(20)] + ["ev3"]  # a redelivery of ev3 inside the same batch
    with ThreadPoolExecutor(len(keys)) as pool:
        futures = [pool.submit(db.grouped, lambda conn, k=k: channel_events.record(conn, "feishu", k, {"k": k}))
                   for k in keys]
        _wait(lambda: len(group._queue) == len(keys), "the writes did not queue behind the parked one")
        release.set()
        results = [f.result(timeout=20) for f in futures]
    first.result(timeout=20)
    assert group.batches - batches_before == 2  # the parked write's, then all 21 in one transaction
    assert [created for _, created in results] == [True] * 20 + [False]
    assert results[-1][0] == results[3][0]  # the redelivery found the first row, in the same transaction
    other = Database(db_url)  # a fresh connection sees every acknowledged row: committed
    try:
        with other.connect() as conn:
            assert channel_events.counts(conn).get("pending") == 20
    finally:
        other.dispose()


def test_a_failing_write_rolls_back_alone(db: Database) -> None:
    with db.begin() as conn:
        sid = sessions.current_or_create_id(conn, "web", "c1", "default")
    group = _group(db)
    release, first = _parked(db)

    def good(i: int) -> Callable[[Connection], int]:
        return lambda conn: inbound.enqueue(conn, sid, "web", f"m{i}", "u", platform_message_id=f"p{i}")[0].seq

    def bad(conn: Connection) -> None:
        inbound.enqueue(conn, sid, "web", "lost", "u", platform_message_id="bad")
        raise ValueError("refused after writing")

    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(db.grouped, good(1)), pool.submit(db.grouped, bad), pool.submit(db.grouped, good(2))]
        _wait(lambda: len(group._queue) == 3, "the writes did not queue")
        release.set()
        first.result(timeout=20)
        assert futures[0].result(timeout=20) == 1
        with pytest.raises(ValueError, match="refused after writing"):
            futures[1].result(timeout=20)
        assert futures[2].result(timeout=20) == 2  # the failed one's seq was rolled back with it
    with db.connect() as conn:
        stored = conn.exec_driver_sql("SELECT platform_message_id FROM inbound ORDER BY seq").scalars().all()
    assert stored == ["p1", "p2"]


def test_a_failed_commit_answers_every_caller(db: Database) -> None:
    """The transaction as a whole fails (here its one write): nothing is acknowledged, the caller sees why."""
    with pytest.raises(ZeroDivisionError):
        db.grouped(lambda conn: 1 / 0)
    assert db.grouped(lambda conn: "still working") == "still working"


LOCK_PROBE = """
import fcntl, sys
fd = open(sys.argv[1], "a")
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("held")
else:
    print("free")
"""


def _probe(path: Path) -> str:
    return subprocess.run([sys.executable, "-c", LOCK_PROBE, str(path)], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_sqlite_writers_of_all_processes_take_turns_on_one_file_lock(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'turns.db'}")
    db.migrate()
    lock = tmp_path / "turns.db-writer.lock"
    try:
        with db.begin() as conn:
            sessions.current_or_create_id(conn, "web", "c1", "default")
            assert _probe(lock) == "held"  # another process waits in flock until this commits
        assert _probe(lock) == "free"
        with db.write():
            assert _probe(lock) == "held"
        with db.connect():  # readers never take it
            assert _probe(lock) == "free"
    finally:
        db.dispose()
