"""The Optuna sampler a spec names, and Optuna's GridSampler made to work under Ray Tune.

:func:`make_sampler` turns ``search.sampler`` (tpe, gp, botorch, nsga2, random, grid) into an Optuna sampler.

Optuna's GridSampler, under Ray Tune's ask-and-tell loop:

Optuna ends a grid search from ``GridSampler.after_trial`` with ``study.stop()``, which only works
inside ``study.optimize``. Ray Tune drives the study with ask/tell, so there that call raises
``RuntimeError: Study.stop is supposed to be invoked inside an objective function`` when the last
grid point is told, and Ray prints it as an error with a traceback. Here the end of the grid is
the searcher's business instead: it asks :meth:`TuneGridSampler.all_started` before each
suggestion and tells Tune it is finished once every grid point has been dispatched, so a grid
search of more trials than points runs each point once rather than re-running visited ones.

Optuna's GPSampler fits completed trials only, and the searcher tells an infeasible proposal (one that breaks a
constraint or does not build, never trained) to Optuna as PRUNED: on the same data the GP proposes the same
infeasible configuration again, and the searcher ends the search after
:data:`harness.search.propose.searcher.MAX_INFEASIBLE_IN_A_ROW` of them (a replay of a table that lacks some
combinations of its values did, half its budget unspent). :class:`InfeasibleAwareGPSampler` fits those too, and
so does :class:`InfeasibleAwareBoTorchSampler`: optuna-integration's BoTorchSampler (the optional ``botorch``
extra, loaded only when a spec names ``sampler: botorch``) reads COMPLETE and RUNNING trials only, the same fault.
BoTorchSampler has a second one on a discrete space: its qNEHVI candidates function maximises over the one-hot
relaxation and the sampler rounds the maximiser, to trained configurations again and again (a replay: 202
duplicates in 204 proposals); :class:`UntriedChoices` scores the configurations not tried yet instead.

The sampler classes are at module level so that the searcher (pickled by ``Tuner.restore``) can
be pickled with them. Before this module moved here (from ``search_space.grid_sampler``), grid
experiments pickled it under that name: :data:`harness.search.legacy.LEGACY_MODULES` maps it.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import optuna

from harness.search import adapter
from search_space.sampling import constraints_from_trial, grid_points, grid_space
from search_space.spec import SearchSpec
from search_space.validation import check_sampler_installed
from trials.lazy import lazy_import
from trials.status import TrialStatus

# BoTorch, GPyTorch and optuna-integration (the ``botorch`` extra): only when a spec names ``sampler: botorch``
optuna_botorch = lazy_import("optuna_integration.botorch")
torch = lazy_import("torch")
botorch_fit = lazy_import("botorch.fit")
botorch_models = lazy_import("botorch.models")
botorch_outcome = lazy_import("botorch.models.transforms.outcome")
botorch_mo_logei = lazy_import("botorch.acquisition.multi_objective.logei")
botorch_mo_objective = lazy_import("botorch.acquisition.multi_objective.objective")
botorch_sampling = lazy_import("botorch.sampling")
botorch_optim = lazy_import("botorch.optim")
botorch_transforms = lazy_import("botorch.utils.transforms")
gpytorch_mlls = lazy_import("gpytorch.mlls")

STATUS_ATTR = "archsearch_status"  # Optuna user attribute: what archsearch calls a trial (set by the searcher)
MAX_DISCRETE_CHOICES = 20_000  # a discrete space up to this size: qLogNEHVI scores each untried configuration


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
        return InfeasibleAwareGPSampler(seed=s.seed, warn_independent_sampling=False, **legacy)
    if s.sampler == "botorch":
        return InfeasibleAwareBoTorchSampler(seed=s.seed, concurrency=s.concurrency, objectives=len(spec.objectives))
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


class InfeasibleAwareGPSampler(optuna.samplers.GPSampler):
    """Optuna's GPSampler, fitted on the configurations found infeasible before training as well (the module
    docstring: without them it proposes the same infeasible one again until the searcher gives up).

    Each infeasible configuration is one more completed trial to the GP, with the worst value of each
    objective among the completed trials and, where the completed trials carry constraint values, its own
    (a constraint it broke) or 1.0 (violated) for each: the model learns to look elsewhere. The start-up
    count is of trained trials alone. Nothing is written to the study: the GP sees these trials, no one else.
    """

    def __init__(self, *, n_startup_trials: int = 10, **options: Any) -> None:
        super().__init__(n_startup_trials=n_startup_trials, **options)
        self.startup_trials = n_startup_trials  # trained trials before the GP proposes

    def sample_relative(self, study, trial, search_space):
        """GPSampler's proposal over the completed trials and the infeasible ones (:func:`with_infeasible`)."""
        return super().sample_relative(with_infeasible(study, search_space, self.startup_trials), trial, search_space)


class InfeasibleAwareBoTorchSampler(optuna.samplers.BaseSampler):
    """optuna-integration's BoTorchSampler, fitted on the configurations found infeasible as well, as
    :class:`InfeasibleAwareGPSampler` (same rule, :func:`with_infeasible`): BoTorchSampler reads COMPLETE
    and RUNNING trials only, so it would propose an infeasible configuration again on the same data.

    Several objectives: qLogNEHVI (the cost objective, ``flops`` or ``params``, modelled beside top-1) with
    optuna-integration's ``qnehvi_candidates_func``'s model, scored on each configuration not tried yet where
    the space is discrete (:class:`UntriedChoices`); one objective: the sampler's default (log expected
    improvement). A wrapper, not a subclass, so that this module imports no BoTorch until a spec names
    ``sampler: botorch`` (the optional ``botorch`` extra, checked first in one line).
    """

    def __init__(self, *, seed: int | None, concurrency: int, objectives: int, n_startup_trials: int = 10) -> None:
        check_sampler_installed("botorch")
        self.startup_trials = n_startup_trials  # trained trials before the GP proposes (as the gp sampler's)
        self.candidates = UntriedChoices() if objectives > 1 else None
        with warnings.catch_warnings():  # "experimental" since optuna 2.4, and GPyTorch's torch.jit note on import
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=FutureWarning)
            self.botorch = optuna_botorch.BoTorchSampler(
                candidates_func=self.candidates,
                n_startup_trials=n_startup_trials,
                # Concurrent workers: the running trials' configurations enter the acquisition as pending points
                # (qLogNEHVI's X_pending, integrated over their unknown outcomes), so two workers are not handed
                # the same proposal: what TPE's constant liar approximates. One worker: nothing is ever running.
                consider_running_trials=concurrency > 1,
                seed=seed,
            )

    def infer_relative_search_space(self, study, trial):
        return self.botorch.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        """BoTorchSampler's proposal over the completed trials and the infeasible ones (:func:`with_infeasible`),
        among the configurations not tried yet where the space is discrete ({} when none is left)."""
        if not search_space:
            return {}
        if self.candidates is not None:
            choices = untried_choices(study, search_space)
            if choices is not None and len(choices) == 0:
                return {}  # every configuration tried: the searcher says so (a duplicate, or the space exhausted)
            self.candidates.choices = choices
        seen = with_infeasible(study, search_space, self.startup_trials)
        try:
            with warnings.catch_warnings():  # the candidates function says "experimental" on each call
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return self.botorch.sample_relative(seen, trial, search_space)
        finally:
            if self.candidates is not None:
                self.candidates.choices = None  # nothing of a proposal kept (the searcher is pickled)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.botorch.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self.botorch.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.botorch.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.botorch.reseed_rng()


class UntriedChoices:
    """BoTorchSampler's candidates function for several objectives: qLogNEHVI with the model of
    optuna-integration's ``qnehvi_candidates_func`` (a SingleTaskGP over objectives and constraints,
    standardised; the reference point just below the worst observed values; 256 Sobol samples; the baseline
    pruned), maximised over ``choices``, the configurations of a discrete space not tried yet, as the sampler
    encodes them (:func:`untried_choices`, set before each proposal); without them (a continuous space, or
    one too large to list), optuna-integration's own ``qnehvi_candidates_func``.

    Why: ``qnehvi_candidates_func`` maximises over the continuous relaxation (categoricals one-hot) and
    BoTorchSampler rounds the maximiser to a configuration; on a table replay (coatnet-mnist5k-n1000, seed 0)
    it rounded to configurations already trained: 7 trained, then 200 duplicates in a row, and the searcher
    ended the search. Scored on the untried configurations, the proposal is always a new one.
    """

    def __init__(self) -> None:
        self.choices: Any = None  # a torch tensor, rows as BoTorchSampler's train_x; None: the continuous way

    def __call__(self, train_x, train_obj, train_con, bounds, pending_x):
        if self.choices is None:
            return optuna_botorch.qnehvi_candidates_func(train_x, train_obj, train_con, bounds, pending_x)
        acquisition = log_nehvi(train_x, train_obj, train_con, bounds, pending_x)
        choices = botorch_transforms.normalize(self.choices.to(train_x), bounds=bounds)
        candidate, _ = botorch_optim.optimize_acqf_discrete(acquisition, q=1, choices=choices)
        return botorch_transforms.unnormalize(candidate.detach(), bounds=bounds)


def log_nehvi(train_x, train_obj, train_con, bounds, pending_x) -> Any:
    """qLogNEHVI over the normalised inputs, built as optuna-integration's ``qnehvi_candidates_func`` builds
    it (constraints violated where a constraint value is above 0)."""
    objectives = train_obj.size(-1)
    train_y = train_obj if train_con is None else torch.cat([train_obj, train_con], dim=-1)
    x = botorch_transforms.normalize(train_x, bounds=bounds)
    pending = None if pending_x is None else botorch_transforms.normalize(pending_x, bounds=bounds)
    model = botorch_models.SingleTaskGP(x, train_y, outcome_transform=botorch_outcome.Standardize(m=train_y.size(-1)))
    botorch_fit.fit_gpytorch_mll(gpytorch_mlls.ExactMarginalLogLikelihood(model.likelihood, model))
    constrained = {}
    if train_con is not None:
        constrained = {
            "objective": botorch_mo_objective.IdentityMCMultiOutputObjective(outcomes=list(range(objectives))),
            "constraints": [functools.partial(_column, k) for k in range(objectives, train_y.size(-1))],
        }
    return botorch_mo_logei.qLogNoisyExpectedHypervolumeImprovement(
        model=model,
        ref_point=(train_obj.min(dim=0).values - 1e-8).tolist(),
        X_baseline=x,
        alpha=10 ** (-8 + objectives) if objectives > 4 else 0.0,
        prune_baseline=True,
        sampler=botorch_sampling.SobolQMCNormalSampler(torch.Size((256,))),
        X_pending=pending,
        **constrained,
    )


def _column(index: int, samples: Any) -> Any:
    return samples[..., index]


def untried_choices(study: optuna.Study, search_space: Mapping[str, Any]) -> Any:
    """The configurations of ``search_space`` that no trial of ``study`` has (trained, running, a duplicate,
    infeasible or pruned), encoded as BoTorchSampler encodes them (a float64 tensor, maybe empty); None where
    a parameter is continuous or the space holds more than :data:`MAX_DISCRETE_CHOICES` configurations."""
    values = [_discrete_values(distribution) for distribution in search_space.values()]
    if any(v is None for v in values) or math.prod(len(v) for v in values) > MAX_DISCRETE_CHOICES:
        return None
    names = list(search_space)
    tried = {
        tuple(t.params[name] for name in names)
        for t in study.get_trials(deepcopy=False)
        if search_space.keys() <= t.params.keys()
    }
    untried = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values) if combo not in tried]
    if not untried:
        return torch.empty((0, 0), dtype=torch.float64)
    encoding = adapter.search_space_transform(dict(search_space))
    return torch.from_numpy(np.array([encoding.transform(params) for params in untried], dtype=np.float64))


def _discrete_values(distribution: Any) -> list | None:
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return list(distribution.choices)
    if isinstance(distribution, optuna.distributions.IntDistribution):
        return list(range(distribution.low, distribution.high + 1, distribution.step))
    if isinstance(distribution, optuna.distributions.FloatDistribution) and distribution.step is not None:
        steps = round((distribution.high - distribution.low) / distribution.step)
        return [distribution.low + k * distribution.step for k in range(steps + 1)]
    return None


def with_infeasible(study: optuna.Study, search_space: Mapping[str, Any], startup_trials: int) -> Any:
    """``study`` as a GP sampler should read it: with each configuration found infeasible before training
    added as a completed trial (:func:`infeasible_as_completed`) once ``startup_trials`` trials completed
    (the start-up count is of trained trials alone); ``study`` itself where there is none. Nothing is
    written to the study: the sampler sees these trials, no one else."""
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    trials = study.get_trials(deepcopy=False, states=states)
    completed = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    infeasible = [
        t
        for t in trials
        if t.state == optuna.trial.TrialState.PRUNED
        and t.user_attrs.get(STATUS_ATTR) == str(TrialStatus.INFEASIBLE)
        and search_space.keys() <= t.params.keys()
    ]
    if not infeasible or len(completed) < startup_trials:
        return study
    return adapter.study_with_trials(study, infeasible_as_completed(study, completed, infeasible))


def infeasible_as_completed(study: optuna.Study, completed: list, infeasible: list) -> list:
    """The infeasible trials as completed ones with the worst values and their constraints violated: the
    worst value of each objective among the completed trials and, where the completed trials carry
    constraint values, its own (a constraint it broke) or 1.0 (violated) for each."""
    values = [[t.values[k] for t in completed] for k in range(len(study.directions))]
    worst = [
        min(column) if direction == optuna.study.StudyDirection.MAXIMIZE else max(column)
        for direction, column in zip(study.directions, values, strict=True)
    ]
    keys = next((list(t.constraints) for t in completed if t.constraints), [])
    return [
        optuna.trial.create_trial(
            values=worst,
            params=t.params,
            distributions=t.distributions,
            constraints={key: t.constraints.get(key, 1.0) for key in keys} or None,
        )
        for t in infeasible
    ]
