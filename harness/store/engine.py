"""Opening the database and bringing its schema to this archsearch's version. SQLite runs in WAL mode
with a busy timeout and takes its write lock up front (``BEGIN IMMEDIATE``) on write connections, so
concurrent writers queue instead of failing with "database is locked"; a read-only opening uses
SQLite's ``mode=ro`` (``immutable`` on a read-only mount) or PostgreSQL READ ONLY transactions. Schema
migrations are Alembic's, run under PostgreSQL's advisory lock so that concurrent openers migrate
once; a read-only opening only checks that the schema is one it can read.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.exc import DBAPIError

from .base import StoreBase
from .errors import NoStore, StoreError
from .schema import VERSION_TABLE, Base

_MIGRATIONS = Path(__file__).with_name("migrations")
_PG_MIGRATION_LOCK = 0x41524348  # "ARCH": one advisory lock id for schema migrations
_SQLITE_BUSY_TIMEOUT_MS = 60_000


def _first_line(error: BaseException) -> str:
    cause = getattr(error, "orig", None) or error
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


def _refuse_foreign_tables(conn, url: str) -> None:
    """Tables named like ours in a database without our version table: another application's (or a
    half-made store). Creating ours would fail on them (DuplicateTable) or, worse, write into them."""
    ours = {table.name for table in Base.metadata.sorted_tables}
    found = sorted(ours & set(inspect(conn).get_table_names()))
    if found:
        raise StoreError(
            f"the database at {url} holds {', '.join(found)} but no {VERSION_TABLE}: tables archsearch did not "
            "create (another application's?); use another database or schema for the store"
        )


def _alembic_config(connection=None):
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    return config


@functools.cache
def schema_revisions() -> tuple[str, tuple[str, ...]]:
    """(head revision, every revision this archsearch knows).

    Cached per process: the migration scripts ship with the code, and reading them (alembic
    compiles every script) was most of the time a store takes to open, which a search does
    once per callback and thread.
    """
    script = ScriptDirectory.from_config(_alembic_config())
    return script.get_current_head(), tuple(r.revision for r in script.walk_revisions())


def _read_only_sqlite_url(url):
    """The same SQLite file opened with ``mode=ro``: SQLite itself refuses every write, and no
    journal-mode switch touches a file that may not even be a store.

    On a read-only mount SQLite cannot create the shared-memory file a WAL database's readers
    use, so there the file is opened ``immutable`` (no locks, no -shm): nothing can change it.
    """
    path = Path(url.database).resolve()
    flags = "mode=ro" if os.access(path.parent, os.W_OK) else "mode=ro&immutable=1"
    # A SQLite store URL has no query (refused by normalize_url): only SQLite's own flags go here.
    return url.set(database=f"file:{quote(str(path))}?{flags}", query={"uri": "true"})


def _enter_wal(cursor) -> None:
    """Put the database in WAL mode, waiting out other openers.

    Switching the journal mode takes an exclusive lock, and SQLite answers "database is locked" at
    once, without calling its busy handler, where waiting could deadlock (several processes opening a
    new file together, one of them already reading it). The mode is persistent, so it is read first
    and set only when it is not WAL yet; the switch is retried with backoff for the busy timeout.
    """
    deadline = time.monotonic() + _SQLITE_BUSY_TIMEOUT_MS / 1000
    delay = 0.01
    while True:
        try:
            if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error).lower() and "busy" not in str(error).lower():
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(0.5, delay * 2)


def _tolerant_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _make_engine(url, read_only: bool = False) -> Engine:
    if url.get_backend_name() == "sqlite":
        if read_only and url.database and url.database != ":memory:":
            url = _read_only_sqlite_url(url)
        engine = create_engine(url, connect_args={"timeout": _SQLITE_BUSY_TIMEOUT_MS / 1000})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (below)
            # A text cell that is not UTF-8 (written by hand, or by another tool) is read with its bad
            # bytes replaced, so one damaged cell is that row's oddity, not a decode error that fails
            # every read of the study or of the whole store.
            dbapi_connection.text_factory = _tolerant_text
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}")
            if not read_only:  # a reader never changes the file's journal mode
                _enter_wal(cursor)
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(connection) -> None:
            # Writers take the lock at BEGIN and wait for it (busy timeout) instead of failing
            # later when a read transaction tries to upgrade: no "database is locked" surprises.
            immediate = connection.get_execution_options().get("archsearch_write", False)
            connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine
    # A reader's transactions are READ ONLY on the server: a query can never write, whatever it is.
    options = {"postgresql_readonly": True} if read_only else {}
    return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 10}, execution_options=options)


class Migrations(StoreBase):
    """The schema check run as a store opens: migrate it to the head revision, or (read-only) check it."""

    def _migrate(self, create: bool) -> None:
        head, known = schema_revisions()
        with self._write_connection() as conn, conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
            current = None
            if inspect(conn).has_table(VERSION_TABLE):
                current = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
            if current == head:
                return
            if current is not None and current not in known:
                raise StoreError(
                    f"the store at {self.url} has schema version {current}, newer than this archsearch "
                    f"knows (up to {head}): upgrade archsearch to open it"
                )
            if current is None and not create:
                raise NoStore(f"no archsearch store at {self.url}: it has no archsearch tables yet")
            if current is None:
                _refuse_foreign_tables(conn, self.url)
            command.upgrade(_alembic_config(conn), "head")

    def _check_schema(self) -> None:
        """What ``_migrate`` checks, without writing: an archsearch store of a schema we can read."""
        head, known = schema_revisions()
        try:
            current = self.schema_version()
        except DBAPIError as error:  # e.g. a file that is not a database at all
            raise StoreError(f"no archsearch store at {self.url}: {_first_line(error)}") from None
        if current is None:  # a database without archsearch's tables: no store there yet, as for a missing file
            with self.engine.connect() as conn:
                _refuse_foreign_tables(conn, self.url)
            raise NoStore(f"no archsearch store at {self.url}: it has no archsearch tables yet")
        if current not in known:
            raise StoreError(
                f"the store at {self.url} has schema version {current}, newer than this archsearch "
                f"knows (up to {head}): upgrade archsearch to open it"
            )

    def schema_version(self) -> str | None:
        with self.engine.connect() as conn:
            if not inspect(conn).has_table(VERSION_TABLE):
                return None
            return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
