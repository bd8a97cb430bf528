"""How much of a table's true front a search found, and when: the measures every replay reports.

Shared by :mod:`benchmarks.search_quality` (our searcher under the engine's simulator) and
:mod:`benchmarks.search_quality_syne` (Syne Tune's methods in its own simulator), so that neither
imports the other. Per seed a :class:`Replay` records which configurations completed and the epochs
spent when each did; :class:`TrueFront` turns that into the hypervolume curve, normalised by the true
front's, under each of two reference points (:data:`REFERENCES`):

* ``nadir`` (the primary): the true front's nadir pushed out by ``dashboards.fidelity.NADIR_MARGIN`` (10%) of the
  front's range in each objective. Every front member then adds volume, and the measure depends on
  the front's shape only, not on how bad the table's worst configuration is.
* ``worst``: the table's worst value of each objective. With a far reference the cheapest front
  member alone can hold most of the volume (94% on the committed CoAtNet table), so "95% of the
  hypervolume" there mostly measures "found the cheapest model"; reported beside the primary.

:func:`summarise` gives, per reference, medians and quartiles over seeds of the epochs to 95% and
99%, the hypervolume at the budget and the area under the curve (:func:`auc`: the mean normalised
hypervolume over the budget's epochs, 1.0 = the whole true front from the first epoch);
:meth:`TrueFront.oracle` the cheapest set of true-front members that reaches each level.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.table import Table, TableError
from dashboards.fidelity import nadir_reference  # the one rule: the front's nadir + 10% of its range
from dashboards.multiobjective import hypervolume, non_dominated

REFERENCES = ("nadir", "worst")  # the primary first
PRIMARY = "nadir"
LEVELS = (0.95, 0.99)
ORACLE_EXACT_SUBSETS = 1 << 16  # subsets tried exactly before the oracle falls back to a greedy bound
SHORTFALL_BISECTIONS = 60  # halvings of the top-1 span: far below any top-1 a table records
BOOTSTRAP_RESAMPLES = 2000  # the medians' intervals (as the fidelity command's)


def binomial_sd(top1: np.ndarray, images: int) -> np.ndarray:
    """The sd in top-1 points of a fixed model's top-1 measured on ``images`` images: ``100 sqrt(p (1 - p) / n)``
    (a lower bound on the noise: another training seed adds to it)."""
    p = np.clip(np.asarray(top1, dtype=float) / 100.0, 0.0, 1.0)
    return 100.0 * np.sqrt(p * (1.0 - p) / images)


def level_key(level: float) -> str:
    return f"{round(level * 100)}"


@dataclass
class Replay:
    """One method's run on one seed: the configurations that ran every epoch, and when."""

    completed: list[int] = field(default_factory=list)  # configurations that ran every epoch, in order
    completed_at: list[int] = field(default_factory=list)  # epochs spent when each of them completed
    pruned: list[int] = field(default_factory=list)
    spent: int = 0
    simulated_s: float = 0.0
    # simulated seconds when each completed (a replay that keeps a clock; empty where it does not)
    completed_s: list[float] = field(default_factory=list)

    def complete(self, index: int, spent: int, seconds: float | None = None) -> None:
        self.completed.append(int(index))
        self.completed_at.append(int(spent))
        if seconds is not None:
            self.completed_s.append(float(seconds))


@dataclass(frozen=True)
class Curve:
    """The normalised hypervolume of one run under one reference: it steps up at ``epochs[k]`` to ``volume[k]``."""

    epochs: tuple[int, ...]
    volume: tuple[float, ...]
    seconds: tuple[float, ...] = ()  # simulated seconds at each step, where the replay kept a clock

    def epochs_to(self, level: float) -> int | None:
        for epochs, volume in zip(self.epochs, self.volume, strict=True):
            if volume >= level - 1e-12:
                return epochs
        return None

    def seconds_to(self, level: float) -> float | None:
        """Simulated seconds (W workers side by side) until the level is reached; None where not, or no clock."""
        for seconds, volume in zip(self.seconds, self.volume, strict=False):
            if volume >= level - 1e-12:
                return seconds
        return None

    def volume_at(self, epochs: int) -> float:
        at = [v for e, v in zip(self.epochs, self.volume, strict=True) if e <= epochs]
        return at[-1] if at else 0.0


def auc(curve: Curve, budget: int) -> float:
    """The area under the normalised-hypervolume-vs-epochs step curve over ``[0, budget]``, divided by
    ``budget``: the mean normalised hypervolume over the budget's epochs (1.0 only for the whole true
    front from epoch 0; a run that reaches volume v after e epochs and nothing else scores
    ``v * (budget - e) / budget``)."""
    if budget <= 0:
        raise ValueError("the budget must be positive")
    area = 0.0
    steps = [(e, v) for e, v in zip(curve.epochs, curve.volume, strict=True) if e < budget]
    for k, (epochs, volume) in enumerate(steps):
        end = steps[k + 1][0] if k + 1 < len(steps) else budget
        area += volume * (end - epochs)
    return area / budget


class TrueFront:
    """The table's true front, its two reference points and the normalisation of a found set's hypervolume."""

    def __init__(self, table: Table, objectives: dict[str, str]):
        self.objectives = objectives
        self.directions = list(objectives.values())
        self.epochs = table.epochs  # what training one member costs (every configuration runs them all)
        self.points = np.column_stack([table.metric(name) for name in objectives])
        finite = np.all(np.isfinite(self.points), axis=1)
        if not finite.any():
            raise TableError(f"{table.path}: no configuration has every objective")
        self.members = np.flatnonzero(finite)[non_dominated(self.points[finite], self.directions)]
        self.references = {
            "nadir": nadir_reference(self.points[self.members], self.directions),
            "worst": worst_reference(self.points[finite], self.directions),
        }
        self.volumes = {
            name: hypervolume(self.points[self.members], self.directions, reference)
            for name, reference in self.references.items()
        }
        cost = next(k for k, name in enumerate(objectives) if name != "top1")  # the first cost objective
        sign = 1 if self.directions[cost] == "min" else -1
        self.cheapest = int(self.members[np.argmin(sign * self.points[self.members, cost])])
        for name, volume in self.volumes.items():
            if not volume > 0:
                raise TableError(f"{table.path}: the true front has no hypervolume against the {name} reference")

    @property
    def reference(self) -> np.ndarray:  # the primary
        return self.references[PRIMARY]

    @property
    def volume(self) -> float:
        return self.volumes[PRIMARY]

    def normalised(self, found: Sequence[int], reference: str = PRIMARY) -> float:
        if not len(found):
            return 0.0
        points = self.points[list(found)]
        return hypervolume(points, self.directions, self.references[reference]) / self.volumes[reference]

    def curve(self, run: Replay, reference: str = PRIMARY) -> Curve:
        """The run's normalised hypervolume after each completion that raised it."""
        epochs: list[int] = []
        volume: list[float] = []
        seconds: list[float] = []
        clocked = len(run.completed_s) == len(run.completed_at)
        for k, spent in enumerate(run.completed_at):
            v = self.normalised(run.completed[: k + 1], reference)
            if not volume or v > volume[-1]:
                epochs.append(spent)
                volume.append(v)
                if clocked:
                    seconds.append(run.completed_s[k])
        return Curve(tuple(epochs), tuple(volume), tuple(seconds))

    def indispensable(self, level: float, reference: str = PRIMARY) -> list[dict[str, Any]]:
        """The true-front members without which all the table's other configurations together stay below ``level``:
        a search reaches the level only by training each of them, whatever else it trains. Each with its top-1 and
        the share of the volume the rest of the table holds without it, cheapest first. Where one of them leads a
        configuration the reference point leaves out (dearer than the front's nadir) by less than the measurement's
        sd, the level waits for the draw's winner of the two."""
        accuracy, costs, signs = self._axes()
        finite = np.flatnonzero(np.all(np.isfinite(self.points), axis=1))
        members = sorted((int(m) for m in self.members), key=lambda m: tuple(self.points[m, costs] * signs))
        needed = []
        for member in members:
            without = self.normalised([int(i) for i in finite if int(i) != member], reference)
            if without < level - 1e-12:
                needed.append({"member": member, "top1": float(self.points[member, accuracy]), "without": without})
        return needed

    def reached_by(self, run: Replay, level: float, reference: str = PRIMARY) -> int | None:
        """The configuration whose completion first brought the run's found set to ``level`` (None: never): what
        the level waited for. A bisection over the completions, the volume growing with each."""
        if self.normalised(run.completed, reference) < level - 1e-12:
            return None
        low, high = 1, len(run.completed)
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if self.normalised(run.completed[:middle], reference) >= level - 1e-12 else (
                middle + 1, high)  # fmt: skip
        return int(run.completed[low - 1])

    def _axes(self) -> tuple[int, list[int], np.ndarray]:
        """The top-1 column, the cost columns, and each cost's sign (+1: less is better), so that "at no more
        of every cost" is one comparison for :meth:`regret` and :meth:`within_noise` alike."""
        accuracy = next(k for k, name in enumerate(self.objectives) if name == "top1")
        costs = [k for k in range(len(self.directions)) if k != accuracy]
        return accuracy, costs, np.array([1.0 if self.directions[k] == "min" else -1.0 for k in costs])

    def regret(self, found: Sequence[int]) -> dict[str, float]:
        """Accuracy points the found set is below the true front, at the true front's costs: for each true-front
        member, its top-1 minus the best top-1 found at no more of every cost (the table's worst top-1 where
        nothing that cheap was found); the mean and the largest over the members. 0 once the front is found.
        Beside the hypervolume because a reference point can make a few members hold most of the volume."""
        accuracy, costs, signs = self._axes()
        table_worst = float(np.nanmin(self.points[:, accuracy]))
        found_points = self.points[list(found)] if len(found) else np.empty((0, self.points.shape[1]))
        gaps = []
        for member in self.members:
            point = self.points[member]
            cheap_enough = np.all(found_points[:, costs] * signs <= point[costs] * signs + 1e-12, axis=1)
            best = float(found_points[cheap_enough, accuracy].max()) if cheap_enough.any() else table_worst
            gaps.append(max(0.0, float(point[accuracy]) - best))
        return {"mean": float(np.mean(gaps)), "max": float(np.max(gaps))}

    def within_noise(self, images: int) -> dict[str, Any]:
        """How much of the front the table's own measurement decides: a top-1 measured on ``images`` validation
        images has a binomial sd of ``100 * sqrt(p (1 - p) / images)`` points for a fixed model (seed-to-seed
        variation adds to it, so this is a lower bound on the noise). A member is **contested** where it leads
        every other configuration at no more of every cost by less than its sd, a non-member where the front
        at no more of its costs is less than its sd above it: with another draw of the validation images either
        could swap places. A search cannot tell such configurations apart before training them, so on a table
        where most of the front is contested, reaching 99% of its hypervolume measures the order configurations
        were trained in as much as the search."""
        if images < 1:
            raise TableError(f"validation images must be >= 1, not {images}")
        accuracy, costs, signs = self._axes()
        finite = np.flatnonzero(np.all(np.isfinite(self.points), axis=1))
        top1 = self.points[:, accuracy]
        sd = binomial_sd(top1, images)
        members = {int(m) for m in self.members}

        def best_at_no_more_cost(index: int, among: Sequence[int]) -> float:
            point = self.points[index]
            rivals = [int(j) for j in among if int(j) != index and not np.array_equal(self.points[j], point)]
            cheap = [j for j in rivals if np.all(self.points[j, costs] * signs <= point[costs] * signs + 1e-12)]
            return float(top1[cheap].max()) if cheap else -math.inf

        contested_members = [m for m in sorted(members) if top1[m] - best_at_no_more_cost(m, finite) < sd[m]]
        contested_others = [int(i) for i in finite if int(i) not in members
                            and best_at_no_more_cost(int(i), sorted(members)) - top1[i] < sd[i]]  # fmt: skip
        member_sd = sd[sorted(members)]
        return {
            "images": images, "members": len(members), "contested_members": len(contested_members),
            "nonmembers": len(finite) - len(members), "contested_nonmembers": len(contested_others),
            "member_sd": [round(float(member_sd.min()), 2), round(float(member_sd.max()), 2)],
        }  # fmt: skip

    def shortfall(self, level: float, reference: str = PRIMARY) -> float:
        """The top-1 points by which every true-front member may fall short at once, its costs unchanged, for the
        front to keep ``level`` of its hypervolume: what "reaching 99%" asks of a search, in top-1's own unit.
        Where it is a fraction of one validation image's step, or of the measurement's sd (:meth:`within_noise`),
        the level tells searches apart by which configurations won the validation draw, not by what they found.
        Bisection on the hypervolume itself, so any number of cost objectives is exact."""
        if not 0.0 < level <= 1.0:
            raise ValueError(f"a hypervolume level is in (0, 1], not {level}")
        accuracy, _, _ = self._axes()
        members = self.points[self.members]
        sign = 1.0 if self.directions[accuracy] == "max" else -1.0
        low, high = 0.0, float(sign * (members[:, accuracy] - self.references[reference][accuracy]).max())
        for _ in range(SHORTFALL_BISECTIONS):
            middle = (low + high) / 2
            shifted = members.copy()
            shifted[:, accuracy] -= sign * middle
            kept = hypervolume(shifted, self.directions, self.references[reference]) / self.volumes[reference]
            low, high = (middle, high) if kept >= level else (low, middle)
        return low

    def oracle(self, level: float, reference: str = PRIMARY) -> dict[str, Any]:
        """The cheapest set of true-front members whose hypervolume reaches ``level`` of the front's,
        by total epochs to train them (each member costs the table's epochs, so: the fewest members;
        among as few, the most volume). Exact while the subsets tried stay under
        :data:`ORACLE_EXACT_SUBSETS` (a front of 16 members always), else a greedy bound (``exact``: false)."""
        members = [int(m) for m in self.members]
        tried = 0
        for size in range(1, len(members) + 1):
            if tried + math.comb(len(members), size) > ORACLE_EXACT_SUBSETS:
                return self._greedy_oracle(level, reference)
            tried += math.comb(len(members), size)
            best = max(
                ((self.normalised(subset, reference), subset) for subset in itertools.combinations(members, size)),
                key=lambda pair: pair[0],
            )
            if best[0] >= level - 1e-12:
                return {"epochs": size * self.epochs, "members": sorted(best[1]), "hv": best[0], "exact": True}
        raise AssertionError("the whole true front holds all of its volume")

    def _greedy_oracle(self, level: float, reference: str) -> dict[str, Any]:
        chosen: list[int] = []
        volume = 0.0
        while volume < level - 1e-12:
            volume, add = max((self.normalised([*chosen, int(m)], reference), int(m))
                              for m in self.members if int(m) not in chosen)  # fmt: skip
            chosen.append(add)
        return {"epochs": len(chosen) * self.epochs, "members": sorted(chosen), "hv": volume, "exact": False}


def worst_reference(points: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """The worst value of each objective over ``points`` (the table's configurations)."""
    return np.asarray(
        [points[:, k].min() if d == "max" else points[:, k].max() for k, d in enumerate(directions)], dtype=float
    )


def quartiles(values: list[float | None]) -> dict[str, Any]:
    reached = [v for v in values if v is not None]
    if len(reached) < len(values):  # a seed that never got there: its value is beyond the budget
        ordered = sorted(reached) + [math.inf] * (len(values) - len(reached))
    else:
        ordered = sorted(reached)
    if not ordered:
        return {"median": None, "q25": None, "q75": None, "reached": 0, "seeds": 0}
    q = np.percentile(np.asarray(ordered, dtype=float), [25, 50, 75], method="lower")
    as_value = [None if not math.isfinite(v) else float(v) for v in q]
    return {
        "median": as_value[1], "q25": as_value[0], "q75": as_value[2], "reached": len(reached), "seeds": len(values)
    }  # fmt: skip


def median_interval(values: list[float | None], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> list:
    """A 95% percentile-bootstrap interval of the median over seeds (seeds resampled with replacement,
    ``resamples`` times, seeded): [low, high], None for a bound beyond the budget (a seed that never reached
    the level counts as beyond it, as in :func:`quartiles`). Says whether two medians of one table differ
    by more than which seeds ran (the committed ``tpe+spread`` median moved from 355 to 472 between 10 and
    20 seeds)."""
    if not values:
        return [None, None]
    data = np.asarray([math.inf if v is None else float(v) for v in values])
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(data), size=(resamples, len(data)))
    medians = np.percentile(data[picks], 50, axis=1, method="lower")
    low, high = np.percentile(medians, [2.5, 97.5], method="lower")
    return [None if not math.isfinite(v) else float(v) for v in (low, high)]


def paired_difference(base: list[float | None], other: list[float | None], budget: int) -> dict[str, Any]:
    """``other`` against ``base`` seed by seed (two methods replayed on the same seeds: the same spread and the
    same first proposals, so a seed's two values differ by what the methods do differently, not by which
    seeds ran): the per-seed differences ``other - base`` (a seed that never got there counts as
    ``budget + 1``, beyond the budget, as everywhere here; two such seeds are a tie), their median, how many
    seeds ``other`` got there earlier, at the same epoch and later, and the exact two-sided sign test's p
    over the seeds that differ (1.0 where none does). Medians over seeds of each method cannot say this:
    their intervals overlap where a paired comparison still decides."""
    if len(base) != len(other):
        raise ValueError(f"paired values need the same seeds: {len(base)} and {len(other)}")
    beyond = budget + 1
    pairs = zip(base, other, strict=True)
    differences = [(beyond if b is None else b) - (beyond if a is None else a) for a, b in pairs]
    earlier, later = sum(d < 0 for d in differences), sum(d > 0 for d in differences)
    return {
        "median_difference": float(np.median(differences)) if differences else None,
        "earlier": earlier,
        "same": len(differences) - earlier - later,
        "later": later,
        "sign_test_p": sign_test(earlier, later),
        "differences": differences,
    }


def sign_test(earlier: int, later: int) -> float:
    """The exact two-sided sign test's p for ``earlier`` against ``later`` (ties left out): twice the
    binomial(n, 1/2) tail at the smaller count, at most 1."""
    n = earlier + later
    tail = sum(math.comb(n, k) for k in range(min(earlier, later) + 1)) / 2**n if n else 1.0
    return min(1.0, 2 * tail)


def _measure(values: list[float | None]) -> dict[str, Any]:
    """Quartiles, the median's bootstrap interval and the per-seed values (recomputable from the JSON)."""
    return {**quartiles(values), "median_95": median_interval(values), "per_seed": list(values)}


def summarise(runs: list[Replay], truth: TrueFront, budget: int) -> dict[str, Any]:
    """Per reference: epochs and simulated seconds to each level, AUC, hypervolume at the budget; then the
    share of the front found and pruned, and the regret in accuracy points at the budget. Every measure
    carries its quartiles, the median's bootstrap interval and its per-seed values, in seed order."""
    members = set(int(m) for m in truth.members)
    cheapest = truth.cheapest
    summary: dict[str, Any] = {}
    for reference in REFERENCES:
        curves = [truth.curve(r, reference) for r in runs]
        clocked = all(c.seconds or not c.epochs for c in curves)
        summary[reference] = {
            **{f"epochs_to_{level_key(level)}": _measure([c.epochs_to(level) for c in curves]) for level in LEVELS},
            **{f"seconds_to_{level_key(level)}": _measure([c.seconds_to(level) for c in curves]) for level in LEVELS
               if clocked},
            "auc": _measure([auc(c, budget) for c in curves]),
            "hv_at_budget": _measure([c.volume_at(budget) for c in curves]),
            # per seed, the configuration (table row) whose completion reached the level: what it waited for
            **{
                f"reached_by_{level_key(level)}": [truth.reached_by(r, level, reference) for r in runs]
                for level in LEVELS
            },
        }
    regrets = [truth.regret([i for i, at in zip(r.completed, r.completed_at, strict=True) if at <= budget])
               for r in runs]  # fmt: skip
    summary.update(
        {
            # the share of seeds that trained the front's cheapest member to the end: the cheap end of
            # the front, which single-metric early stopping prunes first
            "cheapest_found": sum(cheapest in r.completed for r in runs) / len(runs),
            "front_found": _measure([len(members & set(r.completed)) / len(members) for r in runs]),
            "front_pruned": _measure([len(members & set(r.pruned)) / len(members) for r in runs]),
            "trials_completed": _measure([len(r.completed) for r in runs]),
            "regret_mean": _measure([g["mean"] for g in regrets]),
            "regret_max": _measure([g["max"] for g in regrets]),
        }
    )
    return summary
