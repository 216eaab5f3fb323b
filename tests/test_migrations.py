"""The migrations build exactly the schema the models declare (SQLite and PostgreSQL)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from picobot.storage.db import Database
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
