"""One ownership check for every directory whose contents are loaded as code, however it was chosen.

Inductor loads compiled kernels from its cache directory as code; a trial loads compile artifacts
from ``training.compile_artifacts_dir``; Ray Tune unpickles a study's experiment directory on
``--resume``. Each must be this user's alone: not a symbolic link (which someone else could point
elsewhere), owned by this user, writable by no one else. The default compile cache in a shared
``/tmp`` was checked, but a cache directory chosen through the environment
(``$ARCHSEARCH_COMPILE_CACHE``, ``$TORCHINDUCTOR_CACHE_DIR``) was used unchecked (issue 57): every
such directory now goes through :func:`not_private`, the one rule. Standard library only, so the
driver checks before Ray starts.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

CACHE_ENV = "ARCHSEARCH_COMPILE_CACHE"  # where a user puts the node-local compile cache
TORCH_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # what Inductor reads, every time it needs the directory


def not_private(path: Path, info: os.stat_result | None = None) -> str | None:
    """Why ``path`` is not this user's alone (None: it is): a symbolic link, neither a directory nor
    a regular file, another user's, or writable by the group or others."""
    if info is None:
        info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        return f"{path} is not a regular file or directory"
    if info.st_uid != os.getuid():
        return f"{path} belongs to another user (uid {info.st_uid})"
    if info.st_mode & 0o022:
        return f"{path} is writable by other users (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def private_directory(path: Path) -> str | None:
    """Create ``path`` (0700, with its parents) where absent; why it may not hold code, or None."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = not_private(path)
    except OSError as error:
        return f"cannot use {path}: {error.strerror or error}"
    if problem is None and not path.is_dir():
        return f"{path} is not a directory"
    return problem


def chosen_compile_cache() -> tuple[str, Path] | None:
    """(the variable, the directory) of a compile cache chosen through the environment, or None."""
    for variable in (CACHE_ENV, TORCH_CACHE_ENV):
        chosen = os.environ.get(variable)
        if chosen:
            return variable, Path(chosen).expanduser().absolute()
    return None


def compile_cache_problem() -> str | None:
    """Why the compile cache directory the environment chose may not be used (None: none chosen, or ours)."""
    chosen = chosen_compile_cache()
    if chosen is None:
        return None
    variable, path = chosen
    problem = private_directory(path)
    if problem is None:
        return None
    return f"${variable}: {problem}; compiled kernels there are loaded as code: use a directory of yours (mode 700)"
