"""Keep each completed trial's per-image test predictions (issue 48).

Every run of a reproduction is scored on the same fixed test images, so the test split's sampling
error is invisible in the spread over seeds; a seed x image bootstrap needs each run's predicted
class per image, and the labels. One row per trial, in a table of its own: the trial's ``final``
JSON stays a small object of numbers that every read expands. Older trials have no row.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "archsearch_test_predictions",
        sa.Column(
            "trial_id", sa.Integer(), sa.ForeignKey("archsearch_trials.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("classes", sa.Integer(), nullable=False),
        sa.Column("images", sa.Integer(), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("predictions", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("archsearch_test_predictions")
