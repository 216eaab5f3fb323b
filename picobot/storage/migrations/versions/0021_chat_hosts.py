"""chat_hosts: the worker host that holds each chat's workspace (turns follow it)

Revision ID: 0021
Revises: 0018
"""
from alembic import op
import sqlalchemy as sa


revision = '0021'
down_revision = '0018'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'chat_hosts',
        sa.Column('channel', sa.String(length=64), nullable=False),
        sa.Column('chat_id', sa.String(length=256), nullable=False),
        sa.Column('host', sa.String(length=64), nullable=False),
        sa.Column('pinned_at', sa.Float(), nullable=False),
        sa.Column('moved_from', sa.String(length=64), nullable=True),
        sa.Column('moved_at', sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint('channel', 'chat_id'),
    )


def downgrade() -> None:
    op.drop_table('chat_hosts')
