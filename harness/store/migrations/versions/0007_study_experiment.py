"""Record the results-dir entry each study's Ray experiment was created under.

A study's Ray Tune experiment lives at ``<results dir>/<entry>``. The entry was once always the
study's current name, so after ``studies --rename`` a purge looked in the wrong place, and a deleted
study's leftover directory blocked its name for good (issue 44). Now a study keeps the entry it
created; rename, delete, purge and resume act on it. Existing studies get their current name, which
is where their experiment lives unless they were renamed before this revision (that cannot be known).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("archsearch_studies") as batch:
        batch.add_column(sa.Column("experiment", sa.String(255), nullable=True))
    op.execute("UPDATE archsearch_studies SET experiment = name WHERE experiment IS NULL")


def downgrade() -> None:
    with op.batch_alter_table("archsearch_studies") as batch:
        batch.drop_column("experiment")
