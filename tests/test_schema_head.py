"""storage/schema_head.py: a SQLite file at the newest schema is told without SQLAlchemy, so `picobot web`'s
gunicorn master stays without it (its worker, forked from it, would otherwise count it twice)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from picobot.storage.db import Database
from picobot.storage.schema_head import SCHEMA_HEAD, sqlite_at_head, sqlite_file
from tests.stack import Stack


@pytest.mark.parametrize("url, path", [
    ("sqlite:////data/picobot.db", Path("/data/picobot.db")),
    ("sqlite:///rel/picobot.db", Path("rel/picobot.db")),
    ("sqlite://", None), ("sqlite:///", None), ("sqlite:///:memory:", None),
    ("sqlite:////x.db?mode=ro", None),  # options: SQLAlchemy's business
    ("sqlite+pysqlite:////x.db", None),
    ("postgresql+psycopg://u@h/db", None), ("", None), ("sqlite:////x\x00.db", None),
])
def test_only_a_plain_sqlite_url_names_a_file(url: str, path: Path | None) -> None:
    assert sqlite_file(url) == path


def test_a_migrated_file_is_at_head_and_anything_else_is_not(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'picobot.db'}"
    assert not sqlite_at_head(url)
    assert not (tmp_path / "picobot.db").exists()  # a check never creates the database
    db = Database(url)
    db.migrate()
    db.dispose()
    assert sqlite_at_head(url)
    with sqlite3.connect(tmp_path / "picobot.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    assert not sqlite_at_head(url)  # an older schema takes alembic's path
    with sqlite3.connect(tmp_path / "picobot.db") as conn:
        conn.execute("DELETE FROM alembic_version")
    assert not sqlite_at_head(url)


@pytest.mark.parametrize("content", [b"", b"not a database at all" * 100, bytes(range(256)) * 64])
def test_a_file_that_is_no_database_is_not_at_head(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "picobot.db").write_bytes(content)
    assert not sqlite_at_head(f"sqlite:///{tmp_path / 'picobot.db'}")
    assert (tmp_path / "picobot.db").read_bytes() == content


def test_odd_paths_are_not_at_head(tmp_path: Path) -> None:
    assert not sqlite_at_head(f"sqlite:///{tmp_path}")  # a folder
    assert not sqlite_at_head(f"sqlite:///{tmp_path / 'missing' / 'picobot.db'}")
    assert not sqlite_at_head("sqlite:///" + str(tmp_path / "bad-\udcff.db"))  # a lone surrogate
    assert not sqlite_at_head("sqlite:///" + "x" * 5000)
    assert SCHEMA_HEAD


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_picobot_webs_master_loads_no_sqlalchemy_on_a_migrated_home(tmp_path: Path, fake_llm) -> None:  # type: ignore[no-untyped-def]
    stack = Stack(tmp_path, fake_llm.url)  # its SQLite file is migrated already, as after a first start
    try:
        stack.start_web()
        master = stack.procs["web"].pid  # `picobot web` becomes gunicorn's master (same process)
        workers = [int(p) for p in Path(f"/proc/{master}/task/{master}/children").read_text().split()]
        assert workers and "sqlalchemy" in _maps(workers[0])  # the worker serves from the database
        assert "sqlalchemy" not in _maps(master)
        assert stack.health()["checks"]["database"]["ok"]
    finally:
        stack.stop()


def test_picobot_web_on_an_older_schema_migrates_before_it_serves(tmp_path: Path, fake_llm) -> None:  # type: ignore[no-untyped-def]
    stack = Stack(tmp_path, fake_llm.url)
    db_file = stack.home / "data" / "picobot.db"
    with sqlite3.connect(db_file) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0021'")  # before 0019 (approvals) and 0022
        conn.execute("DROP TABLE approvals")
        conn.execute("DROP TABLE plugin_settings")
    try:
        stack.start_web()
        assert sqlite_at_head(f"sqlite:///{db_file}")
        assert stack.health()["checks"]["database"]["ok"]
    finally:
        stack.stop()
