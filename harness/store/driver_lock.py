"""A kernel lock that says a SQLite store's study has a live driver, whatever the clocks say.

A PostgreSQL store judges a lease's beat on the server's clock. A SQLite store has no server: its
``CURRENT_TIMESTAMP`` is the clock of whichever process reads it, so a reader whose clock runs ahead
(another host on a shared filesystem, another container) would judge a live driver silent and take its
study. So the driver of a study in a SQLite file also holds an open-file-description lock (Linux's
``F_OFD_SETLK``) on one byte of the database file, at ``LOCK_BASE + study id``: far past the bytes
SQLite locks (about 1 GiB in), and released by the kernel when the driver dies, however it dies. A
reader asks the kernel (``F_OFD_GETLK``, nothing taken) whether anyone holds it: held means alive, on
any clock and in any PID namespace of the host (or of the file server's clients, where the filesystem
shares locks). Not held, or not knowable (another OS, a filesystem without such locks), leaves the
judgement to the lease's beat.

The lock's open file also tells the driver when its store file was replaced or removed under it
(:meth:`DriverLock.file_replaced`): its writes would go to a file nobody will read.

Why the descriptors stay open. SQLite's own locks on the file are POSIX record locks, which belong to the
process: closing *any* descriptor this process has on the file drops them all, while SQLite's connections
still believe they hold them (SQLite's "how to corrupt" notes, 2.2). Opening the file to ask about a lock and
closing it again let another process think itself the last connection, checkpoint and delete the WAL that this
process's open connection went on writing to: two WALs for one database, and committed rows invisible to
every fresh reader. So this module opens each store file at most once per mode for the life of the process
(:func:`_descriptor`) and never closes it: a lock is let go with ``F_UNLCK``, not with ``close``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
from pathlib import Path

LOCK_BASE = 1 << 62  # past any byte SQLite locks (PENDING_BYTE is 0x40000000) or a file may hold
_FLOCK = "hhqqi4x"  # struct flock on Linux: type, whence, start, len, pid (0 for OFD locks), padding
try:
    import fcntl
except ImportError:  # not a POSIX system: no such locks, the lease's beat alone judges
    fcntl = None
_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", None)
_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", None)
_BUSY = (errno.EAGAIN, errno.EACCES)


def _request(study_id: int, kind: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, LOCK_BASE + study_id, 1, 0)


# Descriptors on store files, by (absolute path, mode): opened once, never closed (the module's docstring). A
# file replaced at its path gets new ones; the old ones stay open, since closing them would drop this process's
# SQLite locks on the old file, which its connections may still hold.
_FILES: dict[tuple[str, int], int] = {}


def _descriptor(path: Path, mode: int) -> int | None:
    """This process's descriptor on the store file at ``path`` (``os.O_RDWR`` or ``os.O_RDONLY``), opened the
    first time and kept; None where the file cannot be opened."""
    key = (os.path.abspath(path), mode)
    fd = _FILES.get(key)
    try:
        if fd is not None and _identity(os.fstat(fd)) == _identity(os.stat(path)):
            return fd
        fd = os.open(path, mode | os.O_CLOEXEC)
    except OSError:
        return None
    _FILES[key] = fd
    return fd


class DriverLock:
    """The lock a driver holds on its study for as long as it runs (see the module's docstring)."""

    def __init__(self, fd: int, path: Path, study_id: int):
        self._fd = fd
        self.path = path
        self.study_id = study_id
        self._identity = _identity(os.fstat(fd))

    @classmethod
    def take(cls, path: Path, study_id: int) -> DriverLock | None:
        """The lock on ``study_id`` in the SQLite file at ``path``, or None where it cannot be had: held
        by another process (a live driver: :func:`lock_held` says so too) or not supported here."""
        if _OFD_SETLK is None:
            return None
        fd = _descriptor(path, os.O_RDWR)
        if fd is None:
            return None
        try:
            fcntl.fcntl(fd, _OFD_SETLK, _request(study_id, fcntl.F_WRLCK))
        except OSError:
            return None
        return cls(fd, path, study_id)

    def file_replaced(self) -> bool:
        """Whether the store file this driver opened is no longer the one at its path (removed, or
        replaced by a copy or a restore): what it writes now is lost to every later reader."""
        try:
            return _identity(os.stat(self.path)) != self._identity
        except OSError:
            return True

    def release(self) -> None:
        """Let go of the lock (``F_UNLCK``); the descriptor stays open (the module's docstring)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.fcntl(self._fd, _OFD_SETLK, _request(self.study_id, fcntl.F_UNLCK))
            self._fd = -1


def lock_held(path: Path, study_id: int) -> bool | None:
    """Whether some process holds the driver lock on ``study_id`` in the SQLite file at ``path``
    (None: cannot be known here). Only asks: a reader takes nothing a driver could need."""
    if _OFD_GETLK is None:
        return None
    fd = _descriptor(path, os.O_RDONLY)  # another open file description than the lock's: it sees this process's
    if fd is None:
        return None
    try:
        answer = fcntl.fcntl(fd, _OFD_GETLK, _request(study_id, fcntl.F_WRLCK))
    except OSError as error:
        return True if error.errno in _BUSY else None
    return struct.unpack(_FLOCK, answer)[0] != fcntl.F_UNLCK


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return (stat.st_dev, stat.st_ino)


# The locks this process holds, by (store file path, study id): a lease outlives the store that
# claimed it (the driver's heartbeat and writers open their own), so the lock belongs to the process.
# By path, not inode: a driver whose file was replaced still finds its lock, and so learns it.
_HELD: dict[tuple[str, int], DriverLock] = {}


def _key(path: Path, study_id: int) -> tuple[str, int]:
    return (os.path.abspath(path), study_id)


def hold(path: Path, study_id: int) -> DriverLock | None:
    """This process's lock on ``study_id`` (taken now, or already held), or None where another holds it."""
    key = _key(path, study_id)
    if key in _HELD and _HELD[key].file_replaced():  # an earlier file at this path: its lock says nothing
        _HELD.pop(key).release()
    if key not in _HELD:
        lock = DriverLock.take(path, study_id)
        if lock is None:
            return None
        _HELD[key] = lock
    return _HELD[key]


def held_here(path: Path, study_id: int) -> DriverLock | None:
    return _HELD.get(_key(path, study_id))


def release(path: Path, study_id: int) -> None:
    """Let go of this process's lock on ``study_id`` (its search has ended)."""
    lock = _HELD.pop(_key(path, study_id), None)
    if lock is not None:
        lock.release()
