"""approvals: tool calls that waited for a person's decision, and the decisions (who, when, via what)

Revision ID: 0019
Revises: 0021
"""
from alembic import op
import sqlalchemy as sa


revision = '0019'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('approvals',
    sa.Column('id', sa.String(length=16), nullable=False),
    sa.Column('session_id', sa.String(length=512), nullable=False),
    sa.Column('turn_id', sa.String(length=64), nullable=False),
    sa.Column('tool', sa.String(length=128), nullable=False),
    sa.Column('summary', sa.Text(), nullable=False),
    sa.Column('rule', sa.String(length=128), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('scope', sa.String(length=16), nullable=False),
    sa.Column('decided_by', sa.String(length=320), nullable=True),
    sa.Column('decided_via', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('expires_at', sa.Float(), nullable=False),
    sa.Column('decided_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('approvals', schema=None) as batch_op:
        batch_op.create_index('ix_approvals_session_created', ['session_id', 'created_at'], unique=False)
        batch_op.create_index('ix_approvals_status', ['status'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('approvals', schema=None) as batch_op:
        batch_op.drop_index('ix_approvals_status')
        batch_op.drop_index('ix_approvals_session_created')
    op.drop_table('approvals')
