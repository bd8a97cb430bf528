"""Optuna's GridSampler, made to work under Ray Tune's ask-and-tell loop.

Optuna ends a grid search from ``GridSampler.after_trial`` with ``study.stop()``, which only works
inside ``study.optimize``. Ray Tune drives the study with ask/tell, so there that call raises
``RuntimeError: Study.stop is supposed to be invoked inside an objective function`` when the last
grid point is told, and Ray prints it as an error with a traceback. Here the end of the grid is
the searcher's business instead: it asks :meth:`TuneGridSampler.all_started` before each
suggestion and tells Tune it is finished once every grid point has been dispatched, so a grid
search of more trials than points runs each point once rather than re-running visited ones.

This module imports Optuna at import time; it is imported lazily (by ``make_sampler``) so that
models and measurement keep running with torch alone. The class is at module level so that the
searcher (pickled by ``Tuner.restore``) can be pickled with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import optuna


class TuneGridSampler(optuna.samplers.GridSampler):
    def __init__(self, search_space: Mapping[str, Sequence[Any]], seed: int | None = None):
        super().__init__(dict(search_space), seed=seed)
        self.size = math.prod(len(values) for values in search_space.values())

    def after_trial(self, study, trial, state, values) -> None:
        """No ``study.stop()``: the searcher stops suggesting (see :meth:`all_started`)."""

    def all_started(self, study: optuna.Study) -> bool:
        """Whether every grid point has a trial, running or finished, in ``study``."""
        started = {
            t.system_attrs["grid_id"]
            for t in study.get_trials(deepcopy=False)
            if "grid_id" in t.system_attrs and t.state != optuna.trial.TrialState.WAITING
        }
        return len(started) >= self.size
