"""hook_runs: inbound webhook calls, stored before they are acknowledged

Revision ID: 0012
Revises: 0011
"""
from alembic import op
import sqlalchemy as sa


revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('hook_runs',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('hook', sa.String(length=64), nullable=False),
    sa.Column('idempotency_key', sa.String(length=64), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('mode', sa.String(length=24), nullable=False),
    sa.Column('channel', sa.String(length=64), nullable=False),
    sa.Column('session_id', sa.String(length=512), nullable=False),
    sa.Column('turn_id', sa.String(length=64), nullable=True),
    sa.Column('result', sa.Text(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('ended_at', sa.Float(), nullable=True),
    sa.Column('callback_status', sa.String(length=16), nullable=True),
    sa.Column('callback_attempts', sa.Integer(), nullable=False),
    sa.Column('callback_next_at', sa.Float(), nullable=True),
    sa.Column('callback_error', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('hook', 'idempotency_key', name='uq_hook_runs_idempotency')
    )
    with op.batch_alter_table('hook_runs', schema=None) as batch_op:
        batch_op.create_index('ix_hook_runs_hook_created', ['hook', 'created_at'], unique=False)
        batch_op.create_index('ix_hook_runs_status', ['status'], unique=False)
        batch_op.create_index('ix_hook_runs_callback', ['callback_status', 'callback_next_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('hook_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_hook_runs_callback')
        batch_op.drop_index('ix_hook_runs_status')
        batch_op.drop_index('ix_hook_runs_hook_created')
    op.drop_table('hook_runs')
