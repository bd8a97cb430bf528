"""Orchestration: the command line, the SQL store, Ray Tune dispatch and the reproductions (see ARCHITECTURE.md).

The one home of archsearch's Python API: every name a user reaches for imports from here, whichever
layer defines it::

    from harness import run_search, load_study, Study, run_trial, build_model, Store

Why here: ``harness`` is the top layer, so it may name every other one (``dashboards`` may not name
``harness``: its ``__init__`` points here for the names it does not define). Importing this package
loads nothing heavy: each name is bound lazily (:func:`trials.lazy.lazy_import`) and its module is
imported on first use, so ``from harness import load_study`` never starts Ray and ``import harness``
on a GPU node with torch alone works.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trials.lazy import lazy_import

if TYPE_CHECKING:
    from dashboards.study import Study

__version__ = "0.1.0"

_api = lazy_import("harness.search.api")  # Ray, Optuna, SQLAlchemy: only when a search runs
_study = lazy_import("dashboards.study")  # pandas: only when a study is read
_runner = lazy_import("trials.runner")  # torch: only when a trial runs
_trial_config = lazy_import("trials.config.trial_config")
_models = lazy_import("trials.models")  # torch
_store = lazy_import("harness.store")  # SQLAlchemy
_validation = lazy_import("search_space.validation")  # pydantic

# Public name -> the (lazily bound) module that defines it.
PUBLIC = {
    "load_study": _study,
    "Study": _study,
    "StudyNotFound": _study,
    "run_trial": _runner,
    "load_trial_config": _trial_config,
    "TrialConfig": _trial_config,
    "build_model": _models,
    "PRESETS": _models,
    "Store": _store,
    "load_spec": _validation,
}

__all__ = ["run_search", *PUBLIC]


def run_search(spec: Any = None, **options: Any) -> Study:
    """Run a search and return its study: see :func:`harness.search.api.run_search`."""
    return _api.run_search(spec, **options)


def __getattr__(name: str) -> Any:
    """A public name of :data:`PUBLIC`, imported from its module on first use (then kept here)."""
    module = PUBLIC.get(name)
    if module is None:  # anything else: a submodule (``harness.cli``) is imported by the import system
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC})
