"""Say when a trial's throughput was measured beside other work (issue 61).

A throughput timed while a neighbour kept the same CPUs busy (another trial of the search, anything else on
the machine) was stored like any other: 183 img/s beside a busy trial, 1,398 img/s re-measured alone, and
nothing on the front said which. Each measurement now keeps whether its GPU was shared (a packed trial), how
many of its CPUs other processes kept busy while it was timed, of how many, and on how many threads it ran
(``trials.measurement.machine_load``); tables mark the throughputs so measured. Older rows hold none of it
and are not marked.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("archsearch_measurements") as batch:
        batch.add_column(sa.Column("throughput_shared", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("load_others_cores", sa.Float(), nullable=True))
        batch.add_column(sa.Column("load_cores", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("load_threads", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("archsearch_measurements") as batch:
        batch.drop_column("load_threads")
        batch.drop_column("load_cores")
        batch.drop_column("load_others_cores")
        batch.drop_column("throughput_shared")
