"""usage_records: the ledger of model calls' tokens and estimated cost (budgets and usage reports)

Revision ID: 0014
Revises: 0013
"""
from alembic import op
import sqlalchemy as sa


revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('usage_records',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('day', sa.String(length=10), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('session_id', sa.String(length=512), nullable=True),
    sa.Column('turn_id', sa.String(length=64), nullable=True),
    sa.Column('run_id', sa.String(length=64), nullable=True),
    sa.Column('job_id', sa.String(length=128), nullable=True),
    sa.Column('channel', sa.String(length=64), nullable=False),
    sa.Column('user', sa.String(length=320), nullable=False),
    sa.Column('agent', sa.String(length=64), nullable=False),
    sa.Column('provider', sa.String(length=64), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('input_tokens', sa.BigInteger(), nullable=False),
    sa.Column('output_tokens', sa.BigInteger(), nullable=False),
    sa.Column('cached_input_tokens', sa.BigInteger(), nullable=False),
    sa.Column('cost_usd', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('usage_records', schema=None) as batch_op:
        batch_op.create_index('ix_usage_day', ['day'], unique=False)
        batch_op.create_index('ix_usage_user_day', ['user', 'day'], unique=False)
        batch_op.create_index('ix_usage_session', ['session_id'], unique=False)
        batch_op.create_index('ix_usage_job_day', ['job_id', 'day'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('usage_records', schema=None) as batch_op:
        batch_op.drop_index('ix_usage_job_day')
        batch_op.drop_index('ix_usage_session')
        batch_op.drop_index('ix_usage_user_day')
        batch_op.drop_index('ix_usage_day')
    op.drop_table('usage_records')
