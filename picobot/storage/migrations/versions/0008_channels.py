"""channels: delivery retry state on the outbox, and the inbox of raw platform events

Revision ID: 0008
Revises: 0007
"""
from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade() -> None:
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.add_column(sa.Column('next_attempt_at', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('error_code', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('result', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('updated_at', sa.Float(), nullable=True))
    op.create_table('channel_events',
    sa.Column('id', _ID, autoincrement=True, nullable=False),
    sa.Column('channel', sa.String(length=64), nullable=False),
    sa.Column('event_key', sa.String(length=256), nullable=False),
    sa.Column('payload', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('received_at', sa.Float(), nullable=False),
    sa.Column('processed_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('channel', 'event_key', name='uq_channel_events_key')
    )
    with op.batch_alter_table('channel_events', schema=None) as batch_op:
        batch_op.create_index('ix_channel_events_status', ['status', 'received_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('channel_events', schema=None) as batch_op:
        batch_op.drop_index('ix_channel_events_status')
    op.drop_table('channel_events')
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.drop_column('updated_at')
        batch_op.drop_column('result')
        batch_op.drop_column('error_code')
        batch_op.drop_column('next_attempt_at')
