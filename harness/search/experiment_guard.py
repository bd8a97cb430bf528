"""A shared results dir is hostile ground: the experiment dir is checked before Ray touches it.

On a cluster's shared ``ray_results`` anyone may plant files in a study's experiment dir before
it runs: a symbolic link named ``tuner.pkl`` or ``.validate_storage_marker`` makes Ray overwrite
the file it points to (outside the results dir, with its owner's mode), and on ``--resume`` Ray
unpickles whatever ``tuner.pkl`` holds. So, before anything is written (store, Ray, Optuna):

- a **new** study's experiment dir must not exist, or be an empty directory of ours (not a link);
- a **resumed** study's experiment dir, and everything under it, must be ours: no symbolic link
  anywhere (never followed, never loaded), every entry owned by this user, nothing writable by
  group or others (the search writes it with umask 077). Anything else is refused in one line
  naming the path: the experiment was tampered with.

Remote storage (``s3://``, ``gs://``...) is the storage provider's to protect: not checked here.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from pathlib import Path

from harness.search.cluster.ray_setup import SearchError, check_study_name, experiment_path, is_uri
from trials.errors import capped
from trials.ownership import not_private, unsafe_ancestor

MAX_EXPERIMENT_CANDIDATES = 100  # <name>, <name>.2, ... <name>.100: then the plain name's refusal stands


def _owned_and_private(path: Path, info: os.stat_result) -> str | None:
    """Why ``path`` is not ours alone (None: it is): the one rule of :mod:`trials.ownership`, the
    directories above it included."""
    return not_private(path, info) or unsafe_ancestor(path)


def check_new_experiment(experiment: str) -> None:
    """A new study's experiment dir: absent, or an empty directory of ours (see the module docstring)."""
    if is_uri(experiment):
        return
    path = Path(experiment)
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    problem = _owned_and_private(path, info)
    if problem is None and not stat.S_ISDIR(info.st_mode):
        problem = f"{path} is not a directory"
    if problem is not None:
        raise SearchError("--results-dir", f"refusing to start: {problem}")
    leftover = next(iter(path.iterdir()), None)
    if leftover is not None:
        raise SearchError(
            "--results-dir",
            f"{path} already holds an experiment ({leftover.name}, ...): resume it with --resume, choose another "
            "--name, or remove the directory",
        )


def choose_new_experiment(storage_path: str, name: str, taken: set[str]) -> str:
    """The results-dir entry a new study creates its experiment under: ``name`` where it is free,
    else the first free ``name.2``, ``name.3``, ... (the study records it; see
    :meth:`harness.store.Store.study_experiment`).

    Taken: an entry a study of this store owns (``taken``), or a directory that holds an experiment
    of ours alone, a deleted study's leftover or another store's study; both are left as they are,
    so a name is reusable after ``studies --delete`` without ``--purge-results``. An entry that is
    not ours alone (a link, another user's file) is refused as :func:`check_new_experiment` says:
    the results dir was tampered with, and the user should know. On remote storage only ``taken`` is
    looked at (its contents are the provider's).
    """
    for index in range(1, MAX_EXPERIMENT_CANDIDATES + 1):
        candidate = name if index == 1 else f"{name}.{index}"
        if len(candidate) > 128:
            break
        check_study_name(candidate, "--name")
        if candidate in taken:
            continue
        path = experiment_path(storage_path, candidate)
        if is_uri(path):
            return candidate
        try:
            check_new_experiment(path)
            return candidate
        except SearchError:
            try:
                check_experiment_for_resume(path)  # ours alone: someone's experiment, left alone
            except SearchError:
                check_new_experiment(path)  # not ours alone: refused, naming what is wrong
                raise
    raise SearchError(
        "--name", f"{name!r}: the results dir holds experiments under {name} and its next free names; "
        "choose another --name or remove them",
    )  # fmt: skip


def check_experiment_for_resume(experiment: str) -> None:
    """A resumed study's experiment dir and everything under it: ours alone, no symbolic link."""
    if is_uri(experiment):
        return
    root = Path(experiment)
    for directory, subdirectories, files in os.walk(root, followlinks=False):
        for name in [".", *subdirectories, *files]:
            path = Path(directory) if name == "." else Path(directory) / name
            problem = _owned_and_private(path, path.lstat())
            if problem is not None:
                raise SearchError(
                    "--resume", f"refusing to resume: the experiment under {root} was tampered with: {problem}"
                )


def remove_stale_experiment(experiment: str) -> None:
    """Remove what an earlier attempt of a study that ran no trial left, if all of it is ours alone
    (anything else stays, and :func:`check_new_experiment` refuses it)."""
    if is_uri(experiment) or not Path(experiment).exists():
        return
    try:
        check_experiment_for_resume(experiment)
    except SearchError:
        return
    shutil.rmtree(experiment)


def check_storage_root(storage_path: str) -> list[Path]:
    """The results dir is a directory this user can write (created if missing), or the search is
    refused naming it (``--results-dir /proc/x`` once failed deep inside pyarrow, the study left running).

    Returns the directories it created, outermost first: a search refused later removes them
    (:func:`remove_created`), so a refused search leaves no results dir behind."""
    if is_uri(storage_path):
        return []
    root = Path(storage_path)
    missing = [p for p in [root, *root.absolute().parents] if not os.path.lexists(p)][::-1]
    try:
        root.mkdir(parents=True, exist_ok=True)
        usable = root.is_dir() and os.access(root, os.W_OK | os.X_OK)
    except OSError as error:  # a name too long (ENAMETOOLONG), a read-only file system, ...
        remove_created(missing)
        raise SearchError("--results-dir", f"{capped(root)}: cannot create it ({error.strerror or error})") from None
    if not usable:
        remove_created(missing)
        raise SearchError("--results-dir", f"{capped(root)}: not a directory this user can write")
    return missing


def remove_created(directories: list[Path]) -> None:
    """Remove the directories :func:`check_storage_root` created, innermost first, each only while
    empty (anything written there since stays)."""
    for directory in reversed(directories):
        try:
            directory.rmdir()
        except OSError:
            return


def purge_experiment(experiment: str) -> bool:
    """Remove a deleted study's experiment dir (``studies --delete --purge-results``) when it and
    everything under it is ours alone with no symbolic link (checked first, nothing followed);
    returns whether there was one. Remote storage is refused: its lifecycle is the provider's."""
    if is_uri(experiment):
        raise SearchError("--purge-results", f"{experiment} is remote storage: remove it with its own tools")
    root = Path(experiment)
    if not os.path.lexists(root):
        return False
    check_purgeable(experiment)
    shutil.rmtree(root)
    return True


def check_purgeable(experiment: str) -> None:
    """Refuse (one line) an experiment dir that :func:`purge_experiment` would not remove: a link,
    another user's entry, an entry others may write (not what a search of ours leaves)."""
    if is_uri(experiment):
        raise SearchError("--purge-results", f"{experiment} is remote storage: remove it with its own tools")
    root = Path(experiment)
    if not os.path.lexists(root):
        return
    if not stat.S_ISDIR(root.lstat().st_mode):  # a link (even to a directory of ours) or a file
        raise SearchError(
            "--purge-results", f"refusing to remove {root}: not a directory (a link?); nothing was deleted"
        )
    for directory, subdirectories, files in os.walk(root, followlinks=False):
        for name in [".", *subdirectories, *files]:
            path = Path(directory) if name == "." else Path(directory) / name
            problem = _owned_and_private(path, path.lstat())
            if problem is not None:
                raise SearchError("--purge-results", f"refusing to remove {root}: {problem}; nothing was deleted")


OWNER_MARK = ".archsearch-owner"  # in a study's experiment dir: the random token its record holds


def directory_identity(path: str) -> str | None:
    """``"DEVICE:INODE:TOKEN"`` of the experiment directory at ``path`` (not followed if a link): its
    device and inode, and the random token :func:`create_experiment_dir` left in it (a directory removed
    and made again may get the same inode number; it does not get the token). None where there is no
    directory (or the path is remote storage)."""
    if is_uri(path):
        return None
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return None
    try:
        token = (Path(path) / OWNER_MARK).read_text().strip()[:64]
    except OSError:
        token = ""
    return f"{info.st_dev}:{info.st_ino}:{token}"


def create_experiment_dir(experiment: str) -> str | None:
    """Create a study's (checked, absent or empty, or on resume its own) experiment directory, ours
    alone, mark it with a random token, and return its identity for the study's record; None on
    remote storage, which Ray creates itself."""
    if is_uri(experiment):
        return None
    os.makedirs(experiment, mode=0o700, exist_ok=True)
    mark = Path(experiment) / OWNER_MARK
    if not mark.exists():
        descriptor = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(16))
    return directory_identity(experiment)


def check_identity(experiment: str, recorded: str | None, option: str = "--purge-results") -> None:
    """Refuse (one line, naming both) when the directory at ``experiment`` is not the one the study
    recorded when it created it: it was replaced, or the path now leads elsewhere. Nothing to check
    where nothing was recorded (an older study) or nothing is there."""
    found = directory_identity(experiment)
    if recorded is None or found is None or found == recorded:
        return
    raise SearchError(
        option,
        f"refusing to act on {experiment}: it is not the directory the study created there (recorded "
        f"identity {recorded}, found {found}: replaced since); nothing was deleted",
    )
