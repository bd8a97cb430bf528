"""The SQL store (SQLAlchemy 2.x): SQLite by default, PostgreSQL on a cluster."""

from .engine import schema_revisions
from .errors import LeaseLost, NoStore, StoreError
from .store import Store, open_study_reader
from .urls import DEFAULT_STORE_URL, ENV_VAR, mask_url, resolve_store_url, sqlite_files

__all__ = [
    "DEFAULT_STORE_URL",
    "ENV_VAR",
    "LeaseLost",
    "NoStore",
    "Store",
    "StoreError",
    "mask_url",
    "open_study_reader",
    "resolve_store_url",
    "schema_revisions",
    "sqlite_files",
]
