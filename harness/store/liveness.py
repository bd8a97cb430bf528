"""Whether a study's search driver is still alive: the one-driver-per-study lease.

The driver that claims a study (:meth:`Liveness.claim_study`) writes a random token into the study row
(``lease``) and stamps ``lease_beat`` with the **database's** clock; it renews the beat every
``HEARTBEAT_S`` (:meth:`Liveness.heartbeat`). Every heartbeat and every write the driver makes to its
study is conditional on the token (:func:`check_lease`): a driver whose study was taken over, or
deleted, gets :class:`LeaseLost` instead of writing into someone else's record.

A driver is judged gone by its lease alone: no beat for ``HEARTBEAT_STALE_S`` on the database's clock
(so clock skew between nodes never reads as a dead driver). Its PID is consulted only where the reader
provably shares its PID namespace (the same kernel boot and the same ``/proc/self/ns/pid``, recorded in
the driver's identity ``"HOST PID START KERNEL"``): there a dead PID is known at once; a container on
the same host with its own PID namespace sees another process table, and there a PID means nothing.
A study whose driver is gone becomes ``interrupted`` (resumable), and its lease can be taken over.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

from sqlalchemy import DateTime, func, select

from trials.status import StudyStatus, TrialStatus

from . import driver_lock
from .base import StoreBase, _now
from .errors import LeaseLost, StoreError
from .schema import Study, Trial

HEARTBEAT_S = 30.0  # a running search's driver renews its lease this often
HEARTBEAT_STALE_S = 600.0  # a lease not renewed this long (on the database's clock) is taken as gone


def db_clock():
    """The database's current time as a SQL expression (``CURRENT_TIMESTAMP``): every lease beat is
    stamped, and every beat's age judged, on this one clock, never on a client's."""
    return func.current_timestamp(type_=DateTime(timezone=True))


def new_lease() -> str:
    return secrets.token_hex(16)


@cache
def kernel_namespace() -> str:
    """This process's kernel boot and PID namespace (``BOOTID:NSINODE``): two processes that agree on
    it see the same process table, so one may judge the other by its PID. Empty where /proc has no
    such files (then PIDs are never trusted)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:16]
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{boot}:{namespace}"


def driver_identity(pid: int | None = None) -> str:
    """``"HOST PID START KERNEL"`` of a process (this one by default): START (the process's start time in
    clock ticks since boot, from /proc) tells a live driver from a new process that reused its PID;
    KERNEL (:func:`kernel_namespace`) says which process table the PID belongs to."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()} {pid} {_process_start(pid) or 0} {kernel_namespace() or '-'}"


def describe_driver(driver: str | None) -> str:
    """``pid N on HOST``: how messages name a driver; ``(another PID namespace)`` after it where the driver's
    process table is not this one's (a container's driver is ``pid 1`` there, which names nothing here)."""
    host, pid, _, kernel = ([*(driver or "").split(), "?", "?", "", ""])[:4]
    here = kernel_namespace()
    elsewhere = host == socket.gethostname() and kernel not in ("", "-") and here and kernel != here
    return f"pid {pid} on {host}" + (" (another PID namespace)" if elsewhere else "")


def _process_start(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22 of proc(5), counted after the command name


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _aware(moment: datetime | None) -> datetime | None:
    if moment is not None and moment.tzinfo is None:  # SQLite returns naive datetimes (stored in UTC)
        return moment.replace(tzinfo=timezone.utc)
    return moment


@dataclass(frozen=True)
class DriverRecord:
    """What a reader knows of a running study's driver: its identity, its lease, the lease's last beat
    and the database's time when it was read (``updated_at``: an older archsearch's heartbeat)."""

    driver: str | None
    lease: str | None = None
    lease_beat: datetime | None = None
    db_now: datetime | None = None
    updated_at: datetime | None = None
    lock_held: bool | None = None  # a SQLite store's driver lock (harness.store.driver_lock); None: unknown


def driver_record(row, lock_held: bool | None = None) -> DriverRecord:
    """A :class:`DriverRecord` from a row selected with :func:`driver_columns`, with what the store
    knows of the study's driver lock (:meth:`StoreBase.driver_lock_held`; None: nothing)."""
    mapping = row._mapping
    return DriverRecord(
        mapping["driver"],
        mapping.get("lease"),
        _aware(mapping.get("lease_beat")),
        _aware(mapping.get("db_now")),
        _aware(mapping.get("updated_at")),
        lock_held,
    )


def driver_columns(table, present: set[str] | None = None) -> list:
    """The columns :func:`driver_record` reads (those of them this database has) and the database's time."""
    names = ("driver", "lease", "lease_beat", "updated_at")
    chosen = [table.c[n] for n in names if present is None or n in present]
    return [*chosen, db_clock().label("db_now")]


def driver_gone(record: DriverRecord, stale_after_s: float = HEARTBEAT_STALE_S) -> str | None:
    """Why a ``running`` study's driver is known to be gone, or None while it may be alive."""
    host, pid, start, kernel = [*(record.driver or "").split(), "", "", "", ""][:4]
    if pid.isdigit() and host == socket.gethostname() and kernel and kernel == kernel_namespace():
        alive = _pid_alive(int(pid)) and str(_process_start(int(pid)) or 0) == start
        return None if alive else f"interrupted: its driver (pid {pid} on {host}) stopped before the search ended"
    if record.lock_held:  # a SQLite store's driver lock, held: alive, whatever the clocks of reader and driver
        return None
    if record.lease is not None:  # judged by the lease's beat on the database's clock alone
        if record.lease_beat is None or record.db_now is None:
            return None
        idle = (record.db_now - record.lease_beat).total_seconds()
        if idle > stale_after_s:
            return f"interrupted: no heartbeat from its driver on {host or '?'} for {idle / 60:.0f} minutes"
        return None
    # A study claimed by an older archsearch (no lease): its PID on this host, else its own heartbeat.
    if not kernel and pid.isdigit() and host == socket.gethostname():
        alive = _pid_alive(int(pid)) and str(_process_start(int(pid)) or 0) == start
        return None if alive else f"interrupted: its driver (pid {pid} on {host}) stopped before the search ended"
    if record.updated_at is not None:
        idle = ((record.db_now or _now()) - record.updated_at).total_seconds()
        if idle > stale_after_s:
            where = f" on {host}" if host else ""
            return f"interrupted: no heartbeat from its driver{where} for {idle / 60:.0f} minutes"
    return None


def check_lease(conn, study_id: int, name: str, lease: str | None) -> None:
    """Inside a write transaction: refuse (:class:`LeaseLost`) unless the study is still held by ``lease``.

    ``lease=None`` (a command that is not the study's driver: an admin command, a test) checks nothing.
    The row is locked for the rest of the transaction (``FOR UPDATE``; SQLite's writers hold the whole
    database), so nobody takes the lease between this check and the write it guards.
    """
    if lease is None:
        return
    table = Study.__table__
    row = conn.execute(
        select(table.c.lease, table.c.status, table.c.driver).where(table.c.id == study_id).with_for_update()
    ).one_or_none()
    if row is None:
        raise LeaseLost.deleted(name)
    if row.lease != lease:
        by = (
            f" by another driver ({describe_driver(row.driver)})"
            if row.driver and row.status == StudyStatus.RUNNING
            else ""
        )
        raise LeaseLost(f"this driver lost its lease on study {name!r}: the study was taken over{by}")


class Liveness(StoreBase):
    """The driver lease of a study (claim, heartbeat) and the detection of drivers that are gone."""

    def claim_study(self, name: str, stale_after_s: float = HEARTBEAT_STALE_S) -> str:
        """Take the study's driver lease for this process and return its token, or refuse
        (:class:`StoreError`) while another live driver holds it: one driver per study, whatever the store.

        One write transaction: the study row is locked (``FOR UPDATE`` on PostgreSQL; SQLite's write
        transactions begin with ``BEGIN IMMEDIATE``), its holder checked (:func:`driver_gone`) and
        replaced by a new random token, stamped with the database's clock. A lease whose driver is gone
        is taken over; the driver that held it finds out at its next heartbeat or write.
        """
        study_id = self._study_id(name)
        me, token = driver_identity(), new_lease()
        table = Study.__table__
        path = self.sqlite_file()
        had_lock = path is not None and driver_lock.held_here(path, study_id) is not None
        lock = driver_lock.hold(path, study_id) if path is not None else None  # before the lease: seen alive
        held_elsewhere = path is not None and lock is None and driver_lock.lock_held(path, study_id)

        def claim(conn) -> str:
            query = select(table.c.status, *driver_columns(table)).where(table.c.id == study_id)
            row = conn.execute(query.with_for_update()).one()
            record = driver_record(row, True if held_elsewhere else None)
            held = row.status == StudyStatus.RUNNING and record.driver and record.driver != me
            if held and driver_gone(record, stale_after_s) is None:
                raise StoreError(
                    f"study {name!r} is being run by another driver ({describe_driver(record.driver)}): wait for "
                    "it to end, or stop it (Ctrl-C there) and continue it then (`archsearch search --resume`, or the "
                    "`archsearch reproduce` command that started it)"
                )
            conn.execute(
                table.update()
                .where(table.c.id == study_id)
                .values(status=StudyStatus.RUNNING, driver=me, status_message=None, updated_at=_now())
                .values(lease=token, lease_beat=db_clock())
            )
            return token

        try:
            token = self._write(claim)
        except BaseException:
            if lock is not None and not had_lock:
                driver_lock.release(path, study_id)
            raise
        self._leases[name] = token
        return token

    def hold_lease(self, name: str, lease: str | None) -> None:
        """Write to study ``name`` under ``lease`` (what :meth:`claim_study` returned, in this driver's
        other connections to the store): every write to the study checks the lease is still held."""
        if lease is None:
            self._leases.pop(name, None)
            path = self.sqlite_file()
            if path is not None and name in self._study_ids:
                driver_lock.release(path, self._study_ids[name])
        else:
            self._leases[name] = lease

    def live_driver(self, name: str, stale_after_s: float = HEARTBEAT_STALE_S) -> str | None:
        """``pid N on HOST`` of the live driver running the study now (None: no live driver); a read."""
        table = Study.__table__
        present = self.present_columns(table)
        with self.engine.connect() as conn:
            row = conn.execute(
                select(table.c.status, *driver_columns(table, present)).where(table.c.id == self._study_id(name))
            ).one()
        record = driver_record(row, self.driver_lock_held(self._study_id(name)))
        if row.status != StudyStatus.RUNNING or not record.driver or record.driver == driver_identity():
            return None
        if driver_gone(record, stale_after_s) is not None:
            return None
        return describe_driver(record.driver)

    def verify_lease(self, name: str) -> None:
        """:class:`LeaseLost` unless this store's lease on ``name`` (:meth:`hold_lease`) is still the
        study's: what a driver checks before it acts outside the store (telling Optuna an outcome)."""
        study_id = self._study_id(name)
        self._write(lambda conn: check_lease(conn, study_id, name, self.lease_of(name)))

    def heartbeat(self, name: str) -> None:
        """The study's driver says it is alive: its lease's beat, stamped with the database's clock.

        :class:`LeaseLost` where this store holds a lease on the study (:meth:`hold_lease`) and the
        study is no longer held by it: the caller must stop its search."""
        study_id = self._study_id(name)
        table = Study.__table__

        def beat(conn) -> None:
            check_lease(conn, study_id, name, self.lease_of(name))
            conn.execute(
                table.update()
                .where(table.c.id == study_id, table.c.status == StudyStatus.RUNNING)
                .values(updated_at=_now(), lease_beat=db_clock())
            )

        self._write(beat)

    def gone_drivers(self, stale_after_s: float = HEARTBEAT_STALE_S) -> dict[str, str]:
        """``running`` studies whose driver is gone, with why (what :meth:`mark_interrupted` would record)."""
        table = Study.__table__
        present = self.present_columns(table)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(table.c.name, table.c.id, *driver_columns(table, present)).where(
                    table.c.status == StudyStatus.RUNNING
                )
            ).all()
        reasons = {
            row.name: driver_gone(driver_record(row, self.driver_lock_held(row.id)), stale_after_s) for row in rows
        }
        return {name: reason for name, reason in reasons.items() if reason is not None}

    def mark_interrupted(self, stale_after_s: float = HEARTBEAT_STALE_S, names: list[str] | None = None) -> list[str]:
        """Studies marked ``running`` whose driver is gone (:func:`driver_gone`) become ``interrupted``,
        and so do their trials still marked ``running`` (the driver that would have recorded their end
        is gone; each keeps why in its ``error``), as a stop the driver saw records them; returns the
        studies' names. ``names``: only these studies. Each is re-checked inside its write transaction,
        so a driver that renewed its lease meanwhile is never marked.

        Optuna's trials are left as they are (RUNNING): the study stays resumable, as after Ctrl-C."""
        gone = []
        table, trials = Study.__table__, Trial.__table__
        for name in self.gone_drivers(stale_after_s):
            if names is not None and name not in names:
                continue
            study_id = self._study_id(name)

            def write(conn, study_id=study_id) -> bool:
                query = select(table.c.status, *driver_columns(table)).where(table.c.id == study_id)
                row = conn.execute(query.with_for_update()).one_or_none()
                record = driver_record(row, self.driver_lock_held(study_id)) if row else None
                reason = driver_gone(record, stale_after_s) if row and row.status == StudyStatus.RUNNING else None
                if reason is None:
                    return False
                conn.execute(
                    table.update()
                    .where(table.c.id == study_id)
                    .values(status=StudyStatus.INTERRUPTED, driver=None, status_message=reason, updated_at=_now())
                    .values(lease=None)  # judged gone: a driver still alive has lost its lease
                )
                conn.execute(
                    trials.update()
                    .where(trials.c.study_id == study_id, trials.c.status == TrialStatus.RUNNING)
                    .values(status=TrialStatus.INTERRUPTED, error=reason, ended_at=_now())
                )
                return True

            if self._write(write):
                gone.append(name)
        return gone
