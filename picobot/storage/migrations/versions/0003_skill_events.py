"""skill events: what happened to which skill, from which session

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('skill_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('skill', sa.String(length=64), nullable=False),
    sa.Column('event', sa.String(length=16), nullable=False),
    sa.Column('session_id', sa.String(length=512), nullable=True),
    sa.Column('via', sa.String(length=16), nullable=False),
    sa.Column('scope', sa.String(length=32), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_skill_events_skill', 'skill_events', ['skill', 'id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_skill_events_skill', table_name='skill_events')
    op.drop_table('skill_events')
