"""Reading studies: Pareto fronts, hypervolume, statistics, figures, the HTML report, and the public
Python API (``from dashboards import load_study``; see :mod:`dashboards.study`).

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


def load_study(name: str, store: str | StudyReader | None = None) -> Study:
    """The study ``name``, read-only (see :func:`dashboards.study.load_study`): ``store`` is a URL,
    None for what the CLI uses (``$ARCHSEARCH_STORE``, else ``sqlite:///archsearch.db``), or an open store."""
    return study_api.load_study(name, store)
