"""Record which process drives a running study and why a study ended as it did.

``driver`` ("HOST PID START") lets a later command tell a study whose driver died (``interrupted``)
from one still running; ``status_message`` keeps the one-line reason a search failed or stopped.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("archsearch_studies") as batch:
        batch.add_column(sa.Column("driver", sa.String(255)))
        batch.add_column(sa.Column("status_message", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("archsearch_studies") as batch:
        batch.drop_column("status_message")
        batch.drop_column("driver")
