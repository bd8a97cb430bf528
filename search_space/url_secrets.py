"""Where a secret may hide in a URL, one rule for every URL archsearch takes (store, warm start, trackers).

A password is not only ``user:password@host``: libpq and psycopg also read ``?password=``,
``?sslpassword=``, ``?passfile=``; a tracking server may take ``?token=`` or ``?api_key=``; and a
parameter we have not heard of may carry one too. So every part of a URL is treated alike: the
user-info password and **every query parameter outside a short list of known-harmless connection
settings** count as secrets. Callers route a password to its driver through the environment
(``PGPASSWORD``, MLflow's variables), mask every secret part when printing, and refuse any other.
Standard library only: the spec layer checks URLs before anything runs.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

# Query parameters that configure a connection and carry nothing secret (libpq's names).
HARMLESS_QUERY_KEYS = frozenset(
    {"sslmode", "connect_timeout", "application_name", "target_session_attrs", "sslrootcert", "sslcert",
     "sslkey", "gssencmode", "channel_binding", "keepalives", "keepalives_idle", "client_encoding"}
)  # fmt: skip


def _authority(url: str) -> tuple[str, str]:
    """(user info, host part) of ``url``, the host after the *last* ``@`` (as libpq and browsers read it)."""
    rest = url.partition("://")[2]
    authority = rest.split("/", 1)[0].split("?", 1)[0]
    userinfo, at, _ = authority.rpartition("@")
    return (userinfo, authority.rpartition("@")[2]) if at else ("", authority)


# SQLAlchemy's reading of the user info: a user without ':' or '/', then ':' and a password up to the
# first '@' (which may hold '/', '?' and '#').
_SQLALCHEMY_USERINFO = re.compile(r"[^:/]*:[^@]*@")


def has_userinfo_password(url: str) -> bool:
    """Whether any reader of ``url`` finds a password in its user info: a browser's or libpq's
    (``user:pw@`` before the host) or SQLAlchemy's, which takes everything from the first ':' to
    the next '@' for the password, '/', '?' and '#' included (``u:p/x@h`` is user ``u``, password ``p/x``)."""
    userinfo, _ = _authority(url)
    return ":" in userinfo or bool(_SQLALCHEMY_USERINFO.match(url.partition("://")[2]))


def _query_readings(url: str) -> list[str]:
    """Every text some reader of ``url`` takes for its query. The standard library stops at '#' (a
    fragment); SQLAlchemy does not (``?application_name=a#&password=pw`` is a password to it, and so
    to libpq) and starts after the user info, which may itself hold a '?'. A key in any reading counts."""
    rest = url.partition("://")[2] if "://" in url else url
    starts = {rest.find("?")}
    for at in (rest.find("@"), rest.rfind("@")):
        if at >= 0:
            starts.add(rest.find("?", at))
    readings = [rest[start + 1 :] for start in sorted(starts) if start >= 0]
    with contextlib.suppress(ValueError):
        readings.append(urlsplit(url).query)
    return readings


def secret_query_keys(url: str) -> list[str]:
    """The query parameters of ``url`` that may carry a secret: every one not known to be harmless,
    in any reading of its query (:func:`_query_readings`), each named once."""
    keys: dict[str, None] = {}
    for query in _query_readings(url):
        for key, _ in parse_qsl(query, keep_blank_values=True):
            if key.lower() not in HARMLESS_QUERY_KEYS:
                keys[key] = None
    return list(keys)


def secret_parts(url: str) -> list[str]:
    """Where ``url`` may carry a secret, in words: ``password in the user info``, ``query parameter X``."""
    parts = ["a password in the user info"] if has_userinfo_password(url) else []
    return parts + [f"query parameter {key!r}" for key in secret_query_keys(url)]


def sqlite_url_of_path(path: str | os.PathLike) -> str:
    """The URL of exactly the SQLite file at ``path``, taken literally (``q%41.db`` and ``runs?1.db``
    are those names): the path is absolute and percent-escaped, which SQLAlchemy decodes back. One
    rule for every place a path stands for a store (the command line's ``--store``, the Python API)."""
    return "sqlite:///" + quote(str(Path(path).expanduser().absolute()))
