"""Keep re-measured throughput and latency of a study's front apart from the in-trial measurement.

``archsearch verify`` measures each front member again, alone on one device, in interleaved
rounds; each run adds one row per member to ``archsearch_verified``. The in-trial measurement
(``archsearch_measurements``) is never overwritten.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "archsearch_verified",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("trial_id", sa.Integer, sa.ForeignKey("archsearch_trials.id", ondelete="CASCADE"), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("throughput", sa.Float),
        sa.Column("throughput_min", sa.Float),
        sa.Column("throughput_max", sa.Float),
        sa.Column("latency_ms", sa.Float),
        sa.Column("latency_ms_min", sa.Float),
        sa.Column("latency_ms_max", sa.Float),
        sa.Column("rounds", sa.Integer, nullable=False),
        sa.Column("batch_size", sa.Integer),
        sa.Column("image_size", sa.Integer),
        sa.Column("dtype", sa.String(16)),
        sa.Column("device", sa.String(255)),
        sa.Column("host", sa.String(255)),
    )
    op.create_index("ix_archsearch_verified_trial_id", "archsearch_verified", ["trial_id"])


def downgrade() -> None:
    op.drop_index("ix_archsearch_verified_trial_id", table_name="archsearch_verified")
    op.drop_table("archsearch_verified")
