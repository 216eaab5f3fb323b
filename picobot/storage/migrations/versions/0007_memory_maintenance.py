"""memory maintenance state: per user scope, what the last pass saw, its error and its summary

Revision ID: 0007
Revises: 0006
"""
from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('memory_maintenance_state',
    sa.Column('scope_key', sa.String(length=320), nullable=False),
    sa.Column('last_pass_at', sa.Float(), nullable=True),
    sa.Column('last_memory_change_seen', sa.String(length=80), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('summary', sa.Text(), nullable=False),
    sa.Column('report', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('scope_key')
    )


def downgrade() -> None:
    op.drop_table('memory_maintenance_state')
