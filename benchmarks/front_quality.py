"""How much of a table's true front a search found, and when: the measures every replay reports.

Shared by :mod:`benchmarks.search_quality` (our searcher under the engine's simulator) and
:mod:`benchmarks.search_quality_syne` (Syne Tune's methods in its own simulator), so that neither
imports the other. Per seed a :class:`Replay` records the normalised hypervolume against the epochs
spent; :class:`TrueFront` normalises by the true front's hypervolume (one reference point, the
table's worst value of each objective); :func:`summarise` gives medians and quartiles over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from benchmarks.table import Table, TableError
from dashboards.multiobjective import hypervolume, non_dominated


@dataclass
class Replay:
    """One method's run on one seed: the normalised hypervolume after each epoch spent."""

    epochs: list[int] = field(default_factory=list)  # epochs spent when the volume changed
    volume: list[float] = field(default_factory=list)  # normalised hypervolume from then on
    completed: list[int] = field(default_factory=list)  # configurations that ran every epoch, in order
    pruned: list[int] = field(default_factory=list)
    spent: int = 0
    simulated_s: float = 0.0

    def epochs_to(self, level: float) -> int | None:
        for epochs, volume in zip(self.epochs, self.volume, strict=True):
            if volume >= level - 1e-12:
                return epochs
        return None

    def volume_at(self, epochs: int) -> float:
        at = [v for e, v in zip(self.epochs, self.volume, strict=True) if e <= epochs]
        return at[-1] if at else 0.0


class TrueFront:
    """The table's true front and the normalisation of a found set's hypervolume."""

    def __init__(self, table: Table, objectives: dict[str, str]):
        self.objectives = objectives
        self.directions = list(objectives.values())
        self.points = np.column_stack([table.metric(name) for name in objectives])
        finite = np.all(np.isfinite(self.points), axis=1)
        worst = [
            self.points[finite, k].min() if d == "max" else self.points[finite, k].max()
            for k, d in enumerate(self.directions)
        ]
        self.reference = np.asarray(worst, dtype=float)
        self.members = np.flatnonzero(finite)[non_dominated(self.points[finite], self.directions)]
        self.volume = hypervolume(self.points[self.members], self.directions, self.reference)
        cost = next(k for k, name in enumerate(objectives) if name != "top1")  # the first cost objective
        sign = 1 if self.directions[cost] == "min" else -1
        self.cheapest = int(self.members[np.argmin(sign * self.points[self.members, cost])])
        if not self.volume > 0:
            raise TableError(f"{table.path}: the true front has no hypervolume against the worst values")

    def normalised(self, found: Sequence[int]) -> float:
        if not found:
            return 0.0
        return hypervolume(self.points[list(found)], self.directions, self.reference) / self.volume


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


def summarise(runs: list[Replay], truth: TrueFront, budget: int) -> dict[str, Any]:
    members = set(int(m) for m in truth.members)
    cheapest = truth.cheapest
    return {
        # the share of seeds that trained the front's cheapest member to the end: the cheap end of
        # the front, which single-metric early stopping prunes first
        "cheapest_found": sum(cheapest in r.completed for r in runs) / len(runs),
        "epochs_to_95": quartiles([r.epochs_to(0.95) for r in runs]),
        "epochs_to_99": quartiles([r.epochs_to(0.99) for r in runs]),
        "hv_at_budget": quartiles([r.volume_at(budget) for r in runs]),
        "front_found": quartiles([len(members & set(r.completed)) / len(members) for r in runs]),
        "front_pruned": quartiles([len(members & set(r.pruned)) / len(members) for r in runs]),
        "trials_completed": quartiles([len(r.completed) for r in runs]),
    }
