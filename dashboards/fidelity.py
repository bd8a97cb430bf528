"""Does a cheap signal predict the expensive one? Within a study (an early epoch against the end) and
across two studies of one space (a short, small or subsampled search against a longer one).

Every search is a bet on a proxy: few epochs, small images, a data subset; early stopping makes the
same bet inside one study, epoch by epoch. This module measures it on what a study stored:

* **Within a study** (:func:`study_fidelity`): for each epoch with at least :data:`MIN_TRIALS`
  completed trials, Kendall's tau-b and Spearman's rho between that epoch's value of the study's
  accuracy objective and its final value, each with a percentile-bootstrap 95% interval (trials
  resampled with replacement, :data:`RESAMPLES` times, seeded); and how many members of the final
  front the study's own early-stopping rule would have kept had it decided at that epoch, replayed
  on the completed curves (:func:`replay`), plus the rule replayed at its own rungs.
* **Across studies** (:func:`cross_fidelity`): the configurations both studies completed (matched on
  their searched parameters' values), tau of their final accuracy, how many of the expensive front's
  members the cheap front holds (on the shared configurations and on the whole expensive study), and
  the expensive hypervolume recovered by training the cheap front alone, against the expensive
  front's nadir pushed out by 10% of its range (:func:`nadir_reference`, the rule of
  ``benchmarks.front_quality``'s primary reference).

The early-stopping rule itself lives in ``harness.search.stop`` (a layer above): it comes in as a
:class:`RungRule`, built from the study's spec by a function the caller passes or, where none is
passed, the one registered under the entry point group :data:`RULE_GROUP` (``pyproject.toml``), as
:mod:`dashboards.study` finds the store. Ray Tune's single-metric ASHA is replayed by
:class:`PercentileDecider` here (its cutoff rule, without Ray).

The accuracy objective: the first objective of the study that is not a cost known before training
(:data:`COST_METRICS`). The replay goes through the completed trials one after another in trial-number
order, each trial's epochs in turn (one worker, no pruned trial competing): a stated approximation of
the asynchronous search that ran.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import distributions
from typing import Any, Protocol

import numpy as np
import pandas as pd
from scipy import stats

from dashboards.compare import differing_spec_keys
from dashboards.filters import FilterError, Where
from dashboards.multiobjective import hypervolume
from dashboards.pareto import ParetoError, front_mask, query_front
from dashboards.reader import StudyReader
from trials.errors import DataError
from trials.status import TrialStatus

MIN_TRIALS = 5  # completed trials an epoch (or a pair of studies) needs before its ranking is judged
RESAMPLES = 2000  # bootstrap resamples of the trials
SEED = 0  # the bootstrap's seed: the same study gives the same intervals
CONFIDENCE = 0.95
TAU_RELIABLE = 0.6  # an epoch ranks like the end where tau's lower 95% bound reaches this
HV_RECOVERED = 0.95  # a cheap study predicts an expensive one where its front recovers this share of the HV
MAX_TRIALS = 2000  # completed trials analysed at most; beyond, a seeded uniform sample of them
REPORT_TRIALS = 400  # the report's panel: at most this many (a 100,000-trial report stays quick)
EXACT_BOOTSTRAP_TRIALS = 400  # up to here Kendall's bootstrap is one matrix product; beyond, scipy per resample
NADIR_MARGIN = 0.10
COST_METRICS = ("flops", "params", "throughput", "latency_ms")  # known before training: never the accuracy
RULE_GROUP = "archsearch.rung_rules"  # entry point group: spec -> RungRule (harness registers one)
RULE_NAME = "asha"


class FidelityError(DataError, ValueError):
    """A fidelity question the studies cannot answer (nothing shared, other objectives, ...): one line."""


# -- rank correlations with bootstrap intervals ---------------------------------------------------


@dataclass(frozen=True)
class Correlation:
    """A rank correlation with its percentile-bootstrap interval (NaN where undefined: a constant sample)."""

    value: float
    low: float
    high: float

    def text(self, name: str = "tau") -> str:
        if not math.isfinite(self.value):
            return f"{name} n/a"
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"{name} {self.value:.2f}"
        return f"{name} {self.value:.2f} [{self.low:.2f}, {self.high:.2f}]"


def _kendall(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2:
        return math.nan
    return float(stats.kendalltau(x, y).statistic)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(stats.spearmanr(x, y).statistic)


def bootstrap_indices(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """The resamples (``resamples`` x ``n`` trial indices, drawn with replacement) every interval uses."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _kendall_resampled(x: np.ndarray, y: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each resample, as ``scipy.stats.kendalltau`` gives it on ``x[idx], y[idx]``.

    Up to :data:`EXACT_BOOTSTRAP_TRIALS` trials in closed form: with ``c`` the times each trial was drawn,
    concordant minus discordant pairs are ``c'Mc / 2`` (``M`` the product of the pairs' signs) and the
    pairs tied in x are ``(c'Tc - n) / 2`` (``T`` the pairs with equal x, a trial with itself included)."""
    n = len(x)
    if n > EXACT_BOOTSTRAP_TRIALS:
        return np.array([_kendall(x[idx], y[idx]) for idx in indices])
    sx, sy = np.sign(x[:, None] - x[None, :]), np.sign(y[:, None] - y[None, :])
    concordance, ties_x, ties_y = sx * sy, (sx == 0).astype(float), (sy == 0).astype(float)
    pairs = n * (n - 1) / 2
    out = np.empty(len(indices))
    for start in range(0, len(indices), 256):
        block = indices[start : start + 256]
        counts = np.zeros((len(block), n))
        np.add.at(counts, (np.repeat(np.arange(len(block)), n), block.ravel()), 1.0)
        s = 0.5 * np.einsum("bi,bi->b", counts @ concordance, counts)
        n1 = 0.5 * (_quadratic(counts, ties_x) - n)
        n2 = 0.5 * (_quadratic(counts, ties_y) - n)
        denominator = (pairs - n1) * (pairs - n2)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start : start + len(block)] = np.where(denominator > 0, s / np.sqrt(np.abs(denominator)), np.nan)
    return np.clip(out, -1.0, 1.0)


def _quadratic(counts: np.ndarray, ties: np.ndarray) -> np.ndarray:
    """``c'Tc`` per row of ``counts``; where nothing ties but a trial with itself (``T`` the identity), ``sum c^2``."""
    if np.count_nonzero(ties) == len(ties):
        return (counts**2).sum(axis=1)
    return np.einsum("bi,bi->b", counts @ ties, counts)


def _spearman_resampled(x: np.ndarray, y: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Spearman's rho of each resample: average ranks per row, then Pearson's r of the ranks."""
    rx, ry = stats.rankdata(x[indices], axis=1), stats.rankdata(y[indices], axis=1)
    rx, ry = rx - rx.mean(axis=1, keepdims=True), ry - ry.mean(axis=1, keepdims=True)
    denominator = np.sqrt((rx**2).sum(axis=1) * (ry**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (rx * ry).sum(axis=1) / denominator, np.nan)


def _interval(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if len(finite) < len(values) / 2:  # most resamples undefined (nearly constant data): no interval
        return math.nan, math.nan
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high)


def rank_correlations(
    x: Sequence[float], y: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[Correlation, Correlation]:
    """(Kendall's tau-b, Spearman's rho) of paired ``x`` and ``y``, each with a percentile-bootstrap 95%
    interval over :func:`bootstrap_indices` (the same resamples for both)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    tau, rho = _kendall(x, y), _spearman(x, y)
    if len(x) < 2 or resamples <= 0:
        return Correlation(tau, math.nan, math.nan), Correlation(rho, math.nan, math.nan)
    indices = bootstrap_indices(len(x), resamples, seed)
    return (
        Correlation(tau, *_interval(_kendall_resampled(x, y, indices))),
        Correlation(rho, *_interval(_spearman_resampled(x, y, indices))),
    )


# -- the early-stopping rule, replayed ------------------------------------------------------------


class Decider(Protocol):
    """One rung rule's state: ``observe`` is told a trial's values after each epoch, True: it goes on."""

    def observe(
        self, trial_id: str, epoch: int, values: Mapping[str, Any], group: Hashable | None = None
    ) -> bool: ...


class PercentileDecider:
    """Ray Tune's ASHA (one bracket, ``stop_last_trials``) on one metric, without Ray: at the first epoch at
    or past a milestone, a trial is stopped when its value trails the ``1 - 1/rf`` percentile of the values
    recorded at that milestone before it (``np.nanpercentile``, as Ray's ``_Bracket.cutoff``)."""

    def __init__(self, metric: str, direction: str, milestones: Iterable[int], reduction_factor: float):
        self.metric, self.sign = metric, (1.0 if direction == "max" else -1.0)
        self.reduction_factor = float(reduction_factor)
        self.recorded: dict[int, dict[str, float]] = {int(m): {} for m in sorted(set(milestones), reverse=True)}
        self.groups: dict[str, Hashable] = {}

    def observe(self, trial_id: str, epoch: int, values: Mapping[str, Any], group: Hashable | None = None) -> bool:
        """True: the trial goes on. ``group``: its architecture; its twins' values are not in its cutoff."""
        value = values.get(self.metric)
        reward = self.sign * float(value) if _number(value) is not None else math.nan
        if group is not None:
            self.groups[trial_id] = group
        for milestone, recorded in self.recorded.items():  # highest first, as Ray's rungs
            if epoch < milestone or trial_id in recorded:
                continue
            goes_on = True
            others = [v for i, v in recorded.items() if group is None or self.groups.get(i) != group]
            if others:
                cutoff = np.nanpercentile(others, (1 - 1 / self.reduction_factor) * 100)
                goes_on = not (reward < cutoff)  # NaN compares False: Ray lets it on
            recorded[trial_id] = reward
            return goes_on
        return True

    def would_stop(
        self, trial_id: str, values: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Hashable]
    ) -> bool:
        """Whether ASHA's cutoff would stop ``trial_id`` judged against the other trials of ``values`` (trial -> its
        values at a milestone), its twins (the same ``groups`` entry) left out; nothing is recorded."""
        group = groups.get(trial_id)

        def reward(of: str) -> float:
            value = _number(values[of].get(self.metric))
            return self.sign * value if value is not None else math.nan

        others = [reward(i) for i in values if i != trial_id and (group is None or groups.get(i) != group)]
        return bool(others) and reward(trial_id) < np.nanpercentile(others, (1 - 1 / self.reduction_factor) * 100)


@dataclass(frozen=True)
class RungRule:
    """A study's early-stopping rule, fit to replay: ``decider(rungs)`` makes a fresh one judging at
    ``rungs`` (the study's own :attr:`rungs`, or one epoch: "had it decided there")."""

    mode: str  # "pareto" (MO-ASHA) or "single" (ASHA on the metric alone)
    metric: str
    objectives: dict[str, str]  # what a rung ranks on, the metric first
    rungs: tuple[int, ...]
    reduction_factor: float
    decider: Callable[[Sequence[int]], Decider] = field(repr=False, compare=False)
    default: bool = False  # the study ran without early stopping: the rule it would get with it on
    # The rule as the study's scheduler runs it at its own rungs: the decider behind its rank gate (a rung
    # prunes only where the measured rank transfer holds; twins never rank each other), and a trial's
    # group (its architecture) from its stored parameters. None: the rule runs ungated.
    gated: Callable[[Sequence[int]], Decider] | None = field(default=None, repr=False, compare=False)
    group_of: Callable[[Mapping[str, Any]], Hashable] | None = field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        name = "MO-ASHA (mode pareto)" if self.mode == "pareto" else "ASHA (mode single)"
        ranks = ", ".join(self.objectives) if self.mode == "pareto" else self.metric
        rungs = ", ".join(map(str, self.rungs)) or "none below the last epoch"
        origin = "the default rule with early stopping on (the study ran without)" if self.default else "the study's"
        gate = (f"; a rung prunes only once its measured rank transfer holds (tau's lower 95% bound >= {TAU_RELIABLE} "
                f"over >= {MIN_TRIALS} completed trials) and it would stop no member of their front, twins (the same "
                "architecture) never rank each other" if self.gated is not None else "")  # fmt: skip
        return f"{name} on {ranks}, reduction factor {self.reduction_factor:g}, rungs at epochs {rungs}{gate}: {origin}"


RuleSource = Callable[[Mapping[str, Any]], RungRule]  # a stored spec -> the rule it ran (or would run)


def registered_rule_source(name: str = RULE_NAME) -> RuleSource:
    """The spec -> :class:`RungRule` function registered under :data:`RULE_GROUP` (harness's)."""
    found = [ep for dist in distributions() for ep in dist.entry_points if ep.group == RULE_GROUP and ep.name == name]
    if not found:
        raise DataError(
            f"no early-stopping rule {name!r} is registered under the entry points {RULE_GROUP!r}: install "
            "archsearch (pip install -e .), or pass rule=harness.search.stop.replay.rung_rule"
        )
    return found[0].load()


def replay(
    rule: RungRule,
    rungs: Sequence[int],
    curves: Mapping[int, Mapping[int, Mapping[str, Any]]],
    *,
    gated: bool = False,
    groups: Mapping[int, Hashable] | None = None,
    completed: Iterable[int] = (),
) -> dict[int, int]:
    """The trials ``rule`` would have stopped judging at ``rungs``: number -> the epoch it stops at.

    ``curves``: number -> epoch -> the values a rung ranks on. Trials go one after another in number
    order, each through its epochs in order, as one worker would run them. ``gated``: as the study's
    scheduler runs the rule (:attr:`RungRule.gated`), told each trial of ``completed`` that it ran to its
    end, ranking each trial against other ``groups`` only."""
    decider = rule.gated(list(rungs)) if gated and rule.gated is not None else rule.decider(list(rungs))
    finished = set(completed)
    stopped: dict[int, int] = {}
    for number in sorted(curves):
        group = (groups or {}).get(number)
        for epoch in sorted(curves[number]):
            if not decider.observe(str(number), int(epoch), curves[number][epoch], group):
                stopped[number] = int(epoch)
                break
        else:
            if number in finished and curves[number] and hasattr(decider, "complete"):
                decider.complete(str(number), curves[number][max(curves[number])])
    return stopped


# -- within a study -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpochFidelity:
    epoch: int
    trials: int  # completed trials with a value at this epoch
    tau: Correlation
    rho: Correlation
    front_kept: int | None  # front members the rule keeps deciding here alone (None at the last epoch)
    front_total: int

    def row(self) -> dict[str, Any]:
        kept = f"{self.front_kept}/{self.front_total}" if self.front_kept is not None else "(the end)"
        return {
            "epoch": self.epoch,
            "trials": self.trials,
            "tau": _two(self.tau.value),
            "tau_95": _bracket(self.tau),
            "rho": _two(self.rho.value),
            "rho_95": _bracket(self.rho),
            "front_kept": kept,
        }

    def record(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "trials": self.trials,
            **_correlation_record("tau", self.tau),
            **_correlation_record("rho", self.rho),
            "front_kept": self.front_kept,
            "front_total": self.front_total,
        }


def _two(value: float) -> str:
    return f"{value:.2f}" if math.isfinite(value) else "n/a"


def _bracket(correlation: Correlation) -> str:
    if not (math.isfinite(correlation.low) and math.isfinite(correlation.high)):
        return "n/a"
    return f"[{correlation.low:.2f}, {correlation.high:.2f}]"


def _correlation_record(name: str, correlation: Correlation) -> dict[str, float | None]:
    return {
        name: _finite(correlation.value),
        f"{name}_low": _finite(correlation.low),
        f"{name}_high": _finite(correlation.high),
    }


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class StudyFidelity:
    """:func:`study_fidelity`'s answer: a row per epoch, the rule replayed, one verdict line."""

    study: str
    metric: str
    completed: int  # completed trials analysed
    sampled_from: int | None  # completed trials in the study where a sample was analysed, else None
    front_total: int
    rule: RungRule | None
    rule_kept: int | None  # front members the rule keeps at its own rungs
    epochs: list[EpochFidelity]
    verdict: str
    resamples: int = RESAMPLES
    no_rule: str | None = None  # why no rule was replayed

    def rows(self) -> list[dict[str, Any]]:
        return [e.row() for e in self.epochs]

    def frame(self) -> pd.DataFrame:
        """One row per epoch: epoch, trials, tau (low, high), rho (low, high), front_kept, front_total."""
        return pd.DataFrame([e.record() for e in self.epochs])

    def notes(self) -> list[str]:
        """What the table rests on, one line each."""
        sample = f" (a seeded sample of {self.completed} of {self.sampled_from})" if self.sampled_from else ""
        lines = [
            f"{self.metric} at each epoch against its final value over {self.completed} completed trials{sample}; "
            f"epochs with at least {MIN_TRIALS} of them; 95% percentile bootstrap over trials "
            f"({self.resamples} resamples, seed {SEED})"
        ]
        if self.rule is not None:
            lines.append(f"front_kept: the final front's members kept by {self.rule.describe()}, deciding at that "
                         "epoch alone on its ranking (no rank gate), replayed on the stored curves in trial order, "
                         "the pruned trials with the epochs they reached")  # fmt: skip
            if self.rule_kept is not None:
                gated = " (rank gate and twin rule as its scheduler runs them)" if self.rule.gated is not None else ""
                lines.append(f"at its own rungs the rule keeps {self.rule_kept}/{self.front_total} front members"
                             f"{gated}")  # fmt: skip
        else:
            lines.append(f"no early-stopping rule replayed: {self.no_rule}")
        return lines

    def record(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "metric": self.metric,
            "completed": self.completed,
            "sampled_from": self.sampled_from,
            "front_total": self.front_total,
            "rule": self.rule.describe() if self.rule is not None else None,
            "rule_mode": self.rule.mode if self.rule is not None else None,
            "rule_default": self.rule.default if self.rule is not None else None,
            "rule_kept": self.rule_kept,
            "min_trials": MIN_TRIALS,
            "resamples": self.resamples,
            "seed": SEED,
            "epochs": [e.record() for e in self.epochs],
            "verdict": self.verdict,
        }


def accuracy_metric(objectives: Mapping[str, str]) -> str:
    """The study's accuracy objective: its first objective that is not a cost known before training."""
    for metric in objectives:
        if metric not in COST_METRICS:
            return metric
    raise FidelityError(
        f"the objectives ({', '.join(objectives)}) are all costs known before training: no accuracy to rank"
    )


@dataclass
class _Completed:
    """A study's completed trials as the analyses read them."""

    numbers: list[int]
    finals: pd.DataFrame  # index number: the objectives' final values, on_front
    curves: dict[int, dict[int, dict[str, Any]]]  # number -> epoch -> epoch record
    parameters: dict[int, Any]
    sampled_from: int | None
    # The pruned trials: they competed at the rungs they reached, so a replay of the rule must see them
    # there (without them a rung holds fewer trials and keeps fewer: the kept count came out too low).
    pruned: list[int] = field(default_factory=list)
    pruned_costs: pd.DataFrame | None = None  # index number: the objectives' values known before training
    pruned_curves: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)
    pruned_parameters: dict[int, Any] = field(default_factory=dict)


def _completed(
    reader: StudyReader,
    study: str,
    objectives: Mapping[str, str],
    where: Where,
    max_trials: int | None,
    seed: int,
) -> _Completed:
    try:
        query = query_front(reader, [study], objectives, where, with_configs=False)
    except (ParetoError, FilterError) as error:
        raise FidelityError(str(error)) from None
    trials = query.trials
    points = np.column_stack([pd.to_numeric(trials[m], errors="coerce") for m in objectives])
    done = trials[(trials["status"] == TrialStatus.COMPLETED).to_numpy() & np.all(np.isfinite(points), axis=1)]
    if done.empty:
        raise FidelityError(f"study {study!r} has no completed trial with every objective recorded")
    sampled_from = None
    if max_trials is not None and len(done) > max_trials:
        sampled_from = len(done)
        pick = np.sort(np.random.default_rng(seed).choice(len(done), size=max_trials, replace=False))
        done = done.iloc[pick]
        done = done.assign(on_front=front_mask(done, objectives))  # the sample's own front
    numbers = [int(n) for n in done["number"]]
    records = reader.trial_records(study, numbers, statuses=[TrialStatus.COMPLETED])
    numbers = [n for n in numbers if n in records]
    finals = done.set_index(done["number"].astype(int)).loc[numbers, [*objectives, "on_front"]]
    curves = {n: {int(e["epoch"]): e for e in records[n].get("epochs") or []} for n in numbers}
    parameters = {n: records[n].get("parameters") for n in numbers}
    pruned_rows = trials[(trials["status"] == TrialStatus.PRUNED).to_numpy()]
    pruned = [int(n) for n in pruned_rows["number"]]
    pruned_records = reader.trial_records(study, pruned, statuses=[TrialStatus.PRUNED]) if pruned else {}
    pruned = [n for n in pruned if n in pruned_records]
    pruned_costs = pruned_rows.set_index(pruned_rows["number"].astype(int)).loc[pruned, list(objectives)]
    pruned_curves = {n: {int(e["epoch"]): e for e in pruned_records[n].get("epochs") or []} for n in pruned}
    pruned_parameters = {n: pruned_records[n].get("parameters") for n in pruned}
    return _Completed(numbers, finals, curves, parameters, sampled_from, pruned, pruned_costs, pruned_curves,
                      pruned_parameters)  # fmt: skip


def study_fidelity(
    reader: StudyReader,
    study: str,
    rule: RuleSource | RungRule | None = None,
    *,
    where: Where = None,
    resamples: int = RESAMPLES,
    max_trials: int | None = MAX_TRIALS,
    seed: int = SEED,
) -> StudyFidelity:
    """Does an early epoch of ``study`` rank its completed trials as the end does (module docstring)?

    ``rule``: the study's early-stopping rule, or a function of its spec that builds it (None: the
    registered one, :func:`registered_rule_source`). ``where``: ``--where`` filters (``pareto``'s).
    ``max_trials``: beyond this many completed trials, a seeded sample of them (and its own front)."""
    objectives = dict(reader.objectives(study))
    metric = accuracy_metric(objectives)
    data = _completed(reader, study, objectives, where, max_trials, seed)
    if not any(metric in e for curve in data.curves.values() for e in curve.values()):
        raise FidelityError(f"study {study!r} recorded no {metric} per epoch: nothing to compare with the end")
    rule, no_rule = _rule_of(reader, study, rule)
    final = pd.to_numeric(data.finals[metric], errors="coerce")
    front = {n for n, on in data.finals["on_front"].items() if bool(on)}
    last = max((max(c) for c in data.curves.values() if c), default=0)
    rung_values = _rung_values(data, rule, objectives) if rule is not None else {}  # no rule: nothing replayed
    rows = []
    for epoch in sorted({e for c in data.curves.values() for e in c}):
        have = [n for n in data.numbers if _number(data.curves[n].get(epoch, {}).get(metric)) is not None]
        have = [n for n in have if math.isfinite(final[n])]
        if len(have) < MIN_TRIALS:
            continue
        x = np.array([_number(data.curves[n][epoch][metric]) for n in have])
        tau, rho = rank_correlations(x, final[have].to_numpy(dtype=float), resamples=resamples, seed=seed)
        kept = None
        if epoch < last and rule is not None:
            stopped = replay(rule, [epoch], rung_values)
            kept = len(front - set(stopped))
        rows.append(EpochFidelity(epoch, len(have), tau, rho, kept, len(front)))
    rule_kept = None
    if rule is not None and rule.rungs:  # the study's rule at its own rungs, as its scheduler runs it
        groups = ({n: rule.group_of((data.parameters.get(n) or {}).get("sampled") or {}) for n in data.numbers}
                  if rule.group_of is not None else None)  # fmt: skip
        if groups is not None:
            groups.update({n: rule.group_of((data.pruned_parameters.get(n) or {}).get("sampled") or {})
                           for n in data.pruned})  # fmt: skip
        stopped = replay(rule, rule.rungs, rung_values, gated=True, groups=groups, completed=data.numbers)
        rule_kept = len(front - set(stopped))
    verdict = study_verdict(rows, last, len(data.numbers))
    return StudyFidelity(study, metric, len(data.numbers), data.sampled_from, len(front), rule, rule_kept, rows,
                         verdict, resamples, no_rule)  # fmt: skip


def _rule_of(reader: StudyReader, study: str, rule: RuleSource | RungRule | None) -> tuple[RungRule | None, str | None]:
    """The rule to replay, or None and why not (a stored spec that no longer validates)."""
    if isinstance(rule, RungRule):
        return rule, None
    spec = reader.study(study).get("spec")
    try:
        source = rule if rule is not None else registered_rule_source()
        return source(json.loads(spec) if isinstance(spec, str) else (spec or {})), None
    except DataError as error:  # no rule registered, or a stored spec that no longer validates
        return None, str(error)


def _number(value: Any) -> float | None:
    """A finite number, numpy's included (a store frame's integer column is ``np.int64``, no ``int``), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value) if math.isfinite(value) else None


def _rung_values(
    data: _Completed, rule: RungRule, objectives: Mapping[str, str]
) -> dict[int, dict[int, dict[str, Any]]]:
    """number -> epoch -> what a rung ranks on: a value of that epoch where the curve records it (the
    metric), else the trial's final one (its cost, known before training). The pruned trials are in it
    with the epochs they reached: the rule judged every trial at a rung against all that reached it."""
    names = list(dict.fromkeys([*rule.objectives, *objectives]))
    out: dict[int, dict[int, dict[str, Any]]] = {}
    sources = [(data.numbers, data.finals, data.curves)]
    if data.pruned_costs is not None:
        sources.append((data.pruned, data.pruned_costs, data.pruned_curves))
    for trial_numbers, finals_of, curves in sources:
        for number in trial_numbers:
            finals = finals_of.loc[number]
            out[number] = {
                epoch: {name: (record[name] if _number(record.get(name)) is not None else
                               (_number(finals[name]) if name in finals.index else None)) for name in names}
                for epoch, record in curves[number].items()
            }  # fmt: skip
    return out


def study_verdict(rows: Sequence[EpochFidelity], last: int, completed: int) -> str:
    """The one line a user needs (docs/fronts-and-reports.md states the rule): the earliest epoch from which
    every judged epoch before the end has tau's lower 95% bound >= :data:`TAU_RELIABLE`, where deciding
    alone keeps every front member."""
    judged = [r for r in rows if r.epoch < last]
    if not judged:
        return (
            f"too few completed trials to judge ({completed}; an epoch before the last needs {MIN_TRIALS} "
            "with a value there)"
        )

    def ranks_well(row: EpochFidelity) -> bool:
        return math.isfinite(row.tau.low) and row.tau.low >= TAU_RELIABLE

    safe = None
    for i, row in enumerate(judged):
        if all(ranks_well(r) for r in judged[i:]) and row.front_kept in (None, row.front_total):
            safe = row
            break
    first = judged[0]
    if safe is first:
        return f"epoch {first.epoch} already ranks like the end ({first.tau.text()})" + _kept_text(first)
    if ranks_well(first) and first.front_kept not in (None, first.front_total):
        lost = first.front_total - first.front_kept
        problem = (
            f"epoch {first.epoch} ranks like the end ({first.tau.text()}) but stopping there would have lost "
            f"{lost}/{first.front_total} front members"
        )
    elif ranks_well(first):
        problem = f"epoch {first.epoch} ranks like the end ({first.tau.text()}) but a later epoch does not"
    else:
        problem = f"epoch-{first.epoch} ranking is unreliable ({first.tau.text()})"
    if safe is None:
        return f"{problem}: no epoch before the last ({last}) is safe: do not stop early"
    kept = f"; keeps {safe.front_kept}/{safe.front_total} front members" if safe.front_kept is not None else ""
    return f"{problem}: do not stop before epoch {safe.epoch} ({safe.tau.text()}{kept})"


def _kept_text(row: EpochFidelity) -> str:
    if row.front_kept is None:
        return ""
    return f"; stopping at epoch {row.epoch} would have kept {row.front_kept}/{row.front_total} front members"


# -- across two studies ---------------------------------------------------------------------------


def nadir_reference(front: np.ndarray, directions: Sequence[str], margin: float = NADIR_MARGIN) -> np.ndarray:
    """The front's nadir pushed out by ``margin`` of its range per objective (where the range is 0, of the
    value's magnitude, or of 1): ``benchmarks.front_quality``'s primary reference, the same rule."""
    reference = []
    for k, direction in enumerate(directions):
        low, high = float(front[:, k].min()), float(front[:, k].max())
        span = (high - low) or (abs(high) or 1.0)
        reference.append(low - margin * span if direction == "max" else high + margin * span)
    return np.asarray(reference, dtype=float)


@dataclass(frozen=True)
class FrontOverlap:
    """How many of the expensive front's members the cheap front holds, on one scope."""

    scope: str  # "shared configurations" or "whole expensive study"
    held: int
    total: int
    untrained: int  # expensive front members the cheap study never completed
    hv_recovered: float | None  # HV of the cheap front's members at their expensive values / the expensive front's
    cheap_front: int  # the cheap front's size on this scope
    cheap_front_trained: int  # of which the expensive study completed

    def record(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "expensive_front_held": self.held,
            "expensive_front": self.total,
            "expensive_front_untrained_by_cheap": self.untrained,
            "cheap_front": self.cheap_front,
            "cheap_front_trained_by_expensive": self.cheap_front_trained,
            "hv_recovered": self.hv_recovered,
        }


@dataclass(frozen=True)
class CrossFidelity:
    cheap: str
    expensive: str
    metric: str
    keys: list[str]  # the searched keys configurations were matched on
    shared: int
    tau: Correlation
    rho: Correlation
    overlaps: list[FrontOverlap]
    differences: list[tuple[str, dict[str, str]]]
    averaged: dict[str, int]  # study -> configurations it completed more than once (their mean taken)
    verdict: str
    resamples: int = RESAMPLES

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "scope": o.scope,
                "expensive_front_held": f"{o.held}/{o.total}",
                "untrained_by_cheap": o.untrained,
                "cheap_front_trained": f"{o.cheap_front_trained}/{o.cheap_front}",
                "hv_recovered": "n/a" if o.hv_recovered is None else f"{100 * o.hv_recovered:.1f}%",
            }
            for o in self.overlaps
        ]

    def differences_line(self) -> str:
        if not self.differences:
            return "the specs differ in no key but their names"
        shown = [(k, v) for k, v in self.differences if not k.startswith("search.")]
        others = len(self.differences) - len(shown)
        parts = [f"{key} {values[self.cheap]} vs {values[self.expensive]}" for key, values in shown[:12]]
        more = len(shown) - 12
        tail = (f"; and {more} more" if more > 0 else "") + (f" (and {others} search.* keys)" if others else "")
        return f"{self.cheap} vs {self.expensive} differ in: " + "; ".join(parts or ["search.* keys only"]) + tail

    def notes(self) -> list[str]:
        lines = [
            f"{self.shared} configurations completed in both (matched on {', '.join(self.keys)}); {self.metric}: "
            f"{self.tau.text()}, {self.rho.text('rho')} (95% percentile bootstrap, {self.resamples} resamples, "
            f"seed {SEED})",
            "hv_recovered: the hypervolume of the cheap front's members at their expensive values over the expensive "
            "front's, reference the expensive front's nadir pushed out by 10% of its range",
        ]
        for study, count in self.averaged.items():
            lines.append(f"{study}: {count} configurations completed more than once: their mean values used")
        return lines

    def record(self) -> dict[str, Any]:
        return {
            "cheap": self.cheap,
            "expensive": self.expensive,
            "metric": self.metric,
            "matched_on": self.keys,
            "shared": self.shared,
            **_correlation_record("tau", self.tau),
            **_correlation_record("rho", self.rho),
            "fronts": [o.record() for o in self.overlaps],
            "differences": {k: v for k, v in self.differences},
            "averaged": self.averaged,
            "resamples": self.resamples,
            "seed": SEED,
            "verdict": self.verdict,
        }


_NOT_RECORDED = "<not recorded>"


def _configurations(data: _Completed, study: str, keys: Sequence[str], objectives: Mapping[str, str]):
    """The study's completed configurations: key -> mean objective values; and how many were repeated."""
    rows = []
    for number in data.numbers:
        parameters = data.parameters.get(number)
        if not isinstance(parameters, Mapping):
            raise FidelityError(
                f"study {study!r}: trial {number} does not record its sampled parameters (an older archsearch's "
                "study?): configurations cannot be matched"
            )
        sampled, fixed = parameters.get("sampled") or {}, parameters.get("fixed") or {}
        values = [sampled.get(k, fixed.get(k, _NOT_RECORDED)) for k in keys]
        rows.append(
            {"key": json.dumps(values, sort_keys=True, default=str), **data.finals.loc[number, list(objectives)]}
        )
    frame = pd.DataFrame(rows)
    for metric in objectives:
        frame[metric] = pd.to_numeric(frame[metric], errors="coerce")
    repeated = int((frame["key"].value_counts() > 1).sum())
    return frame.groupby("key", sort=False)[list(objectives)].mean(), repeated


def _searched_keys(data: _Completed) -> set[str]:
    return {k for p in data.parameters.values() if isinstance(p, Mapping) for k in (p.get("sampled") or {})}


def _front(values: pd.DataFrame, objectives: Mapping[str, str]) -> set[str]:
    frame = values.assign(status=TrialStatus.COMPLETED)
    return set(values.index[front_mask(frame, objectives)])


def _overlap(scope, cheap: pd.DataFrame, expensive: pd.DataFrame, objectives: Mapping[str, str]) -> FrontOverlap:
    directions = list(objectives.values())
    cheap_front, expensive_front = _front(cheap, objectives), _front(expensive, objectives)
    trained = [k for k in cheap_front if k in expensive.index]
    recovered = None
    if 2 <= len(objectives) <= 3 and expensive_front:
        best = expensive.loc[sorted(expensive_front), list(objectives)].to_numpy(dtype=float)
        reference = nadir_reference(best, directions)
        whole = hypervolume(best, directions, reference)
        found = expensive.loc[sorted(trained), list(objectives)].to_numpy(dtype=float)
        recovered = hypervolume(found, directions, reference) / whole if whole > 0 and len(found) else 0.0
    return FrontOverlap(
        scope=scope,
        held=len(expensive_front & cheap_front),
        total=len(expensive_front),
        untrained=len([k for k in expensive_front if k not in cheap.index]),
        hv_recovered=recovered,
        cheap_front=len(cheap_front),
        cheap_front_trained=len(trained),
    )


def cross_fidelity(
    reader: StudyReader,
    cheap: str,
    expensive: str,
    *,
    where: Where = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> CrossFidelity:
    """Does the cheap study ``cheap`` predict ``expensive`` on the configurations both completed (module docstring)?"""
    if cheap == expensive:
        raise FidelityError(f"compare a study with another one: {cheap!r} was given twice")
    objectives = dict(reader.objectives(cheap))
    other = dict(reader.objectives(expensive))
    if objectives != other:
        shown = "; ".join(
            f"{s}: " + ",".join(f"{m}:{d}" for m, d in o.items()) for s, o in ((cheap, objectives), (expensive, other))
        )
        raise FidelityError(f"the studies have different objectives ({shown}): their fronts cannot be compared")
    metric = accuracy_metric(objectives)
    data = {s: _completed(reader, s, objectives, where, None, seed) for s in (cheap, expensive)}
    keys = sorted(_searched_keys(data[cheap]) | _searched_keys(data[expensive]))
    if not keys:
        raise FidelityError(f"neither {cheap!r} nor {expensive!r} records searched parameters: nothing to match on")
    values, averaged = {}, {}
    for study in (cheap, expensive):
        values[study], repeated = _configurations(data[study], study, keys, objectives)
        if repeated:
            averaged[study] = repeated
    shared = [k for k in values[cheap].index if k in values[expensive].index]
    if not shared:
        raise FidelityError(
            f"no configuration is shared: none of the {len(values[cheap])} completed configurations of {cheap!r} was "
            f"completed by {expensive!r} (matched on {', '.join(keys)})"
        )
    x = values[cheap].loc[shared, metric].to_numpy(dtype=float)
    y = values[expensive].loc[shared, metric].to_numpy(dtype=float)
    tau, rho = rank_correlations(x, y, resamples=resamples, seed=seed)
    overlaps = [
        _overlap("shared configurations", values[cheap].loc[shared], values[expensive].loc[shared], objectives),
        _overlap("whole studies", values[cheap], values[expensive], objectives),
    ]
    specs = {s: reader.study(s).get("spec") for s in (cheap, expensive)}
    differences = differing_spec_keys(specs)
    verdict = cross_verdict(cheap, expensive, len(shared), tau, overlaps)
    return CrossFidelity(cheap, expensive, metric, keys, len(shared), tau, rho, overlaps, differences, averaged,
                         verdict, resamples)  # fmt: skip


def cross_verdict(cheap: str, expensive: str, shared: int, tau: Correlation, overlaps: Sequence[FrontOverlap]) -> str:
    """One line: the cheap study predicts the expensive one where tau's lower 95% bound reaches
    :data:`TAU_RELIABLE` and training the cheap front (whole studies) recovers :data:`HV_RECOVERED` of the
    expensive hypervolume."""
    whole = overlaps[-1]
    held = f"its front holds {whole.held}/{whole.total} of the expensive front"
    hv = (
        f"training its front alone recovers {100 * whole.hv_recovered:.1f}% of the expensive hypervolume"
        if whole.hv_recovered is not None
        else "hypervolume n/a"
    )
    if shared < MIN_TRIALS:
        return f"too few shared configurations ({shared} < {MIN_TRIALS}) to judge {cheap} as a proxy: {held}; {hv}"
    ranking = f"{tau.text()} on {shared} shared configurations"
    good_rank = math.isfinite(tau.low) and tau.low >= TAU_RELIABLE
    good_front = whole.hv_recovered is not None and whole.hv_recovered >= HV_RECOVERED
    if good_rank and good_front:
        return f"{cheap} predicts {expensive}: {ranking}; {hv}; {held}"
    why = "ranks unreliably" if not good_rank else "misses the expensive front"
    return f"{cheap} is a poor proxy for {expensive} ({why}): {ranking}; {hv}; {held}"
