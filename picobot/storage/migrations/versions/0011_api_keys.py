"""api_keys: named API keys for the OpenAI-compatible endpoint, each scoped to one agent (hashes only)

A table of its own rather than an `agent` column on device_tokens: a device token opens the whole
web UI and every agent, an API key opens only /v1 and one agent, and keys are named, listed and
revoked by that name. Keeping them apart means a leaked API key can never be replayed against the
paired-device routes, and pairing code never has to learn about agent scopes.

Revision ID: 0011
Revises: 0010
"""
from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('api_keys',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('agent', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('last_used_at', sa.Float(), nullable=True),
    sa.Column('revoked_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('key_hash')
    )
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.create_index('ux_api_keys_live_name', ['name'], unique=True,
                              sqlite_where=sa.text('revoked_at IS NULL'),
                              postgresql_where=sa.text('revoked_at IS NULL'))


def downgrade() -> None:
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_index('ux_api_keys_live_name')
    op.drop_table('api_keys')
