"""Alembic environment: runs on the connection PicoBot hands in (see Database.migrate)."""

from alembic import context

from picobot.storage.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
