"""Whether a study's search driver is still alive, and the one-driver-per-study lease. A running
study records its driver as ``"HOST PID START"`` (:func:`driver_identity`) and the driver touches the
study every ``HEARTBEAT_S``; a driver on this host is checked directly (its PID and process start
time), one on another host is taken as gone after ``HEARTBEAT_STALE_S`` without a heartbeat. A study
whose driver is gone becomes ``interrupted`` (resumable), and its lease can be taken over.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import select

from .base import StoreBase, _now
from .errors import StoreError
from .schema import Study

HEARTBEAT_S = 30.0  # a running search's driver touches its study this often
HEARTBEAT_STALE_S = 600.0  # a driver on another host silent this long is taken as gone


def driver_identity(pid: int | None = None) -> str:
    """``"HOST PID START"`` of a process (this one by default): START (the process's start time in
    clock ticks since boot, from /proc) tells a live driver from a new process that reused its PID."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()} {pid} {_process_start(pid) or 0}"


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


def _driver_gone(driver: str | None, updated_at: datetime | None, now: datetime, stale_after_s: float) -> str | None:
    """Why a ``running`` study's driver is known to be gone, or None while it may be alive."""
    host, pid, start = [*driver.split(), "", "", ""][:3] if driver else ("", "", "")
    if host == socket.gethostname() and pid.isdigit():
        alive = _pid_alive(int(pid)) and str(_process_start(int(pid)) or 0) == start
        return None if alive else f"interrupted: its driver (pid {pid} on {host}) stopped before the search ended"
    if updated_at is not None:
        if updated_at.tzinfo is None:  # SQLite returns naive datetimes (stored in UTC)
            updated_at = updated_at.replace(tzinfo=timezone.utc)
        idle = (now - updated_at).total_seconds()
        if idle > stale_after_s:
            where = f" on {host}" if host else ""
            return f"interrupted: no heartbeat from its driver{where} for {idle / 60:.0f} minutes"
    return None


class Liveness(StoreBase):
    """The driver lease of a study (claim, heartbeat) and the detection of drivers that are gone."""

    def claim_study(self, name: str, stale_after_s: float = HEARTBEAT_STALE_S) -> None:
        """Take the study's driver lease for this process, or refuse (:class:`StoreError`) while another
        live driver holds it: one driver per study, whatever the store.

        One write transaction: the study row is locked (``FOR UPDATE`` on PostgreSQL; SQLite's write
        transactions begin with ``BEGIN IMMEDIATE``), its holder checked (alive by PID on this host, by
        heartbeat from another) and replaced. A lease whose driver is gone is taken over.
        """
        study_id = self._study_id(name)
        me = driver_identity()
        table = Study.__table__

        def claim(conn) -> None:
            query = select(table.c.status, table.c.driver, table.c.updated_at).where(table.c.id == study_id)
            row = conn.execute(query.with_for_update()).one()
            holder = row.driver
            held = row.status == "running" and holder and holder != me
            if held and _driver_gone(holder, row.updated_at, _now(), stale_after_s) is None:
                host, pid = ([*holder.split(), "?", "?"])[:2]
                raise StoreError(
                    f"study {name!r} is being run by another driver (pid {pid} on {host}): wait for it to "
                    "end, or stop it (Ctrl-C there) and resume it with --resume"
                )
            conn.execute(
                table.update()
                .where(table.c.id == study_id)
                .values(status="running", driver=me, status_message=None, updated_at=_now())
            )

        self._write(claim)

    def live_driver(self, name: str, stale_after_s: float = HEARTBEAT_STALE_S) -> str | None:
        """``pid N on HOST`` of the live driver running the study now (None: no live driver); a read."""
        table = Study.__table__
        with self.engine.connect() as conn:
            row = conn.execute(
                select(table.c.status, table.c.driver, table.c.updated_at).where(table.c.id == self._study_id(name))
            ).one()
        if row.status != "running" or not row.driver or row.driver == driver_identity():
            return None
        if _driver_gone(row.driver, row.updated_at, _now(), stale_after_s) is not None:
            return None
        host, pid = ([*row.driver.split(), "?", "?"])[:2]
        return f"pid {pid} on {host}"

    def heartbeat(self, name: str) -> None:
        """A running study's driver says it is alive (``updated_at``); see :meth:`mark_interrupted`."""
        study_id = self._study_id(name)
        self._write(
            lambda conn: conn.execute(
                Study.__table__.update()
                .where(Study.id == study_id, Study.status == "running")
                .values(updated_at=_now())
            )
        )

    def gone_drivers(self, stale_after_s: float = HEARTBEAT_STALE_S) -> dict[str, str]:
        """``running`` studies whose driver is gone, with why (what :meth:`mark_interrupted` would record)."""
        table = Study.__table__
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(table.c.name, table.c.driver, table.c.updated_at).where(table.c.status == "running")
            ).all()
        now = _now()
        reasons = {name: _driver_gone(driver, updated_at, now, stale_after_s) for name, driver, updated_at in rows}
        return {name: reason for name, reason in reasons.items() if reason is not None}

    def mark_interrupted(self, stale_after_s: float = HEARTBEAT_STALE_S) -> list[str]:
        """Studies marked ``running`` whose driver is gone become ``interrupted``; returns their names.

        A driver on this host is checked directly (its process, by PID and start time); one on
        another host is taken as gone when it has not sent a heartbeat for ``stale_after_s``.
        """
        table = Study.__table__
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(table.c.id, table.c.name, table.c.driver, table.c.updated_at).where(table.c.status == "running")
            ).all()
        gone = []
        now = _now()
        for study_id, name, driver, updated_at in rows:
            reason = _driver_gone(driver, updated_at, now, stale_after_s)
            if reason is None:
                continue

            def write(conn, study_id=study_id, reason=reason) -> None:
                conn.execute(
                    table.update()
                    .where(table.c.id == study_id, table.c.status == "running")
                    .values(status="interrupted", driver=None, status_message=reason, updated_at=_now())
                )

            self._write(write)
            gone.append(name)
        return gone
