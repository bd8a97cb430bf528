"""What every part of :class:`~harness.store.store.Store` builds on: the open engine and its masked
URL, the study-name lookup every write and query starts from, and the write transaction. A write
runs in one transaction on a connection marked ``archsearch_write`` (on SQLite that takes the lock
at ``BEGIN IMMEDIATE``, see :mod:`harness.store.engine`) and is retried on lock contention and
deadlocks, so concurrent writers queue instead of failing; rows are written as idempotent upserts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, func, inspect, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError

from trials.errors import capped

from . import driver_lock
from .errors import LeaseLost, StoreError
from .schema import Study
from .urls import mask_url

T = TypeVar("T")
KNOWN_SHOWN = 20  # studies an unknown name's error lists

_RETRYABLE_PG_CODES = {"40001", "40P01"}  # serialization failure, deadlock detected
# Upsert statements by (dialect, table, columns, conflict keys, kept columns): see StoreBase._upsert.
# Statements hold no values and are never mutated (``.returning()`` makes a new one), so one is
# shared by every store and thread of the process.
_UPSERTS: dict[tuple, Any] = {}


def _now() -> datetime:
    return datetime.now(timezone.utc)


class StoreBase:
    """The store's state (engine, masked URL, read-only flag, study ids) and its write transaction."""

    def __init__(self, engine: Engine, url: str, read_only: bool = False):
        self.engine = engine
        self.url = mask_url(url)  # never keep a printable copy with the password
        self.read_only = read_only
        self._study_ids: dict[str, int] = {}
        self._columns: dict[str, set[str]] = {}
        self._leases: dict[str, str] = {}  # study name -> the driver lease this store writes under

    def lease_of(self, study: str) -> str | None:
        """The lease this store holds on ``study`` (see :mod:`harness.store.liveness`): its writes to
        that study are conditional on it. None: a store that is not the study's driver checks nothing.

        :class:`LeaseLost` where this process drives the study in a SQLite file that was removed or
        replaced under it (:mod:`harness.store.driver_lock`): its writes would reach nobody."""
        lease = self._leases.get(study)
        path = self.sqlite_file() if lease is not None else None
        lock = driver_lock.held_here(path, self._study_ids[study]) if path and study in self._study_ids else None
        if lock is not None and lock.file_replaced():
            raise LeaseLost(
                f"the store file {path} was removed or replaced while this driver ran study {study!r}: "
                "what it would write now is lost to every reader; the search stops"
            )
        return lease

    def driver_lock_held(self, study_id: int) -> bool | None:
        """Whether a driver holds the study's lock in this SQLite store (:mod:`harness.store.driver_lock`;
        None: another backend, or not knowable here): every judgement of a driver's liveness asks."""
        path = self.sqlite_file()
        return None if path is None else driver_lock.lock_held(path, study_id)

    def sqlite_file(self) -> Path | None:
        """The database file of a SQLite store (None: another backend, or SQLite in memory)."""
        url = self.engine.url
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            return None
        return Path(url.database)

    def present_columns(self, table) -> set[str]:
        """The columns ``table`` has in this database: a store of an older schema opened read-only is
        read as it is (not migrated), and a column a later schema added is simply not there."""
        if table.name not in self._columns:
            self._columns[table.name] = {column["name"] for column in inspect(self.engine).get_columns(table.name)}
        return self._columns[table.name]

    # -- studies by name ---------------------------------------------------------------------------
    def _study_id(self, name: str) -> int:
        if name not in self._study_ids:
            with self.engine.connect() as conn:
                study_id = conn.execute(select(Study.id).where(Study.name == name)).scalar()
            if study_id is None:
                if name in self._leases:  # this store is the study's driver: its study was deleted under it
                    raise LeaseLost.deleted(name)
                raise StoreError(self._unknown_study_message(name))
            self._study_ids[name] = study_id
        return self._study_ids[name]

    def _unknown_study_message(self, name: str) -> str:
        """One line, however long the name asked for or however many studies the store holds."""
        known = self.study_names()
        shown = ", ".join(capped(k) for k in known[:KNOWN_SHOWN])
        more = f" and {len(known) - KNOWN_SHOWN} more (archsearch studies)" if len(known) > KNOWN_SHOWN else ""
        hint = f"known studies: {shown}{more}" if known else "the store has no studies yet"
        return f"study {capped(name)!r} not found in {self.url}; {hint}"

    def study_names(self) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(Study.name).order_by(Study.id)).scalars())

    # -- transactions ------------------------------------------------------------------------------
    def _write_connection(self):
        return self.engine.connect().execution_options(archsearch_write=True)

    def _write(self, fn: Callable[[Any], T], attempts: int = 8) -> T:
        """Run ``fn(connection)`` in one write transaction, retrying lock contention and deadlocks."""
        for attempt in range(attempts):
            try:
                with self._write_connection() as conn, conn.begin():
                    return fn(conn)
            except DBAPIError as error:
                if attempt == attempts - 1 or not self._retryable(error):
                    raise
                time.sleep(min(2.0, 0.05 * 2**attempt))
        raise AssertionError("unreachable")

    @staticmethod
    def _retryable(error: DBAPIError) -> bool:
        code = getattr(getattr(error, "orig", None), "sqlstate", None)
        message = str(getattr(error, "orig", error)).lower()
        return code in _RETRYABLE_PG_CODES or "database is locked" in message or "database is busy" in message

    def _insert(self, conn, model):
        insert = postgresql_insert if conn.dialect.name == "postgresql" else sqlite_insert
        return insert(model)

    def _upsert(
        self,
        conn,
        model,
        rows: Sequence[dict[str, Any]],
        keys: Sequence[str],
        returning=None,
        keep: Sequence[str] = (),
    ):
        """INSERT ... ON CONFLICT (keys) DO UPDATE for ``rows`` (all with the same columns).

        Columns in ``keep`` keep the stored value when there is one (a first start time outlives a
        retry). The statement carries no values, so SQLAlchemy compiles it once and caches it; the
        rows go as parameters (executemany for several rows). The statement object itself is built
        once per shape and kept: building it aliases the whole table (``excluded``), a few
        milliseconds per write on the trials table, every epoch of every trial.
        """
        shape = (conn.dialect.name, model.__tablename__, tuple(rows[0]), tuple(keys), tuple(keep))
        stmt = _UPSERTS.get(shape)
        if stmt is None:
            stmt = self._insert(conn, model)
            table = model.__table__
            updates = {
                name: func.coalesce(table.c[name], stmt.excluded[name]) if name in keep else stmt.excluded[name]
                for name in rows[0]
                if name not in keys
            }
            stmt = _UPSERTS[shape] = stmt.on_conflict_do_update(index_elements=list(keys), set_=updates)
        if returning is not None:
            return conn.execute(stmt.returning(returning), rows[0])
        return conn.execute(stmt, list(rows))
