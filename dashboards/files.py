"""Writing output files whole or not at all, and only where an output belongs.

A report, a figure or an export that fails half-way (a full disk, a kill, Ctrl-C) must leave the
previous good file intact, never a truncated one: ``os.replace`` within one directory is atomic.

``os.replace`` swaps out whatever the path names, so every output path is looked at first
(:func:`check_output`): it must be a regular file or nothing; ``-`` (and a path that is this process's
standard output, the ``-o /dev/stdout`` idiom) means standard output; it is never the store or any
other file the command reads; a device, a FIFO, a directory or a symbolic link is refused in one line.
An existing file keeps its mode.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

STANDARD_OUTPUT = "-"


class OutputRefused(ValueError):
    """An output path that is not a regular file (or absent), or names a file the command reads."""


def _default_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give (0666 less the umask): mkstemp's is 0600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _is_standard_output(path: str | Path) -> bool:
    try:
        target, out = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no such path, or no real stdout (a test's capture)
        return False
    return (target.st_dev, target.st_ino) == (out.st_dev, out.st_ino)


def check_output(path: str | Path, *, reads: Iterable[str | Path] = (), option: str = "--output") -> Path | None:
    """The file an output goes to, looked at before anything is written: None for standard output.

    ``reads``: files the command reads (the SQLite store, a spec); the output may be none of them.
    Raises :class:`OutputRefused` naming ``option`` and the path.
    """
    if str(path) == STANDARD_OUTPUT or _is_standard_output(path):
        return None
    target = Path(path)
    if os.path.islink(target):
        raise OutputRefused(f"{option} {path}: is a symbolic link; give the file itself, or - for standard output")
    try:
        mode = os.stat(target).st_mode
    except OSError:  # nothing there (or no way there: the write says why, as it always did)
        return target
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise OutputRefused(f"{option} {path}: is {kind}; give a file path, or - for standard output")
    for read in reads:
        with contextlib.suppress(OSError):
            if os.path.samefile(target, read):
                raise OutputRefused(f"{option} {path}: is {read}, which this command reads; write elsewhere")
    return target


def check_output_dir(path: str | Path, *, option: str) -> Path:
    """An output directory: a directory or nothing (created later), never a file, a device or a link."""
    target = Path(path)
    if os.path.islink(target):
        raise OutputRefused(f"{option} {path}: is a symbolic link; give the directory itself")
    if os.path.lexists(target) and not target.is_dir():
        raise OutputRefused(f"{option} {path}: is not a directory")
    return target


def write_output(path: Path | None, data: bytes | str, encoding: str = "utf-8") -> Path | None:
    """Write an output checked by :func:`check_output`: standard output for None, else :func:`atomic_write`."""
    if path is None:
        payload = data.encode(encoding) if isinstance(data, str) else data
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
        return None
    return atomic_write(path, data, encoding)


def atomic_write(path: str | Path, data: bytes | str, encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename (an
    existing file keeps its mode)."""
    path = Path(path)
    payload = data.encode(encoding) if isinstance(data, str) else data
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.isfile(path) else _default_mode()
    except OSError:
        mode = _default_mode()
    # The temporary name must fit where the target's does (255 bytes a name): a long target name
    # is cut, not lengthened (a legal 250-character name once failed "File name too long").
    prefix = "." + path.name.encode()[:200].decode(errors="ignore") + "."
    fd, temporary = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path
