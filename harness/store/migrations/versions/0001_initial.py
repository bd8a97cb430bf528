"""Initial schema: studies, trials, measurements, per-epoch metrics.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "archsearch_studies",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("objectives", JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("updated_at", TZ, nullable=False),
        sa.Column("archsearch_version", sa.String(32), nullable=False),
        sa.Column("git_commit", sa.String(64)),
    )
    op.create_table(
        "archsearch_trials",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("study_id", sa.Integer, sa.ForeignKey("archsearch_studies.id", ondelete="CASCADE"), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("config", JSON, nullable=False),
        sa.Column("final", JSON),
        sa.Column("error", sa.Text),
        sa.Column("seed", sa.BigInteger),
        sa.Column("optuna_number", sa.Integer),
        sa.Column("host", sa.String(255)),
        sa.Column("device", sa.String(255)),
        sa.Column("started_at", TZ),
        sa.Column("ended_at", TZ),
        sa.UniqueConstraint("study_id", "number", name="archsearch_trials_study_number"),
    )
    op.create_table(
        "archsearch_measurements",
        sa.Column("trial_id", sa.Integer, sa.ForeignKey("archsearch_trials.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("params", sa.BigInteger),
        sa.Column("flops", sa.BigInteger),
        sa.Column("flops_source", sa.String(32)),
        sa.Column("throughput", sa.Float),
        sa.Column("throughput_min", sa.Float),
        sa.Column("throughput_max", sa.Float),
        sa.Column("latency_ms", sa.Float),
        sa.Column("peak_memory_bytes", sa.BigInteger),
        sa.Column("batch_size", sa.Integer),
        sa.Column("image_size", sa.Integer),
        sa.Column("dtype", sa.String(16)),
        sa.Column("device", sa.String(255)),
        sa.Column("torch_version", sa.String(64)),
    )
    op.create_table(
        "archsearch_epochs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("trial_id", sa.Integer, sa.ForeignKey("archsearch_trials.id", ondelete="CASCADE"), nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("step", sa.Integer),
        sa.Column("train_loss", sa.Float),
        sa.Column("eval_loss", sa.Float),
        sa.Column("top1", sa.Float),
        sa.Column("top5", sa.Float),
        sa.Column("lr", sa.Float),
        sa.Column("images_per_s", sa.Float),
        sa.Column("epoch_time", sa.Float),
        sa.Column("wall_time", sa.Float),
        sa.Column("data_wait_fraction", sa.Float),
        sa.UniqueConstraint("trial_id", "epoch", name="archsearch_epochs_trial_epoch"),
    )


def downgrade() -> None:
    for table in ("archsearch_epochs", "archsearch_measurements", "archsearch_trials", "archsearch_studies"):
        op.drop_table(table)
