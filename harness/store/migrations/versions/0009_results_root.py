"""Record where each study's results directory is, absolutely, and which directory it was.

A study's experiment lived at ``<results dir>/<entry>`` with the results dir resolved against the
reader's working directory: ``studies --delete NAME --purge-results`` run from another directory
removed another user's directory of the same name there (issue 57). Now a study records its results
root as an absolute path and its experiment directory's identity (device and inode) when it creates
it; delete, purge, rename and resume act on the recorded path, and a purge first checks the directory
there is still the one the study created. Existing studies record nothing (their place and identity
cannot be known now): they keep the older behaviour, and a resume records them.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("archsearch_studies") as batch:
        batch.add_column(sa.Column("results_root", sa.Text(), nullable=True))
        batch.add_column(sa.Column("results_identity", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("archsearch_studies") as batch:
        batch.drop_column("results_identity")
        batch.drop_column("results_root")
