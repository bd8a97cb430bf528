"""The multi-objective maths of archsearch, in one place: non-dominated sets, hypervolume, its progress.

The heavy lifting is moocore's (C core, the O(n log n) dimension-sweep algorithms for 2 and 3
objectives); this module only adds archsearch's conventions on top:

* **Directions** are given per objective as ``"max"`` or ``"min"`` (as in a spec's ``objectives``);
  internally every objective is turned into one to minimise by flipping the sign of the maximised ones.
* **Duplicates** of a non-dominated point are all on the front (two trials that tie are both results).
* **Reference point**: given in the objectives' own units and directions; by default the worst value
  of each objective among the points, so the extreme points of a front contribute no volume. Only
  points strictly better than the reference in every objective count.

Hypervolume progress (the hypervolume of the front of the first *n* finished trials, for every *n*)
is incremental: one pass over the trials in finish order. In 2-D the front is kept as a staircase
sorted by the first objective and each new point changes the volume by the area it alone adds:
O(log n) to find its place plus, amortised, O(1) points it removes. In 3-D the front is kept and
its volume recomputed by moocore only when a new point enters it.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trials.errors import DataError
from trials.lazy import lazy_import

moocore = lazy_import("moocore")  # compiled hypervolume code: only when a front is computed

DIRECTIONS = ("max", "min")


class ObjectiveError(DataError, ValueError):
    """Points, directions or a reference that do not fit together: a one-line message."""


def _signs(directions: Sequence[str]) -> np.ndarray:
    bad = [d for d in directions if d not in DIRECTIONS]
    if bad:
        raise ObjectiveError(f"direction {bad[0]!r} must be max or min")
    return np.array([-1.0 if d == "max" else 1.0 for d in directions])


def as_minimization(points: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """``points`` (rows, in the objectives' own units) as a float array where every column is minimized."""
    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != len(directions):
        raise ObjectiveError(f"points must be (n, {len(directions)}), got {pts.shape}")
    return pts * _signs(directions)


def non_dominated(points: np.ndarray, directions: Sequence[str] | None = None) -> np.ndarray:
    """Boolean mask of the rows of ``points`` that no other row dominates (duplicates are all kept).

    Without ``directions`` every column is minimized. Rows must be finite: filter NaN first.
    """
    pts = np.asarray(points, dtype=float)
    if directions is not None:
        pts = as_minimization(pts, directions)
    if len(pts) == 0:
        return np.zeros(0, dtype=bool)
    if len(pts) == 1:
        return np.ones(1, dtype=bool)
    return np.asarray(moocore.is_nondominated(pts, keep_weakly=True), dtype=bool)


def default_reference(points: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """The worst value of each objective among ``points``, in the objectives' own units."""
    pts = np.asarray(points, dtype=float)
    if len(pts) == 0:
        raise ObjectiveError("a default reference point needs at least one point")
    return np.array([pts[:, k].min() if d == "max" else pts[:, k].max() for k, d in enumerate(directions)])


def hypervolume(points: np.ndarray, directions: Sequence[str], reference: Sequence[float] | None = None) -> float:
    """Hypervolume dominated by ``points`` (rows) and bounded by ``reference``, for 2 or 3 objectives.

    Give the reference explicitly to compare fronts; by default it is :func:`default_reference`.
    """
    pts = as_minimization(points, directions)
    if not 2 <= pts.shape[1] <= 3:
        raise ObjectiveError("hypervolume supports 2 or 3 objectives")
    if len(pts) == 0:
        return 0.0
    ref = _reference_as_minimization(points, directions, reference)
    pts = pts[np.all(pts < ref, axis=1)]
    if len(pts) == 0:
        return 0.0
    return float(moocore.hypervolume(pts, ref=ref))


def _reference_as_minimization(
    points: np.ndarray, directions: Sequence[str], reference: Sequence[float] | None
) -> np.ndarray:
    ref = default_reference(points, directions) if reference is None else np.asarray(reference, dtype=float)
    if ref.shape != (len(directions),):
        raise ObjectiveError(f"the reference point needs {len(directions)} values, got {ref.tolist()}")
    return ref * _signs(directions)


class _Staircase2D:
    """A 2-D front (both objectives minimized) as a staircase sorted by x, with its running hypervolume.

    ``xs`` ascends and ``ys`` strictly descends; only points strictly inside the reference box are kept.
    The volume is the sum of vertical strips: point k owns ``[x_k, x_{k+1}) x [y_k, ref_y)``.
    """

    def __init__(self, reference: np.ndarray):
        self.rx, self.ry = float(reference[0]), float(reference[1])
        self.xs: list[float] = []
        self.ys: list[float] = []
        self.volume = 0.0

    def dominated(self, points: np.ndarray) -> np.ndarray:
        """Vectorised: which ``points`` (rows) are weakly dominated by the staircase or outside the box."""
        outside = (points[:, 0] >= self.rx) | (points[:, 1] >= self.ry)
        if not self.xs:
            return outside
        ys = np.asarray(self.ys)
        left = np.searchsorted(np.asarray(self.xs), points[:, 0], side="right") - 1
        covered = (left >= 0) & (ys[np.maximum(left, 0)] <= points[:, 1])
        return outside | covered

    def add(self, point: np.ndarray) -> None:
        x, y = float(point[0]), float(point[1])
        if not (x < self.rx and y < self.ry):
            return
        xs, ys = self.xs, self.ys
        i = bisect_right(xs, x)
        if i > 0 and ys[i - 1] <= y:
            return  # weakly dominated by a point with x' <= x and y' <= y
        start = bisect_left(xs, x)  # points with x' >= x; those with y' >= y are now dominated
        end = start
        while end < len(xs) and ys[end] >= y:
            end += 1
        next_x = xs[end] if end < len(xs) else self.rx
        removed = 0.0
        for k in range(start, end):
            right = xs[k + 1] if k + 1 < end else next_x
            removed += (right - xs[k]) * (self.ry - ys[k])
        added = (next_x - x) * (self.ry - y)
        if start > 0:  # the left neighbour's strip now ends at x instead of at the first removed point
            left_end = xs[start] if start < end else next_x
            added -= (left_end - x) * (self.ry - ys[start - 1])
        self.volume += added - removed
        xs[start:end] = [x]
        ys[start:end] = [y]


class _Front3D:
    """A 3-D front (minimized) whose hypervolume moocore recomputes only when a new point enters it."""

    def __init__(self, reference: np.ndarray):
        self.ref = reference
        self.front = np.empty((0, 3))
        self.volume = 0.0

    def dominated(self, points: np.ndarray) -> np.ndarray:
        """Vectorised: which ``points`` (rows) are weakly dominated by the front or outside the box."""
        outside = np.any(points >= self.ref, axis=1)
        if not len(self.front):
            return outside
        covered = np.any(np.all(self.front[None, :, :] <= points[:, None, :], axis=2), axis=1)
        return outside | covered

    def add(self, point: np.ndarray) -> None:
        if not np.all(point < self.ref):
            return
        if len(self.front) and np.any(np.all(self.front <= point, axis=1)):
            return
        keep = ~np.all(point <= self.front, axis=1)
        self.front = np.vstack([self.front[keep], point])
        self.volume = float(moocore.hypervolume(self.front, ref=self.ref))


_BLOCK = 512  # trials screened at once against the current front before the exact, sequential update


def hypervolume_history(
    points: np.ndarray, usable: np.ndarray, directions: Sequence[str], reference: Sequence[float] | None = None
) -> np.ndarray:
    """Hypervolume after each of ``points`` (rows in finish order), counting only rows where ``usable``.

    Rows that are not usable (a failed or pruned trial, a missing objective) still advance the
    history, with the volume unchanged. The reference defaults to the worst usable value of each
    objective and is fixed for the whole history, so it never decreases.

    Most trials of a search are dominated by the front found before them and change nothing: each
    block of trials is screened against the current front in one vectorised step, and only the
    survivors go through the exact sequential update (in finish order, so within-block dominance
    is still resolved one trial at a time).
    """
    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != len(directions):
        raise ObjectiveError(f"points must be (n, {len(directions)}), got {pts.shape}")
    if not 2 <= pts.shape[1] <= 3:
        raise ObjectiveError("hypervolume supports 2 or 3 objectives")
    usable = np.asarray(usable, dtype=bool) & np.all(np.isfinite(pts), axis=1)
    volumes = np.zeros(len(pts))
    if not usable.any():
        return volumes
    ref = _reference_as_minimization(pts[usable], directions, reference)
    minimized = as_minimization(pts, directions)
    tracker: _Staircase2D | _Front3D = _Staircase2D(ref) if pts.shape[1] == 2 else _Front3D(ref)
    candidates = np.flatnonzero(usable)
    for start in range(0, len(candidates), _BLOCK):
        block = candidates[start : start + _BLOCK]
        for i in block[~tracker.dominated(minimized[block])]:
            tracker.add(minimized[i])
            volumes[i] = tracker.volume
    return np.maximum.accumulate(volumes)  # the volume holds between changes


REFERENCE_MARGIN = 0.1  # the plateau rule's reference point lies this share of each range beyond the worst


@dataclass(frozen=True)
class PlateauCheck:
    """How much the front's hypervolume grew over the last ``window`` completed trials."""

    window: int
    reference: tuple[float, ...]  # in the objectives' own units, fixed at the start of the window
    volume_before: float  # of the trials completed before the window
    volume_after: float  # of all completed trials

    @property
    def gain(self) -> float:
        """Relative growth; infinite when there was no volume to grow from."""
        if self.volume_before <= 0:
            return math.inf
        return (self.volume_after - self.volume_before) / self.volume_before


def plateau_check(points: np.ndarray, directions: Sequence[str], window: int) -> PlateauCheck | None:
    """Hypervolume growth over the last ``window`` of ``points`` (completed trials, rows in finish order).

    The reference point is fixed at the start of the window: the worst value of each objective
    among the trials completed before it, pushed out by :data:`REFERENCE_MARGIN` of that range (1%
    of the value where the range is 0), so every point that was on the front then counts. A relative
    gain is independent of each objective's units. None until more than ``window`` points exist.
    One objective: the "volume" is the distance of the best value from the reference.
    """
    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != len(directions) or not 1 <= pts.shape[1] <= 3:
        raise ObjectiveError(f"points must be (n, k) with k = {len(directions)} in 1..3, got {pts.shape}")
    pts = pts[np.all(np.isfinite(pts), axis=1)]
    if len(pts) <= window:
        return None
    before = pts[: len(pts) - window]
    worst = default_reference(before, directions)
    best = np.array([before[:, k].max() if d == "max" else before[:, k].min() for k, d in enumerate(directions)])
    spread = np.abs(worst - best)
    spread = np.where(spread > 0, spread, np.maximum(np.abs(worst) * 0.01, 1e-12))
    reference = worst + _signs(directions) * REFERENCE_MARGIN * spread  # beyond the worst, away from the best
    return PlateauCheck(
        window=window,
        reference=tuple(float(v) for v in reference),
        volume_before=_volume(before, directions, reference),
        volume_after=_volume(pts, directions, reference),
    )


def _volume(points: np.ndarray, directions: Sequence[str], reference: np.ndarray) -> float:
    if len(directions) == 1:
        minimized, ref = as_minimization(points, directions)[:, 0], float(reference[0]) * _signs(directions)[0]
        return float(max(0.0, ref - minimized.min()))
    return hypervolume(points, directions, reference)
