"""operator pages: agent_runs by created_at, outbox by (channel, id)

The Sub-agent runs page and GET /api/subagents read the newest runs; the Deliveries page reads one
channel's rows newest first. Without these both scan their whole table.

Revision ID: 0013
Revises: 0012
"""
from alembic import op


revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('agent_runs', schema=None) as batch_op:
        batch_op.create_index('ix_agent_runs_created', ['created_at'], unique=False)
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.create_index('ix_outbox_channel', ['channel', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('outbox', schema=None) as batch_op:
        batch_op.drop_index('ix_outbox_channel')
    with op.batch_alter_table('agent_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_agent_runs_created')
