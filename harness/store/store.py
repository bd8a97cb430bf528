"""The SQL store: one object, opened from a URL, holding studies, trials, costs and learning curves.

:class:`Store` is composed of parts, one job each: :mod:`.engine` opens the database (SQLite in WAL
mode with ``BEGIN IMMEDIATE`` writers, PostgreSQL with READ ONLY readers) and migrates its schema,
:mod:`.base` holds the study lookup and the retried write transaction, :mod:`.writes` records
studies, trials and epochs as idempotent upserts, :mod:`.liveness` keeps one live driver per study,
and :mod:`.queries` reads everything back as pandas DataFrames. This module only opens and closes.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

from trials.errors import capped

from .admin import StudyAdmin
from .engine import Migrations, _first_line, _make_engine, schema_revisions
from .errors import NoStore, StoreDriverError, StoreError
from .liveness import HEARTBEAT_S, HEARTBEAT_STALE_S, Liveness, driver_identity
from .queries import Queries
from .urls import mask_url, normalize_url, resolve_store_url, split_secret
from .writes import Writes

# Names other modules import from here, re-exported from the parts that hold them.
__all__ = ["HEARTBEAT_S", "HEARTBEAT_STALE_S", "Store", "driver_identity", "schema_revisions"]


class Store(Migrations, Writes, Queries, StudyAdmin, Liveness):
    """Studies, trials, measurements and learning curves in SQLite or PostgreSQL.

    Implements :class:`dashboards.reader.StudyReader` structurally (its reads are the queries part's);
    marking dead drivers is the liveness part's explicit ``mark_interrupted()``, never a read's.
    """

    @classmethod
    def open(cls, url: str | None = None, *, create: bool = True, read_only: bool = False) -> Store:
        """Open (and create or migrate) the store at ``url`` (see :func:`resolve_store_url`).

        ``create=False``: a store that does not exist yet is an error (no SQLite file is created).
        ``read_only=True`` (the commands that only read: studies, trials, pareto, report): the
        database is opened read-only (SQLite ``mode=ro``, PostgreSQL READ ONLY transactions), so it
        works on a read-only mount and leaves any file, a store or not, byte-for-byte unchanged; a
        store of an older schema is read as it is, not migrated.
        """
        raw = resolve_store_url(url)
        parsed = normalize_url(raw)
        masked = mask_url(raw)
        create = create and not read_only
        if parsed.get_backend_name() == "sqlite":
            memory = parsed.query.get("mode") == "memory"
            _check_sqlite_path(":memory:" if memory else parsed.database, masked, create)
        engine = _make_engine(parsed, read_only)
        try:
            with engine.connect():
                pass
        except (OperationalError, DBAPIError) as error:
            engine.dispose()
            detail = _first_line(error)
            secret = split_secret(raw)[1]
            if secret:  # a driver may echo what it was given: never the password
                detail = detail.replace(secret, "***")
            raise StoreError(f"cannot connect to the store at {masked}: {detail}") from None
        store = cls(engine, raw, read_only)
        try:
            store._check_schema() if read_only else store._migrate(create)
        except Exception:
            engine.dispose()
            raise
        return store

    @classmethod
    def open_existing(cls, url: str | None = None) -> Store | None:
        """The store at ``url`` when there is one (opened and migrated as :meth:`open`), else None
        once it is known that one could be created there (a SQLite file's directory exists and is
        writable; a server's database answers). A command that creates the store on success opens
        it so, checks what it must, and creates it only then: a refused command creates nothing."""
        try:
            return cls.open(url, create=False)
        except NoStore:
            check_creatable(resolve_store_url(url))
            return None

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_study_reader(url: str | None = None) -> Store:
    """The store at ``url`` opened read-only, as ``archsearch studies``/``pareto``/``report`` open it
    (``--store``, else ``$ARCHSEARCH_STORE``, else the default; an absent store is an error, an older
    schema is read unmigrated).

    ``dashboards.load_study`` finds this through the ``archsearch.study_readers`` entry point
    (``pyproject.toml``): ``dashboards`` sits below ``harness`` and may not import it, so the store
    registers itself as the implementation of :class:`dashboards.reader.StudyReader` instead.
    """
    return Store.open(url, create=False, read_only=True)


# Called outside the store's own error handling (opening is handled where the connection is made).
_NOT_WRAPPED = {"open", "close"}


def _wrapping_driver_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except StoreError:
            raise
        except SQLAlchemyError as error:
            cause = getattr(error, "orig", None) or error
            detail = _first_line(error)
            secret = self.engine.url.password
            if secret:  # a driver may echo what it was given: never the password
                detail = detail.replace(secret, "***")
            raise StoreDriverError(
                f"the store at {self.url} failed ({method.__name__}): {type(cause).__name__}: {detail}"
            ) from error

    return call


def _wrap_public_methods(cls: type) -> type:
    """Every public method of the store (its parts' too) raises :class:`StoreError` only: a driver's
    exception is wrapped where it happens, so no caller classifies SQLAlchemy's errors itself."""
    for name in dir(cls):
        value = inspect.getattr_static(cls, name)
        if name.startswith("_") or name in _NOT_WRAPPED or not inspect.isfunction(value):
            continue  # properties, class and static methods, attributes
        setattr(cls, name, _wrapping_driver_errors(value))
    return cls


_wrap_public_methods(Store)


def check_creatable(url: str) -> None:
    """Refuse (one line) a store URL where no store could be created: a SQLite file whose directory
    is missing or not writable. A server's URL was already checked by connecting to it."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite":
        return
    masked = capped(mask_url(url))
    directory = Path(parsed.database).parent
    try:
        is_dir = directory.is_dir()
    except OSError as error:  # a name too long (ENAMETOOLONG), a loop of links: the user's path
        raise StoreError(f"--store {masked}: cannot look at {capped(directory)} ({error.strerror or error})") from None
    if not is_dir:
        raise StoreError(f"cannot create the store at {masked}: {capped(directory)} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StoreError(f"cannot create the store at {masked}: {capped(directory)} is not writable by this user")


def _check_sqlite_path(path: str | None, masked: str, create: bool) -> None:
    """A SQLite store's path names a regular file (or nothing yet, when creating): a FIFO would block
    forever, a directory would fail as "disk I/O error"; each is refused naming the path. An
    in-memory database is refused: it ends with the command, and Optuna's storage and Ray's
    workers would each open another, empty one."""
    if not path or path == ":memory:" or "mode=memory" in path:
        raise StoreError(
            f"{masked} is an in-memory SQLite database: it keeps nothing past this process, and the search's "
            "other connections would each see an empty one; give a file (sqlite:///PATH)"
        )
    file = Path(path)
    try:
        is_dir, exists, is_file = file.is_dir(), file.exists(), file.is_file()
        rooted = not file.is_absolute() and Path("/", path).exists()
    except OSError as error:  # a name too long (ENAMETOOLONG), a loop of links: the user's path
        raise StoreError(f"--store {capped(masked)}: cannot look at the file ({error.strerror or error})") from None
    masked, path = capped(masked), capped(path)
    if is_dir:
        raise StoreError(f"no store at {masked}: {path} is a directory, not a SQLite file")
    if exists and not is_file:
        raise StoreError(f"no store at {masked}: {path} is not a regular file (a FIFO, a device?)")
    if not create and not exists:
        hint = ""
        if rooted:
            hint = f"; {path} is relative to this directory, and /{path} exists: an absolute path takes four slashes"
        raise NoStore(f"no store at {masked}: the file does not exist (nothing has been recorded there){hint}")
