"""One ownership check for every directory whose contents are loaded as code, however it was chosen.

Inductor loads compiled kernels from its cache directory as code; a trial loads compile artifacts
from ``training.compile_artifacts_dir``; Ray Tune unpickles a study's experiment directory on
``--resume``. Each must be this user's alone: not a symbolic link (which someone else could point
elsewhere), owned by this user, writable by no one else, and so must every directory above it
(:func:`unsafe_ancestor`: whoever may write there may swap it). The default compile cache in a shared
``/tmp`` was checked, but a cache directory chosen through the environment
(``$ARCHSEARCH_COMPILE_CACHE``, ``$TORCHINDUCTOR_CACHE_DIR``) was used unchecked (issue 57): every
such directory now goes through :func:`not_private`, the one rule. Standard library only, so the
driver checks before Ray starts.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

try:
    import grp
    import pwd
except ImportError:  # not a POSIX system: no user-private groups to recognise
    grp = pwd = None

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


def unsafe_ancestor(path: Path) -> str | None:
    """Why someone else could put another directory in ``path``'s place from above (None: no one can).

    A private directory inside a directory others may write into (or a link others own) is theirs to
    swap: ``/shared/me/cache`` with ``/shared`` mode 777 is as good as ``/shared/me/cache`` mode 777.
    Every directory above it, on the path as written (links included) and on the path they lead to,
    must be this user's or root's, and writable by no one else, but for the sticky bit (``/tmp``: no one
    may rename another's entries) and a user-private group (the user's own group, no other members).
    """
    me = os.getuid()
    for above in _above(path):
        try:
            info = above.lstat()
        except OSError:
            continue  # not there yet: created by this user, 0700
        if info.st_uid not in (0, me):
            kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "a directory"
            return f"{above}, {kind} above {path.name}, belongs to another user (uid {info.st_uid})"
        if stat.S_ISLNK(info.st_mode) or info.st_mode & stat.S_ISVTX:
            continue
        mode = stat.S_IMODE(info.st_mode)
        if info.st_mode & 0o002 or (info.st_mode & 0o020 and not _own_group(info.st_gid)):
            return f"{above}, a directory above {path.name}, is writable by other users (mode {mode:o})"
    return None


def _above(path: Path) -> list[Path]:
    """The directories and links above ``path``: as written (absolute) and as the links resolve."""
    written = path.expanduser().absolute()
    try:
        real = written.resolve()
    except (OSError, RuntimeError):  # a link loop: the written path alone
        real = written
    return list(dict.fromkeys([*written.parents, *real.parents]))


def _own_group(gid: int) -> bool:
    """Whether ``gid`` is this user's private group: their primary group with no other members listed."""
    if gid != os.getgid():
        return False
    if grp is None or pwd is None:
        return False
    try:
        members = set(grp.getgrgid(gid).gr_mem) - {pwd.getpwuid(os.getuid()).pw_name}
    except KeyError:
        return False
    return not members


def private_directory(path: Path) -> str | None:
    """Create ``path`` (0700, with its parents) where absent; why it may not hold code, or None."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = not_private(path) or unsafe_ancestor(path)
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
