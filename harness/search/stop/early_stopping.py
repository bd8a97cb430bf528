"""Early stopping that keeps the front: MO-ASHA, and the single-metric ASHA it replaces by default.

Ray Tune's ``ASHAScheduler`` ranks trials on one metric. In a search for accuracy *and* cost that
prunes the cheap end of the front first: at every rung a small model trails a large one on
accuracy, so it is stopped although nothing dominates it (the quickstart with ``early_stopping``
once ended ``completed 1, pruned 7``). MO-ASHA (Schmucker et al., "Multi-objective
Asynchronous Successive Halving", 2021) keeps asynchronous successive halving and changes only
the ranking: at each rung the trials recorded there are ordered by non-dominated sorting of the
rung metric together with the objectives already known (here FLOPs, parameters, throughput and
latency are measured before the first epoch: a trial's cost is exact from the start), ties
within a front broken by an epsilon-net (greedy farthest point in normalised objective space,
so a front's extremes and spread go first). A trial goes on past a rung iff it is in the first
``ceil(n / reduction_factor)`` of the ``n`` trials recorded at that rung so far, as ASHA's
percentile rule does with one metric.

A configuration the rule pruned is run again to its whole budget once the space has nothing new
to propose (:mod:`harness.search.propose.searcher`); such a retry (its config carries
:data:`harness.search.result_keys.RETRY_KEY`) is never judged at a rung. (Issue 46 also tried a first
rung no earlier than a quarter of the epochs, and cost twins ranked apart at a rung; on the replays
neither helped once pruned configurations are retried, so neither was kept.)

:class:`RungDecider` is that rule alone (no Ray): the Ray Tune scheduler :class:`ParetoASHA`
wraps it, and ``benchmarks.search_quality`` replays it against a table in simulated time.
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from dashboards.fidelity import PercentileDecider
from harness.search.result_keys import RETRY_KEY, split_tune_config
from harness.search.stop.rank_gate import GateAnnouncer, RankGatedDecider, architecture_key
from search_space.spec import TRAINING_FIELDS, SearchSpec
from trials.lazy import lazy_import

moocore = lazy_import("moocore")

TIME_ATTR = "training_iteration"  # a trial's epochs so far: the rungs are counted in epochs


def promotion_order(points: np.ndarray) -> np.ndarray:
    """Indices of ``points`` (n x m, every column minimised) best first: non-dominated rank, then an
    epsilon-net within each rank (the point best on the first column, then repeatedly the one
    farthest from those already taken, in objective space scaled to [0, 1] per column)."""
    points = np.asarray(points, dtype=float)
    if len(points) == 0:
        return np.zeros(0, dtype=int)
    ranks = np.asarray(moocore.pareto_rank(points))
    finite = np.isfinite(points)
    low = np.array([col[ok].min() if ok.any() else 0.0 for col, ok in zip(points.T, finite.T, strict=True)])
    high = np.array([col[ok].max() if ok.any() else 0.0 for col, ok in zip(points.T, finite.T, strict=True)])
    span = np.where(high > low, high - low, 1.0)
    scaled = np.where(finite, (np.where(finite, points, 0.0) - low) / span, 2.0)  # a missing value: beyond the worst
    order: list[int] = []
    for rank in np.unique(ranks):
        order.extend(_epsilon_net(np.flatnonzero(ranks == rank), scaled))
    return np.asarray(order, dtype=int)


def _epsilon_net(members: np.ndarray, scaled: np.ndarray) -> list[int]:
    first = members[np.lexsort(scaled[members].T[::-1])[0]]  # best on the first objective, then the next
    taken = [int(first)]
    rest = [int(m) for m in members if m != first]
    if not rest:
        return taken
    distance = np.linalg.norm(scaled[rest] - scaled[first], axis=1)
    while rest:
        pick = int(np.argmax(distance))
        taken.append(rest.pop(pick))
        distance = np.delete(distance, pick)
        if rest:
            distance = np.minimum(distance, np.linalg.norm(scaled[rest] - scaled[taken[-1]], axis=1))
    return taken


class RungDecider:
    """Asynchronous successive halving on several objectives (see the module docstring).

    ``objectives``: name -> "max" | "min", the rung metric first. ``observe`` is called with a
    trial's values after each of its epochs and says whether it goes on.
    """

    def __init__(self, objectives: Mapping[str, str], rungs: list[int], reduction_factor: float):
        self.objectives = dict(objectives)
        self.rungs = list(rungs)
        self.reduction_factor = float(reduction_factor)
        self.recorded: dict[int, dict[str, list[float]]] = {rung: {} for rung in self.rungs}
        self.groups: dict[str, Hashable] = {}

    def observe(self, trial_id: str, epoch: int, values: Mapping[str, Any], group: Hashable | None = None) -> bool:
        """True: the trial goes on; False: stop it here (it trails the first 1/rf at this rung). ``group``: the
        trial's architecture; the trials of its own group (its twins) are not among those it is ranked against."""
        if epoch not in self.recorded:
            return True
        at_rung = self.recorded[epoch]
        at_rung[trial_id] = [self._minimised(name, values.get(name)) for name in self.objectives]
        if group is not None:
            self.groups[trial_id] = group
        ids = [i for i in at_rung if i == trial_id or group is None or self.groups.get(i) != group]
        keep = math.ceil(len(ids) / self.reduction_factor)
        position = list(promotion_order(np.array([at_rung[i] for i in ids]))).index(ids.index(trial_id))
        return position < keep

    def would_stop(
        self, trial_id: str, values: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Hashable]
    ) -> bool:
        """Whether this rule would stop ``trial_id`` judged against ``values`` (trial -> its values at a rung, the
        trial's own included), its twins (the same ``groups`` entry) left out, as :meth:`observe` judges the last
        trial to arrive; nothing is recorded. The rank gate asks it of the completed trials' front members."""
        group = groups.get(trial_id)
        ids = [i for i in values if i == trial_id or group is None or groups.get(i) != group]
        vectors = np.array([[self._minimised(name, values[i].get(name)) for name in self.objectives] for i in ids])
        keep, me = math.ceil(len(ids) / self.reduction_factor), ids.index(trial_id)
        ranks = np.asarray(moocore.pareto_rank(vectors))
        ahead, level = int((ranks < ranks[me]).sum()), int((ranks == ranks[me]).sum())
        if ahead >= keep or ahead + level <= keep:  # decided by the non-dominated rank alone: no epsilon-net
            return ahead >= keep
        return list(promotion_order(vectors)).index(me) >= keep

    def _minimised(self, name: str, value: Any) -> float:
        """The value as a quantity to minimise; a missing or NaN value is the worst there is."""
        real = isinstance(value, numbers.Real) and not isinstance(value, bool)  # numpy's numbers too
        number = float(value) if real and value == value else math.inf
        return -number if self.objectives[name] == "max" and math.isfinite(number) else number


class RungScheduler(FIFOScheduler):
    """A Ray Tune scheduler that asks a rung rule (``decider.observe``) at each reported epoch: a
    pruned configuration run again (its config carries :data:`RETRY_KEY`) is never judged.

    With the rank gate (``search.early_stopping.rank_gate``, the default) the decider is a
    :class:`harness.search.stop.rank_gate.RankGatedDecider`: it is told every trial that ran to its last
    epoch (``on_trial_complete``) and each trial's architecture (``group``), and a retried trial's values
    still measure the rank transfer."""

    decider: Any
    last_epoch: int | None = None
    group_of: Any = None  # a trial's params -> its architecture; None: no twin rule

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        epoch = result.get(TIME_ATTR)
        if (trial.config or {}).get(RETRY_KEY) is not None:  # a pruned configuration run again: to the end
            if epoch is not None and hasattr(self.decider, "note"):
                self.decider.note(trial.trial_id, int(epoch), result, self._group(trial))
            return TrialScheduler.CONTINUE
        if epoch is None or self.decider.observe(trial.trial_id, int(epoch), result, self._group(trial)):
            return TrialScheduler.CONTINUE
        return TrialScheduler.STOP

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        super().on_trial_complete(tune_controller, trial, result)
        epoch = (result or {}).get(TIME_ATTR)
        ran_to_the_end = epoch is not None and self.last_epoch is not None and int(epoch) >= self.last_epoch
        if ran_to_the_end and hasattr(self.decider, "complete"):
            self.decider.complete(trial.trial_id, result)

    def _group(self, trial) -> Any:
        if self.group_of is None:
            return None
        _, _, params = split_tune_config(dict(trial.config or {}))
        return self.group_of(params)

    def debug_string(self) -> str:
        counts = ", ".join(f"{rung}: {len(v)}" for rung, v in sorted(self.decider.recorded.items()))
        return f"{type(self).__name__} trials recorded per rung epoch: {counts}"


class ParetoASHA(RungScheduler):
    """MO-ASHA: :class:`RungDecider` at the rungs (the module docstring)."""

    def __init__(self, objectives: Mapping[str, str], rungs: list[int], reduction_factor: float):
        super().__init__()
        self.decider = RungDecider(objectives, rungs, reduction_factor)


class SingleASHA(RungScheduler):
    """ASHA on one metric (``mode: single``): Ray Tune's ASHA cutoff (the ``1 - 1/rf`` percentile of the
    values recorded at a rung, :class:`dashboards.fidelity.PercentileDecider`) at the same rungs as
    MO-ASHA's, so that both modes, the replay and ``fidelity`` share one rung schedule."""

    def __init__(self, metric: str, direction: str, rungs: list[int], reduction_factor: float):
        super().__init__()
        self.decider = PercentileDecider(metric, direction, rungs, reduction_factor)


def rung_objectives(spec: SearchSpec) -> dict[str, str]:
    """What a rung ranks on: the early-stopping metric first, then the spec's other objectives, which
    every epoch's report carries already (the cost is measured before training)."""
    es = spec.search.early_stopping
    direction = spec.objectives.get(es.metric, "min" if es.metric.endswith("loss") else "max")
    return {es.metric: direction, **{k: v for k, v in spec.objectives.items() if k != es.metric}}


def early_stopping_mode(spec: SearchSpec) -> str | None:
    """``pareto`` (MO-ASHA) or ``single`` (ASHA's cutoff on one metric); None without early stopping.
    A spec that does not say gets ``pareto`` when it has several objectives."""
    es = spec.search.early_stopping
    if es is None:
        return None
    return es.mode or ("pareto" if len(spec.objectives) > 1 else "single")


def make_scheduler(spec: SearchSpec, study_name: str, session: Any = None) -> TrialScheduler | None:
    """The Ray Tune scheduler for ``search.early_stopping`` (None without it), its rule behind the rank gate
    unless ``rank_gate: false``; ``session``: the search's, through which the gate says when a rung starts or
    stops pruning (none: standard error). Its lines
    name ``study_name``, the study's name (which ``--name`` may have made other than the spec's), as every
    line of the search does."""
    es, mode = spec.search.early_stopping, early_stopping_mode(spec)
    if es is None:
        return None
    epochs = int(spec.training.get("epochs", 10))
    rungs = es.rungs(epochs)
    scheduler = _ungated_scheduler(spec, study_name, mode, rungs)
    if es.rank_gate:
        direction = rung_objectives(spec)[es.metric]
        tell = GateAnnouncer(study_name, session)
        scheduler.decider = RankGatedDecider(scheduler.decider, es.metric, direction, rungs, on_change=tell)
        scheduler.last_epoch = epochs
        scheduler.group_of = functools.partial(architecture_key, training_fields=TRAINING_FIELDS)
    return scheduler


def _ungated_scheduler(spec: SearchSpec, study_name: str, mode: str | None, rungs: list[int]) -> RungScheduler:
    es = spec.search.early_stopping
    if mode == "pareto":
        return ParetoASHA(rung_objectives(spec), rungs, es.reduction_factor)
    if len(spec.objectives) > 1:
        print(
            f"[{study_name}] warning: early_stopping mode single ranks trials on {es.metric} alone, which "
            "prunes the cheap end of the front; mode pareto (MO-ASHA, the default) keeps it",
            file=sys.stderr,
            flush=True,
        )
    return SingleASHA(es.metric, rung_objectives(spec)[es.metric], rungs, es.reduction_factor)
