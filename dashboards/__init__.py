"""Reading studies: Pareto fronts, hypervolume, statistics, figures, the HTML report, and the study
API (``load_study``, :mod:`dashboards.study`).

The Python API's one home is ``harness`` (``from harness import load_study, run_search, run_trial``):
``load_study`` is defined here and re-exported there. This package sits below ``harness`` and may
not import it, so asking it for one of the API's other names (``from dashboards import run_search``)
is an ``ImportError`` that names the import to write.

Importing the package stays light (the front maths must load without pandas): the API module, which
loads pandas, is bound lazily and loads on the first ``load_study`` call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dashboards.reader import StudyCounts, StudyReader
from trials.lazy import lazy_import

if TYPE_CHECKING:  # annotations only
    from dashboards.study import Study

study_api = lazy_import("dashboards.study")  # pandas: only when a study is loaded

__all__ = ["StudyCounts", "StudyReader", "load_study"]

# The Python API's names that live elsewhere: asked for here, the error says where (``harness``).
ELSEWHERE = (
    "run_search",
    "Study",
    "StudyNotFound",
    "run_trial",
    "load_trial_config",
    "TrialConfig",
    "build_model",
    "PRESETS",
    "Store",
    "load_spec",
)


def __getattr__(name: str) -> object:
    """``from dashboards import run_search``: an ImportError naming the one home of the Python API."""
    if name in ELSEWHERE:
        raise ImportError(
            f"{name} is not imported from dashboards: the Python API's home is harness (from harness import {name})",
            name=name,
        )
    raise AttributeError(f"module 'dashboards' has no attribute {name!r}")


def load_study(name: str, store: str | StudyReader | None = None) -> Study:
    """The study ``name``, read-only (see :func:`dashboards.study.load_study`): ``store`` is a URL,
    None for what the CLI uses (``$ARCHSEARCH_STORE``, else ``sqlite:///archsearch.db``), or an open store."""
    return study_api.load_study(name, store)
