"""Store URLs: which one to use, which schemes are accepted, and how to print one safely."""

from __future__ import annotations

import os

from .errors import StoreError

DEFAULT_STORE_URL = "sqlite:///archsearch.db"
ENV_VAR = "ARCHSEARCH_STORE"
SUPPORTED = ("sqlite", "postgresql")


def resolve_store_url(url: str | None = None) -> str:
    """``--store URL``, else ``$ARCHSEARCH_STORE``, else ``sqlite:///archsearch.db`` (working directory)."""
    return url or os.environ.get(ENV_VAR) or DEFAULT_STORE_URL


def mask_url(url: str) -> str:
    """The URL with its password replaced by ``***``: safe for logs, errors and reports."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        # Not parseable: drop everything between '://' and '@' rather than risk printing a secret.
        scheme, sep, rest = url.partition("://")
        return f"{scheme}{sep}***@{rest.rpartition('@')[2]}" if "@" in rest else url


def normalise_url(url: str):
    """A SQLAlchemy URL with our driver choices (psycopg 3 for PostgreSQL), or a StoreError."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(
            f"not a store URL: {mask_url(url)!r}; use sqlite:///PATH or postgresql://USER@HOST/DB"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED:
        raise StoreError(
            f"unsupported store URL scheme {parsed.drivername!r} in {mask_url(url)}; "
            "use sqlite:///PATH or postgresql://USER@HOST:PORT/DB"
        )
    if backend == "postgresql" and parsed.get_driver_name() != "psycopg":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed
