"""Writing output files whole or not at all: a temporary file beside the target, then a rename.

A report, a figure or an export that fails half-way (a full disk, a kill, Ctrl-C) must leave the
previous good file intact, never a truncated one: ``os.replace`` within one directory is atomic.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def _default_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give (0666 less the umask): mkstemp's is 0600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: str | Path, data: bytes | str, encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename."""
    path = Path(path)
    payload = data.encode(encoding) if isinstance(data, str) else data
    # The temporary name must fit where the target's does (255 bytes a name): a long target name
    # is cut, not lengthened (a legal 250-character name once failed "File name too long").
    prefix = "." + path.name.encode()[:200].decode(errors="ignore") + "."
    fd, temporary = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, _default_mode())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path
