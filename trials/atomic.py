"""The one way archsearch replaces a file: write beside it, then rename.

A reader (another trial loading compile artifacts, a report open in a browser, Ray reading its
searcher state, a benchmark's JSON read while it runs) sees the previous whole file or the new whole
file, never a truncated one: ``os.replace`` within one directory is atomic. The temporary file is
fsynced before the rename, has the mode the target has (or would get from a plain ``open``), and is
removed when writing it fails. :mod:`dashboards.files` adds the checks an output path needs (never
a store's database) on top of this; every other writer calls :func:`atomic_write` directly.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def default_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give (0666 less the umask): mkstemp's is 0600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_beside(path: str | Path, data: bytes | str, *, mode: int | None = None, encoding: str = "utf-8") -> str:
    """``data`` in a temporary file in ``path``'s directory (fsynced; ``mode``, else the mode ``path``
    has or would get), its name returned; removed again if writing fails. Nothing is in place yet."""
    path = Path(path)
    payload = data.encode(encoding) if isinstance(data, str) else data
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.isfile(path) else default_mode()
        except OSError:
            mode = default_mode()
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
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return temporary


def atomic_write(path: str | Path, data: bytes | str, *, mode: int | None = None, encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``data`` whole (:func:`write_beside`, then a rename); returns ``path``."""
    path = Path(path)
    temporary = write_beside(path, data, mode=mode, encoding=encoding)
    try:
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path
