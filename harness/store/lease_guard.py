"""Optuna's writes to a study, made under its driver's lease in the same transaction.

Optuna's storage writes in transactions of its own (an asked trial, an intermediate value, an
outcome), on an engine archsearch does not build. A lease check before such a write and the write
itself were two transactions, and a takeover that committed between them let the old driver write
once more: CI caught a WAITING trial it popped turning RUNNING in a study it no longer held, a trial
nobody would ever end. The guard makes the check the first statement before each transaction's first
write, as a compare-and-lock: ``UPDATE studies SET lease = lease WHERE name = :study AND lease =
:lease``. It takes the study row's lock on PostgreSQL and the database's write lock on SQLite until
Optuna commits, so a takeover waits for the write in flight and every later write sees it.
"""

from __future__ import annotations

from typing import Any, Protocol

from sqlalchemy import Engine, event, select, update

from .errors import LeaseLost
from .liveness import check_lease
from .schema import Study

_CHECKED = "archsearch_lease_checked"  # in a connection's info: this transaction's lease was checked
_CHECKING = "archsearch_lease_checking"  # the check's own statement is running (not guarded again)
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class LeaseHolder(Protocol):
    """What the guard asks of the search it guards (:class:`harness.search.session.SearchSession`)."""

    study: str
    lease: str | None
    lease_lost: bool


def guard_writes(engine: Engine, holder: LeaseHolder) -> None:
    """Every write transaction on ``engine`` (an Optuna ``RDBStorage``'s) checks and locks
    ``holder``'s lease on its study before its first write; :class:`LeaseLost` (the transaction rolled
    back, nothing written) where the study is no longer held. No lease yet (a study being created):
    nothing is checked. Installed once, on an engine the caller built for this search.

    The mark that a transaction was checked lives on the database connection; it is forgotten when the
    transaction ends (commit, rollback) and when the pool takes the connection back, which may end a
    transaction without either event."""
    event.listen(engine, "before_cursor_execute", _checking(holder))
    event.listen(engine, "commit", _forget_check)
    event.listen(engine, "rollback", _forget_check)
    event.listen(engine, "checkin", _forget_check_on_checkin)


def _checking(holder: LeaseHolder):
    def before_cursor_execute(conn, cursor, statement: str, parameters: Any, context: Any, executemany: bool):
        if conn.info.get(_CHECKED) or conn.info.get(_CHECKING) or not _is_write(statement):
            return
        if holder.lease_lost:
            raise LeaseLost(f"this driver lost its lease on study {holder.study!r}")
        if holder.lease is None:
            return
        conn.info[_CHECKING] = True
        try:
            _check_and_lock(conn, holder.study, holder.lease)
        finally:
            conn.info.pop(_CHECKING, None)
        conn.info[_CHECKED] = True

    return before_cursor_execute


def _check_and_lock(conn, study: str, lease: str) -> None:
    """The study is still held by ``lease``, and stays so until this transaction ends."""
    table = Study.__table__
    held = conn.execute(
        update(table).where(table.c.name == study, table.c.lease == lease).values(lease=table.c.lease)
    ).rowcount
    if held == 1:
        return
    study_id = conn.execute(select(table.c.id).where(table.c.name == study)).scalar_one_or_none()
    if study_id is None:
        raise LeaseLost.deleted(study)
    check_lease(conn, study_id, study, lease)  # says who holds it now, as every store write does
    raise LeaseLost(f"this driver lost its lease on study {study!r}")


def _forget_check(conn) -> None:
    conn.info.pop(_CHECKED, None)


def _forget_check_on_checkin(dbapi_connection, connection_record) -> None:
    connection_record.info.pop(_CHECKED, None)


def _is_write(statement: str) -> bool:
    return statement.lstrip().split(None, 1)[0].upper() in _WRITES if statement.strip() else False
