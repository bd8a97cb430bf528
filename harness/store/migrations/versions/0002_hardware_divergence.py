"""Record the hardware a study ran on, the step a diverged trial failed at; index trials by status.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch_alter_table: SQLite cannot ALTER most things in place; Alembic recreates the table there.
    with op.batch_alter_table("archsearch_studies") as batch:
        batch.add_column(sa.Column("hardware", sa.JSON().with_variant(JSONB(), "postgresql")))
    with op.batch_alter_table("archsearch_trials") as batch:
        batch.add_column(sa.Column("diverged_at_step", sa.Integer))
    op.create_index("archsearch_trials_study_status", "archsearch_trials", ["study_id", "status"])


def downgrade() -> None:
    op.drop_index("archsearch_trials_study_status", "archsearch_trials")
    with op.batch_alter_table("archsearch_trials") as batch:
        batch.drop_column("diverged_at_step")
    with op.batch_alter_table("archsearch_studies") as batch:
        batch.drop_column("hardware")
