"""Orchestration: the command line, the SQL store, Ray Tune dispatch and the reproductions (see ARCHITECTURE.md).

The one entry point for Python users is :func:`run_search` (``from harness import run_search``);
reading a study back is ``dashboards.load_study``. Importing this package loads nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trials.lazy import lazy_import

if TYPE_CHECKING:
    from dashboards.study import Study

__version__ = "0.1.0"
__all__ = ["run_search"]

_api = lazy_import("harness.search.api")  # Ray, Optuna, SQLAlchemy: only when a search runs


def run_search(spec: Any = None, **options: Any) -> Study:
    """Run a search and return its study: see :func:`harness.search.api.run_search`."""
    return _api.run_search(spec, **options)
