"""Alembic environment: always run programmatically by ``harness.store``, on its connection.

The caller passes an open connection (already inside a write transaction that serialises
concurrent openers) in ``config.attributes["connection"]``; our version table has its own name
so that it can coexist with Optuna's ``alembic_version``.
"""

from alembic import context

from harness.store.schema import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
