"""A running study's driver holds a lease: a random token and a heartbeat stamped by the database's clock.

A study's driver was recorded as "HOST PID START" and judged alive by its PID on the same host name:
from another PID namespace (a container on the same host) a live driver looked dead, its study was
shown interrupted and could be deleted under it; heartbeats were stamped with each client's clock, so
clock skew between nodes read as a dead driver too (issue 57). Now the driver that claims a study writes
a random token (``lease``) and the database's time (``lease_beat``); every heartbeat and every write of
the driver is conditional on the token, and liveness is judged by the beat's age on the database's clock.
Existing rows hold no lease: a study running under an older archsearch is judged by its PID and
``updated_at`` as before until its next claim.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("archsearch_studies") as batch:
        batch.add_column(sa.Column("lease", sa.String(64), nullable=True))
        batch.add_column(sa.Column("lease_beat", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("archsearch_studies") as batch:
        batch.drop_column("lease_beat")
        batch.drop_column("lease")
