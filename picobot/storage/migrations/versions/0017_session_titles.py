"""sessions: where a dialog's title came from (a person, or the titles capability) and its one title attempt

Revision ID: 0017
Revises: 0015
"""
from alembic import op
import sqlalchemy as sa


revision = '0017'
down_revision = '0015'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('title_source', sa.String(length=8), server_default='', nullable=False))
        batch_op.add_column(sa.Column('title_attempted_at', sa.Float(), nullable=True))
    # every title so far was given by /new <title>, /rename or a scheduled job: never overwritten
    op.execute("UPDATE sessions SET title_source = 'user' WHERE title <> ''")


def downgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.drop_column('title_attempted_at')
        batch_op.drop_column('title_source')
