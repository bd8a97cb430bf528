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

from urllib.parse import parse_qsl, urlsplit

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


def has_userinfo_password(url: str) -> bool:
    userinfo, _ = _authority(url)
    return ":" in userinfo


def secret_query_keys(url: str) -> list[str]:
    """The query parameters of ``url`` that may carry a secret: every one not known to be harmless."""
    try:
        query = urlsplit(url).query
    except ValueError:
        query = url.partition("?")[2]
    return [key for key, _ in parse_qsl(query, keep_blank_values=True) if key.lower() not in HARMLESS_QUERY_KEYS]


def secret_parts(url: str) -> list[str]:
    """Where ``url`` may carry a secret, in words: ``password in the user info``, ``query parameter X``."""
    parts = ["a password in the user info"] if has_userinfo_password(url) else []
    return parts + [f"query parameter {key!r}" for key in secret_query_keys(url)]
