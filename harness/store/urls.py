"""Store URLs: which one to use, which schemes are accepted, and how to print one safely."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from search_space.url_secrets import secret_query_keys, sqlite_url_of_path

from .errors import StoreError

DEFAULT_STORE_URL = "sqlite:///archsearch.db"
ENV_VAR = "ARCHSEARCH_STORE"
SUPPORTED = ("sqlite", "postgresql")


def resolve_store_url(url: str | None = None) -> str:
    """``--store URL``, else ``$ARCHSEARCH_STORE``, else ``sqlite:///archsearch.db`` (working directory).

    An empty or blank URL given on purpose (``--store ""``, an empty variable in a script) is an
    error, not the default: it would silently read or write another store than the one meant."""
    if url is not None and not url.strip():
        raise StoreError("--store is empty: give a store URL (sqlite:///PATH or postgresql://...), or leave it out")
    env = os.environ.get(ENV_VAR)
    if url is None and env is not None and not env.strip():
        raise StoreError(f"${ENV_VAR} is set but empty: give a store URL, or unset it for the default")
    return as_store_url(url or env or DEFAULT_STORE_URL)


def as_store_url(location: str) -> str:
    """One rule for where a store is: ``SCHEME://...`` is a URL (percent escapes decoded, a query
    checked by :func:`normalize_url`); anything else is a path to a SQLite file, taken literally
    (``runs?1.db`` and ``a%20b.db`` are those file names), as the URL of exactly that file."""
    if "://" in location:
        return location
    return sqlite_url_of_path(location)


def _parse(url: str):
    """``make_url``, reading ``user:pass@word@host`` as browsers and libpq's URI parser do: the host
    follows the *last* ``@`` of the authority, so a password with an unencoded ``@`` stays whole
    (SQLAlchemy would take ``word@host`` for the host, and a masked URL would still show ``word``)."""
    scheme, sep, rest = url.partition("://")
    authority, slash, tail = rest.partition("/")
    if sep and authority.count("@") > 1:
        userinfo, _, host = authority.rpartition("@")
        url = f"{scheme}{sep}{userinfo.replace('@', '%40')}@{host}{slash}{tail}"
    return make_url(url)


def mask_url(url: str) -> str:
    """The URL with every part that may hold a secret replaced by ``***``: safe for logs, errors and
    reports. Every part is treated alike (:mod:`search_space.url_secrets`): the user-info password and
    the value of every query parameter outside the known-harmless connection settings.
    """
    try:
        parsed = _parse(url)
        hidden = set(secret_query_keys(url))
        secret = {k: "ARCHSEARCHMASKED" for k in parsed.query if k in hidden}
        if secret:
            parsed = parsed.update_query_dict(secret)
        return parsed.render_as_string(hide_password=True).replace("ARCHSEARCHMASKED", "***")
    except (ArgumentError, ValueError, TypeError):
        # Not parseable: keep only the scheme and what follows the last '@', without any query.
        scheme, sep, rest = url.partition("://")
        tail = rest.rpartition("@")[2] if "@" in rest else rest
        masked = f"{scheme}{sep}{'***@' if '@' in rest else ''}{tail.split('?')[0]}"
        return masked + ("?***" if "?" in tail else "")


def split_secret(url: str) -> tuple[str, str | None]:
    """(the URL without any secret, the password or None).

    The URL handed to Ray, Optuna's storage and anything pickled onto the results dir carries no
    secret: the user-info password and **every query parameter** :func:`mask_url` **would mask**
    (:func:`search_space.url_secrets.secret_query_keys`, the one list) are taken out. The password
    (from the user info or ``?password=``) goes to libpq through ``PGPASSWORD`` instead (as ``psql``
    users do); a store URL that reaches here holds no other secret (:func:`normalize_url` refuses
    them), and whatever else would be masked is dropped, never written anywhere.
    """
    try:
        parsed = _parse(url)
    except (ArgumentError, ValueError):
        return url, None
    password = parsed.password
    if password is None:
        password = next((v for k, v in parsed.query.items() if k.lower() == "password"), None)
        if isinstance(password, tuple):
            password = password[0] if password else None
    hidden = set(secret_query_keys(url))
    if password is None and not hidden:
        return url, None
    public = parsed._replace(password=None).difference_update_query([k for k in parsed.query if k in hidden])
    return public.render_as_string(hide_password=False), None if password is None else str(password)


def normalize_url(url: str):
    """A SQLAlchemy URL with our driver choices (psycopg 3 for PostgreSQL), or a StoreError."""
    try:
        parsed = _parse(url)
    except (ArgumentError, ValueError) as error:  # ValueError: a port that is not a number
        detail = "; the port must be a number" if "int()" in str(error) else ""
        raise StoreError(
            f"not a store URL: {mask_url(url)!r}{detail}; use sqlite:///PATH or postgresql://USER@HOST:PORT/DB"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED:
        raise StoreError(
            f"unsupported store URL scheme {parsed.drivername!r} in {mask_url(url)}; "
            "use sqlite:///PATH or postgresql://USER@HOST:PORT/DB"
        )
    if backend == "sqlite":
        # SQLite takes no connection options here (the store sets its own timeout and journal) and
        # has no password: a stray ?option was ignored on a write and garbled a read-only open ("no
        # such access mode"), and ?sslpassword=... reached Ray's pickles with the URL. Every item is
        # refused, named. SQLAlchemy drops a query item without '=' (``sqlite:////dir/my?store.db``
        # opened /dir/my): the query is read from the text itself, so none is dropped silently.
        query = url.partition("://")[2].partition("?")[2] if "?" in url.partition("://")[2] else None
        items = [] if query is None else [item.partition("=")[0] for item in query.split("&")]
        unknown = sorted({unquote(k) for k in items})
        if unknown or (query is not None and not items):
            raise StoreError(
                f"a SQLite store URL takes no options, got ?{'&'.join(unknown)} in {mask_url(url)}: "
                "use sqlite:///PATH (a file name with '?' in it: give the path itself, --store PATH)"
            )
    if backend == "postgresql":
        # A password travels through PGPASSWORD (split_secret); any other parameter that may hold a
        # secret would reach Ray's pickles and Optuna's storage with the URL: refused, named.
        other = [key for key in secret_query_keys(url) if key.lower() != "password"]
        if other:
            raise StoreError(
                f"store URL parameter {other[0]!r} may carry a secret that would be written to disk with the URL "
                f"({mask_url(url)}); give a password in the URL (it goes to PGPASSWORD) or through ~/.pgpass"
            )
    if backend == "postgresql" and parsed.get_driver_name() != "psycopg":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def optuna_storage_url(store_url: str) -> str:
    """The store URL as Optuna's RDBStorage takes it (psycopg 3 for PostgreSQL; the password, if any, kept)."""
    url = _parse(store_url)
    if url.get_backend_name() == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def sqlite_files(url: str) -> list[Path]:
    """The files of a SQLite store URL: the database and its write-ahead log and shared-memory index
    (``-wal``, ``-shm``) and its rollback journal (``-journal``: a file there is replayed into
    the database as a hot journal when it is next opened), which no output of a command may
    overwrite. Empty for another backend or an
    in-memory SQLite."""
    try:
        parsed = _parse(url)
    except (ArgumentError, ValueError):
        return []
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return []
    database = Path(parsed.database)
    return [database, *(database.with_name(database.name + side) for side in ("-wal", "-shm", "-journal"))]
