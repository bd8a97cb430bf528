"""Record each epoch's training loss measured in eval mode (``train_eval_loss``).

Trials that recalibrate BatchNorm (``training.recalibrate_batchnorm``) report the loss over the
un-augmented training split in eval mode; comparisons "at equal training loss" read it. Older
rows keep NULL.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("archsearch_epochs") as batch:
        batch.add_column(sa.Column("train_eval_loss", sa.Float))


def downgrade() -> None:
    with op.batch_alter_table("archsearch_epochs") as batch:
        batch.drop_column("train_eval_loss")
