"""Keep each trial's parameter values: the sampled ones and the spec's fixed ones beside them.

A trial's config is the spec's base with these applied; keeping them apart lets ``trials``,
``pareto`` and the report show what was searched and what the spec held fixed (issue 37: fixed
values were once dropped before a trial ran, and nothing in the store could tell).
``{"sampled": {NAME: value}, "fixed": {NAME: value}}``; null for trials of older archsearch versions.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("archsearch_trials") as batch:
        batch.add_column(sa.Column("parameters", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("archsearch_trials") as batch:
        batch.drop_column("parameters")
