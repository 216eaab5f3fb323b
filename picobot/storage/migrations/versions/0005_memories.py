"""memories: long-term memory per user scope, with full-text search

SQLite: an external-content FTS5 table over `search_text`, kept in sync by triggers.
PostgreSQL: a stored generated column search_tsv = to_tsvector('simple', search_text) with a GIN index.

Revision ID: 0005
Revises: 0003
"""
from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0003'
branch_labels = None
depends_on = None

_SQLITE_FTS = [
    "CREATE VIRTUAL TABLE memories_fts USING fts5(search_text, content='memories', content_rowid='id', "
    "tokenize='unicode61 remove_diacritics 2')",
    # the same three triggers sqlite-utils' enable_fts(create_triggers=True) creates
    "CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts (rowid, search_text) VALUES (new.id, new.search_text); END",
    "CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN "
    "INSERT INTO memories_fts (memories_fts, rowid, search_text) VALUES ('delete', old.id, old.search_text); END",
    "CREATE TRIGGER memories_au AFTER UPDATE OF search_text ON memories BEGIN "
    "INSERT INTO memories_fts (memories_fts, rowid, search_text) VALUES ('delete', old.id, old.search_text); "
    "INSERT INTO memories_fts (rowid, search_text) VALUES (new.id, new.search_text); END",
]


def upgrade() -> None:
    op.create_table('memories',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('scope', sa.String(length=16), nullable=False),
    sa.Column('scope_key', sa.String(length=320), nullable=False),
    sa.Column('namespace', sa.String(length=64), nullable=False),
    sa.Column('memory_key', sa.String(length=200), nullable=False),
    sa.Column('content', sa.Text(), nullable=False),
    sa.Column('category', sa.String(length=16), nullable=False),
    sa.Column('importance', sa.Float(), nullable=False),
    sa.Column('search_text', sa.Text(), nullable=False),
    sa.Column('session_id', sa.String(length=512), nullable=True),
    sa.Column('message_id', sa.BigInteger(), nullable=True),
    sa.Column('seq', sa.BigInteger(), nullable=True),
    sa.Column('turn_id', sa.String(length=64), nullable=True),
    sa.Column('channel', sa.String(length=64), nullable=True),
    sa.Column('chat_id', sa.String(length=256), nullable=True),
    sa.Column('source_type', sa.String(length=32), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('scope_key', 'namespace', 'memory_key', name='uq_memories_scope_key')
    )
    op.create_index('ix_memories_scope_category', 'memories', ['scope_key', 'category', 'updated_at'], unique=False)
    if op.get_bind().dialect.name == 'sqlite':
        for statement in _SQLITE_FTS:
            op.execute(statement)
    else:
        # stored, so ranking a match reads its vector instead of re-parsing the text of every matching row
        op.execute("ALTER TABLE memories ADD COLUMN search_tsv tsvector "
                   "GENERATED ALWAYS AS (to_tsvector('simple', search_text)) STORED")
        op.execute("CREATE INDEX ix_memories_fts ON memories USING gin (search_tsv)")


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        for name in ('memories_au', 'memories_ad', 'memories_ai'):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS memories_fts")
    else:
        op.execute("DROP INDEX IF EXISTS ix_memories_fts")
    op.drop_index('ix_memories_scope_category', table_name='memories')
    op.drop_table('memories')
