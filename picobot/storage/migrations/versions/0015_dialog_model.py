"""sessions.model_provider, sessions.model_key: a dialog's /model choice (null: the agent's own model)

Revision ID: 0015
Revises: 0014
"""
from alembic import op
import sqlalchemy as sa


revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('model_provider', sa.String(length=256), nullable=True))
        batch_op.add_column(sa.Column('model_key', sa.String(length=256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.drop_column('model_key')
        batch_op.drop_column('model_provider')
