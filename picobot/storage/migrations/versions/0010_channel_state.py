"""channel_state: a channel's own small durable state (poll cursor, reply tokens, dedupe keys)

Revision ID: 0010
Revises: 0009
"""
from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('channel_state',
    sa.Column('channel', sa.String(length=64), nullable=False),
    sa.Column('key', sa.String(length=320), nullable=False),
    sa.Column('value', sa.JSON(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('channel', 'key')
    )
    with op.batch_alter_table('channel_state', schema=None) as batch_op:
        batch_op.create_index('ix_channel_state_updated', ['channel', 'updated_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('channel_state', schema=None) as batch_op:
        batch_op.drop_index('ix_channel_state_updated')
    op.drop_table('channel_state')
