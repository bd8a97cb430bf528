"""Writing output files whole or not at all, and only where an output belongs.

A report, a figure or an export that fails half-way (a full disk, a kill, Ctrl-C) must leave the
previous good file intact, never a truncated one: ``os.replace`` within one directory is atomic.

``os.replace`` swaps out whatever the path names, so every output path is looked at first
(:func:`check_output`): it must be a regular file or nothing; ``-`` (and a path that is this process's
standard output, the ``-o /dev/stdout`` idiom) means standard output; it is never the store or any
other file the command reads (compared by device and inode, and by name where the file is absent, such
as a store's ``-wal`` before SQLite makes one), nor, for ``-``, a standard output that is one of them
(``-o - >> store.db``); a path ending in ``/`` names a directory; a device, a FIFO, a directory or a
symbolic link is refused in one line. An existing file keeps its mode.

Whatever checked a path, :func:`atomic_write` itself never replaces a SQLite database (its 16-byte header
``SQLite format 3\\0``), a file with a ``-wal``/``-shm`` beside it, or the ``-wal``/``-shm`` of a database:
a figure or summary whose name collides with the store refuses, and the store stays a store.
Paths in messages are escaped (:func:`trials.errors.printable`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from trials.atomic import write_beside
from trials.errors import ArchsearchError, printable

STANDARD_OUTPUT = "-"
SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")  # a rollback journal SQLite would replay as hot


class OutputRefused(ArchsearchError, ValueError):
    """An output path that is not a regular file (or absent), or names a file the command reads.
    An :class:`ArchsearchError` (exit 2, one line) wherever it surfaces."""

    exit_code = 2


def _shown(path: str | Path) -> str:
    return printable(str(path))


def _same_file(path: str | Path, other: str | Path) -> bool:
    """``path`` and ``other`` are one file: the same (device, inode), or, where either is absent, the
    same name once links in their folders are resolved."""
    try:
        return os.path.samefile(path, other)
    except OSError:
        return os.path.realpath(path) == os.path.realpath(other)


def standard_output_is(reads: Iterable[str | Path]) -> str | Path | None:
    """The file of ``reads`` that this process's standard output (file descriptor 1) is, if any (the
    ``>> store.db`` redirection): compared by (device, inode)."""
    try:
        out = os.fstat(1)
    except OSError:
        return None
    if not stat.S_ISREG(out.st_mode):
        return None
    for read in reads:
        with contextlib.suppress(OSError):
            info = os.stat(read)
            if (info.st_dev, info.st_ino) == (out.st_dev, out.st_ino):
                return read
    return None


def _is_sqlite_database(path: str | Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def database_in_the_way(path: str | Path) -> str | None:
    """Why replacing ``path`` would damage a SQLite database (None when it would not): it is one, it
    has a ``-wal``/``-shm`` beside it, or it is the ``-wal``/``-shm`` of one.

    The side files are looked at first, and a file is opened to read its header only where it has none: a
    database with side files may be open in this process, and closing a descriptor on it would drop this
    process's SQLite locks there (POSIX record locks belong to the process; :mod:`harness.store.driver_lock`).
    Without side files no WAL connection has it open, and a rollback-journal one holds no lock between
    transactions."""
    name = str(path)
    for side in SQLITE_SIDE_FILES:
        if os.path.lexists(name + side):
            return f"has a SQLite {side} file beside it (a store?)"
        main = name[: -len(side)]
        if name.endswith(side) and os.path.isfile(main):  # a database's side file: its database is open somewhere
            return f"is the {side} file of the SQLite database {_shown(main)}"
    if os.path.isfile(name) and _is_sqlite_database(name):
        return "is a SQLite database (a store?)"
    return None


def _is_standard_output(path: str | Path) -> bool:
    try:
        target, out = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no such path, or no real stdout (a test's capture)
        return False
    return (target.st_dev, target.st_ino) == (out.st_dev, out.st_ino)


def check_output(
    path: str | Path,
    *,
    reads: Iterable[str | Path] = (),
    option: str = "--output",
    extensions: Sequence[str] = (),
    writes: str = "",
) -> Path | None:
    """The file an output goes to, looked at before anything is written: None for standard output.

    ``reads``: files the command reads (the SQLite store, a spec); the output may be none of them.
    ``extensions`` (``(".html", ".htm")``) with ``writes`` (``"the report is HTML"``): the names the
    output's format takes; a name whose extension is another (:func:`check_extension`) is refused.
    Raises :class:`OutputRefused` naming ``option`` and the path.
    """
    reads = list(reads)
    shown = _shown(path)
    if str(path) == STANDARD_OUTPUT or _is_standard_output(path):
        read = standard_output_is(reads)
        if read is not None:
            raise OutputRefused(
                f"{option} {shown}: standard output is {_shown(read)}, which this command reads; write elsewhere"
            )
        return None
    text = str(path)
    if not text or text.endswith(os.sep) or os.path.basename(text) in (".", ".."):
        raise OutputRefused(f"{option} {shown}: names a directory; give a file path, or - for standard output")
    target = Path(path)
    if os.path.islink(target):
        raise OutputRefused(f"{option} {shown}: is a symbolic link; give the file itself, or - for standard output")
    for read in reads:  # by (device, inode), or by name where absent (a store's -wal before SQLite makes one)
        if _same_file(target, read):
            raise OutputRefused(f"{option} {shown}: is {_shown(read)}, which this command reads; write elsewhere")
    if extensions:
        check_extension(path, extensions, writes, option=option)
    try:
        mode = os.stat(target).st_mode
    except OSError:  # nothing there (or no way there: the write says why, as it always did)
        return target
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise OutputRefused(f"{option} {shown}: is {kind}; give a file path, or - for standard output")
    return target


def check_extension(path: str | Path, extensions: Sequence[str], writes: str, *, option: str = "--output") -> None:
    """Refuse an output name whose extension says another format than the one written: ``report -o
    h1.png`` wrote HTML into a ``.png``, which an image viewer then refuses and a file manager shows as a
    broken picture. An extension is a final suffix of letters, or of letters and digits (``.png``, ``.json``,
    ``.mp4``, ``.h5``); a name without one (``report``, ``run.2024``: digits alone are a date or a version) is
    written as asked. Nothing is written when refused."""
    suffix = Path(str(path)).suffix
    if is_extension(suffix[1:]) and suffix.lower() not in {e.lower() for e in extensions}:
        accepted = " or ".join(extensions)
        raise OutputRefused(
            f"{option} {_shown(path)}: the extension {_shown(suffix)} does not match what is written "
            f"({writes}); use {accepted}"
        )


def is_extension(text: str) -> bool:
    """Whether a name's final suffix (without its dot) names a format: letters, or letters with digits."""
    return text.isascii() and text.isalnum() and any(c.isalpha() for c in text)


def check_output_dir(path: str | Path, *, option: str) -> Path:
    """An output directory: a directory or nothing (created later), never a file, a device or a link."""
    target = Path(path)
    if os.path.islink(target):
        raise OutputRefused(f"{option} {_shown(path)}: is a symbolic link; give the directory itself")
    if os.path.lexists(target) and not target.is_dir():
        kind = "is a file" if target.is_file() else "is not a directory"
        raise OutputRefused(f"{option} {_shown(path)}: {kind}; give a directory path")
    return target


def write_output(path: Path | None, data: bytes | str, encoding: str = "utf-8") -> Path | None:
    """Write an output checked by :func:`check_output`: standard output for None, else :func:`atomic_write`."""
    if path is None:
        payload = data.encode(encoding) if isinstance(data, str) else data
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
        return None
    return atomic_write(path, data, encoding)


class OutputSet:
    """Several files written as one output, all or nothing (a report and its PNGs): each is written to a
    temporary name beside its target as it comes, and only :meth:`commit` renames them all into place;
    a failure before (a full disk, a file-size limit, an error drawing the next figure) removes every
    temporary file, so no target is left half-written or written alone. Use as a context manager:
    leaving it by an exception discards."""

    def __init__(self) -> None:
        self._pending: list[tuple[str, Path]] = []  # (temporary, target), in the order written

    def write(self, path: str | Path, data: bytes | str, encoding: str = "utf-8") -> Path:
        """Stage ``data`` for ``path`` (checked as :func:`atomic_write` checks it); nothing is in place yet."""
        path = Path(path)
        self._pending.append((_write_temporary(path, data, encoding), path))
        return path

    def commit(self) -> None:
        """Rename every staged file into place, in the order written (a rename that fails leaves its
        file and the later ones staged, for :meth:`discard`)."""
        while self._pending:
            temporary, path = self._pending[0]
            os.replace(temporary, path)
            self._pending.pop(0)

    def discard(self) -> None:
        """Remove every staged file; no target is touched."""
        while self._pending:
            temporary, _ = self._pending.pop()
            with contextlib.suppress(OSError):
                os.unlink(temporary)

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        self.discard()  # after a commit nothing is left to discard


def atomic_write(path: str | Path, data: bytes | str, encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename (an
    existing file keeps its mode). Never replaces a SQLite database or its ``-wal``/``-shm``
    (:func:`database_in_the_way`): :class:`OutputRefused` instead, nothing written."""
    path = Path(path)
    with OutputSet() as output:
        output.write(path, data, encoding)
        output.commit()
    return path


def _write_temporary(path: Path, data: bytes | str, encoding: str) -> str:
    """``data`` in a temporary file beside ``path`` (:func:`trials.atomic.write_beside`), its name
    returned. Refused where ``path`` is a store's database."""
    in_the_way = database_in_the_way(path)
    if in_the_way is not None:
        raise OutputRefused(f"{_shown(path)}: {in_the_way}; not overwritten, write elsewhere")
    return write_beside(path, data, encoding=encoding)
