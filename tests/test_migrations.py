"""The migrations build exactly the schema the models declare (SQLite and PostgreSQL)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from sqlalchemy import inspect

from picobot.storage.db import MIGRATIONS_DIR, SCHEMA_HEAD, Database
from picobot.storage.models import Base


def test_the_migrated_schema_matches_the_models(db_url: str) -> None:
    d = Database(db_url)
    try:
        d.migrate()
        with d.engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": False})
            diff = compare_metadata(ctx, Base.metadata)
        diff = [d for d in diff if not _unmodelled(d)]
        assert diff == [], diff
    finally:
        d.dispose()


def _unmodelled(item: tuple) -> bool:  # type: ignore[type-arg]
    """Alembic's own table and the full-text search objects the memory migrations create by hand."""
    text = repr(item)
    return "alembic_version" in text or "memories_fts" in text or "search_tsv" in text


def test_schema_head_is_the_newest_migration() -> None:
    """`migrate` skips alembic for a database at SCHEMA_HEAD: a new migration must move it."""
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert ScriptDirectory.from_config(cfg).get_heads() == [SCHEMA_HEAD]


def test_a_database_one_revision_behind_is_upgraded(db_url: str) -> None:
    """The one-query check takes alembic's path for anything but the newest revision."""
    from alembic import command
    from alembic.config import Config as AlembicConfig

    d = Database(db_url)
    try:
        d.migrate()
        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        with d.engine.connect() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "-1")
            conn.commit()
            assert [r[0] for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version")] != [SCHEMA_HEAD]
            assert "plugin_settings" not in inspect(conn).get_table_names()
        d.migrate()
        with d.engine.connect() as conn:
            assert [r[0] for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version")] == [SCHEMA_HEAD]
            assert "plugin_settings" in inspect(conn).get_table_names()  # the newest migration's table, back
    finally:
        d.dispose()
