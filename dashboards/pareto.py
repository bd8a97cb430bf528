"""Pareto queries over the store: fronts for 2 or 3 objectives, across studies, with filters; hypervolume.

Only completed trials can be on a front; pruned, failed, diverged and infeasible trials are
excluded but counted, so a report can say what the front was chosen from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness.pareto_front import non_dominated

DIRECTIONS = ("max", "min")


class ParetoError(ValueError):
    """A bad query (unknown metric, bad direction, empty study, ...): a one-line message."""


def parse_objectives(text: str) -> dict[str, str]:
    """``"top1:max,flops:min"`` -> ``{"top1": "max", "flops": "min"}`` (2 or 3 objectives)."""
    objectives: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, direction = part.partition(":")
        if not sep or not name:
            raise ParetoError(f"objective {part!r} is not METRIC:DIRECTION (e.g. top1:max)")
        if direction not in DIRECTIONS:
            raise ParetoError(f"direction {direction!r} of {name!r} must be max or min")
        objectives[name] = direction
    if not 2 <= len(objectives) <= 3:
        raise ParetoError(f"a Pareto front needs 2 or 3 objectives, got {len(objectives)}: {text!r}")
    return objectives


def parse_where(items: Iterable[str]) -> dict[str, str]:
    """``["layout=CCTT"]`` -> ``{"layout": "CCTT"}``."""
    where: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ParetoError(f"filter {item!r} is not KEY=VALUE (e.g. layout=CCTT)")
        where[key.strip()] = value.strip()
    return where


def minimisation_points(frame, objectives: Mapping[str, str]) -> np.ndarray:
    signs = np.array([-1.0 if d == "max" else 1.0 for d in objectives.values()])
    return frame[list(objectives)].to_numpy(dtype=float) * signs


def front_mask(frame, objectives: Mapping[str, str]) -> np.ndarray:
    """Rows of ``frame`` on the front: completed, all objectives known, and non-dominated."""
    mask = np.zeros(len(frame), dtype=bool)
    candidates = (frame["status"] == "completed").to_numpy() & frame[list(objectives)].notna().all(axis=1).to_numpy()
    if candidates.any():
        mask[np.flatnonzero(candidates)] = non_dominated(minimisation_points(frame[candidates], objectives))
    return mask


def _column_for(frame, key: str) -> str:
    """A filter key: a column (``config.model.layout``) or the last part of a config column (``layout``)."""
    if key in frame.columns:
        return key
    matches = [c for c in frame.columns if c.startswith("config.") and c.rsplit(".", 1)[-1] == key]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ParetoError(f"unknown filter key {key!r}")
    raise ParetoError(f"filter key {key!r} is ambiguous: {', '.join(matches)}")


def _matches(series, value: str):
    as_text = series.astype(str)
    try:
        number = float(value)
    except ValueError:
        return as_text == value
    numeric = series.apply(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
    return (numeric & (series.where(numeric, np.nan).astype(float) == number)) | (as_text == value)


@dataclass
class FrontQuery:
    trials: object  # DataFrame: every matching trial, with "study" and "on_front" columns
    front: object  # DataFrame: the front, sorted by the first objective
    counts: dict[str, int]  # matching trials by status


def query_front(
    store, studies: Sequence[str], objectives: Mapping[str, str], where: Mapping[str, str] | None = None
) -> FrontQuery:
    """The front of ``objectives`` over the trials of ``studies`` that match ``where``."""
    import pandas as pd

    frames = []
    for study in studies:
        frame = store.trials(study)
        if frame.empty:
            raise ParetoError(f"study {study!r} has no trials yet")
        frames.append(frame.assign(study=study))
    trials = pd.concat(frames, ignore_index=True)
    for metric in objectives:
        if metric not in trials.columns:
            known = sorted(c for c in trials.columns if not c.startswith("config.") and trials[c].dtype.kind in "fi")
            raise ParetoError(f"unknown metric {metric!r}; known: {', '.join(known)}")
    for key, value in (where or {}).items():
        trials = trials[_matches(trials[_column_for(trials, key)], value)]
    if trials.empty:
        raise ParetoError("no trial matches the filters")
    trials = trials.assign(on_front=front_mask(trials, objectives))
    first, direction = next(iter(objectives.items()))
    front = trials[trials["on_front"]].sort_values(first, ascending=direction == "min")
    counts = trials["status"].value_counts().to_dict()
    return FrontQuery(trials=trials, front=front, counts={k: int(v) for k, v in counts.items()})


def hypervolume(points: np.ndarray, directions: Sequence[str], reference: Sequence[float] | None = None) -> float:
    """Hypervolume dominated by ``points`` (rows) w.r.t. ``reference``, for 2 or 3 objectives.

    Directions say which way is better per column. The default reference is the worst value of
    each objective among the points (so the extreme points contribute zero volume): give one
    explicitly to compare fronts.
    """
    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != len(directions):
        raise ParetoError(f"points must be (n, {len(directions)}), got {pts.shape}")
    signs = np.array([-1.0 if d == "max" else 1.0 for d in directions])
    pts = pts * signs  # now every objective is minimised
    ref = pts.max(axis=0) if reference is None else np.asarray(reference, dtype=float) * signs
    pts = pts[np.all(pts < ref, axis=1)]
    if len(pts) == 0:
        return 0.0
    pts = pts[non_dominated(pts)]
    if pts.shape[1] == 2:
        return _hv2(pts, ref)
    if pts.shape[1] == 3:
        # Slice along the third objective: between consecutive z levels the dominated area is the
        # 2-D hypervolume of the points at or below that level.
        order = np.argsort(pts[:, 2])
        pts = pts[order]
        volume = 0.0
        levels = [*pts[:, 2].tolist(), ref[2]]
        for i in range(len(pts)):
            depth = levels[i + 1] - levels[i]
            if depth > 0:
                volume += _hv2(pts[: i + 1, :2], ref[:2]) * depth
        return float(volume)
    raise ParetoError("hypervolume supports 2 or 3 objectives")


def _hv2(pts: np.ndarray, ref: np.ndarray) -> float:
    front = pts[non_dominated(pts)]
    front = front[np.argsort(front[:, 0])]
    area, previous_y = 0.0, ref[1]
    for x, y in front:
        if y < previous_y:
            area += (ref[0] - x) * (previous_y - y)
            previous_y = y
    return float(area)


def hypervolume_progress(frame, objectives: Mapping[str, str], reference: Sequence[float] | None = None):
    """Hypervolume of the front of the first n finished trials, for each n (search progress).

    The reference is fixed for the whole curve (given, or the worst completed value of each
    objective) so the curve is monotone.
    """
    import pandas as pd

    finished = frame[frame["status"].isin(["completed", "pruned", "failed", "diverged"])].sort_values("number")
    done = finished[(finished["status"] == "completed") & finished[list(objectives)].notna().all(axis=1)]
    directions = list(objectives.values())
    if reference is None and len(done):
        worst = [done[m].min() if d == "max" else done[m].max() for m, d in objectives.items()]
        reference = worst
    rows = []
    for n in range(1, len(finished) + 1):
        subset = finished.iloc[:n]
        subset = subset[(subset["status"] == "completed") & subset[list(objectives)].notna().all(axis=1)]
        value = hypervolume(subset[list(objectives)].to_numpy(float), directions, reference) if len(subset) else 0.0
        rows.append({"n_finished": n, "hypervolume": value})
    return pd.DataFrame(rows, columns=["n_finished", "hypervolume"])
