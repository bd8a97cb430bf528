"""The Pareto front of a study's completed trials (used by the search's progress and summary).

Only trials that ran their whole budget count: pruned, failed, diverged and infeasible trials
never enter the front (an early-stopped trial's truncated accuracy is not a result).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def non_dominated(points: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of ``points`` (to be MINIMISED in every column) that no other row dominates.

    Duplicates are all kept (neither dominates the other).
    """
    n = len(points)
    mask = np.ones(n, dtype=bool)
    for i in range(n):
        if not mask[i]:
            continue
        dominates_i = np.all(points <= points[i], axis=1) & np.any(points < points[i], axis=1)
        if dominates_i.any():
            mask[i] = False
    return mask


def pareto_front(trials, objectives: Mapping[str, str]):
    """Rows of a ``Store.trials`` DataFrame on the front of ``objectives`` ({metric: "max"|"min"})."""
    if trials.empty or "status" not in trials:
        return trials.iloc[0:0]
    done = trials[trials["status"] == "completed"]
    missing = [m for m in objectives if m not in done.columns]
    if missing or done.empty:
        return done.iloc[0:0]
    done = done.dropna(subset=list(objectives))
    signs = np.array([-1.0 if direction == "max" else 1.0 for direction in objectives.values()])
    points = done[list(objectives)].to_numpy(dtype=float) * signs
    front = done[non_dominated(points)]
    return front.sort_values(next(iter(objectives)), ascending=next(iter(objectives.values())) == "min")
