"""The Optuna sampler a spec names, and Optuna's GridSampler made to work under Ray Tune.

:func:`make_sampler` turns ``search.sampler`` (tpe, gp, nsga2, random, grid) into an Optuna sampler.

Optuna's GridSampler, under Ray Tune's ask-and-tell loop:

Optuna ends a grid search from ``GridSampler.after_trial`` with ``study.stop()``, which only works
inside ``study.optimize``. Ray Tune drives the study with ask/tell, so there that call raises
``RuntimeError: Study.stop is supposed to be invoked inside an objective function`` when the last
grid point is told, and Ray prints it as an error with a traceback. Here the end of the grid is
the searcher's business instead: it asks :meth:`TuneGridSampler.all_started` before each
suggestion and tells Tune it is finished once every grid point has been dispatched, so a grid
search of more trials than points runs each point once rather than re-running visited ones.

The sampler classes are at module level so that the searcher (pickled by ``Tuner.restore``) can
be pickled with them. Before this module moved here (from ``search_space.grid_sampler``), grid
experiments pickled it under that name: :data:`harness.search.legacy.LEGACY_MODULES` maps it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from harness.search import adapter
from search_space.sampling import constraints_from_trial, grid_points, grid_space
from search_space.spec import SearchSpec


def make_sampler(spec: SearchSpec) -> optuna.samplers.BaseSampler:
    """The Optuna sampler the spec asks for, told about constraints where it supports them.

    Optuna >= 5 reads constraints set on the trial (``Trial.set_constraint``, done by
    :class:`search_space.sampling.SpaceFunction`); older versions need ``constraints_func``.
    """
    s = spec.search
    legacy = {} if hasattr(optuna.trial.Trial, "set_constraint") else {"constraints_func": constraints_from_trial}
    if s.sampler == "tpe":
        # constant_liar: a running trial counts as a poor result, so concurrent workers are not all
        # handed the same promising region (Optuna's advice for parallel TPE).
        return optuna.samplers.TPESampler(seed=s.seed, multivariate=True, constant_liar=s.concurrency > 1, **legacy)
    if s.sampler == "gp":
        # Optuna's GP sampler needs no constant liar: with trials running it maximises the q-batch expected
        # hypervolume improvement (qLogEHVI; qLogEI for one objective) over them, which is what the liar
        # approximates for TPE. The space function suggests every parameter on every trial, so a parameter
        # sampled independently is one with a single value, not a conditional one: no warning for it.
        return optuna.samplers.GPSampler(seed=s.seed, warn_independent_sampling=False, **legacy)
    if s.sampler == "nsga2":
        population = max(4, min(50, s.n_trials // 2))
        return optuna.samplers.NSGAIISampler(seed=s.seed, population_size=population, **legacy)
    if s.sampler == "random":
        return optuna.samplers.RandomSampler(seed=s.seed)
    points = grid_points(spec) if s.grid is not None else None
    return TuneGridSampler(grid_space(spec), seed=s.seed, points=points)


class TuneGridSampler(optuna.samplers.GridSampler):
    """GridSampler whose end of grid is decided by the searcher, not by ``study.stop()``."""

    def __init__(
        self,
        search_space: Mapping[str, Sequence[Any]],
        seed: int | None = None,
        points: Sequence[Mapping[str, Any]] | None = None,
    ):
        """``points``: visit only these points of the product (``search.grid``'s union of
        sub-grids), each once, in the sampler's shuffled order."""
        super().__init__(dict(search_space), seed=seed)
        if points is not None:
            adapter.restrict_grid(self, [dict(point) for point in points])
        self.size = adapter.grid_size(self)

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
