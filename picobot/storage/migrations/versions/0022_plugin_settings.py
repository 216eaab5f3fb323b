"""plugin_settings: plugin settings changed at run time (over config.json's plugins.settings)

Revision ID: 0022
Revises: 0019
"""
from alembic import op
import sqlalchemy as sa


revision = '0022'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'plugin_settings',
        sa.Column('namespace', sa.String(length=64), nullable=False),
        sa.Column('name', sa.String(length=128), nullable=False),
        sa.Column('value', sa.Text(), nullable=False),
        sa.Column('updated_at', sa.Float(), nullable=False),
        sa.Column('updated_by', sa.String(length=320), nullable=False),
        sa.PrimaryKeyConstraint('namespace', 'name'),
    )


def downgrade() -> None:
    op.drop_table('plugin_settings')
