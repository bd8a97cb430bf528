"""Matched-size model families: re-allocate blocks and channels so that every layout has about
the same parameter count as a reference, as the CoAtNet paper compares "comparable" models.

Pure Python (the closed-form cost model): choosing an allocation costs no model build.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from trials.models.config import CoAtNetConfig

from .cost_model import estimate_flops, estimate_params


def _widths(base: int, step: int) -> list[int]:
    """Candidate widths around ``base``: multiples of ``step`` from about 0.5x to 2x."""
    low, high = max(step, int(base * 0.5) // step * step), int(base * 2.0) // step * step
    return list(range(low, high + step, step))


def _change(candidate: CoAtNetConfig, base: CoAtNetConfig) -> float:
    """How far an allocation is from the reference (log-ratios of S3/S4 depths and widths)."""
    return sum(
        abs(math.log(getattr(candidate, f)[i] / getattr(base, f)[i])) for f in ("depths", "dims") for i in (3, 4)
    )


def _allocations(base: CoAtNetConfig, layout: str, flops: bool) -> list[dict]:
    """Candidate re-allocations of ``layout`` around ``base`` (keyword arguments of ``base.replace``).

    Parameters only: S3/S4 block counts and widths move (S0..S2 kept). With FLOPs too, S2's block
    count and width move as well (the early, high-resolution stage is where compute goes).
    """
    step = base.head_size  # T stages need multiples of the head size; C stages use the same grid
    if layout == "VIT-REL":
        # One stack of blocks at S3's width: only the total block count matters (each stage >= 1).
        total = sum(base.depths[1:])
        return [
            {"depths": (*base.depths[:1], 1, 1, 1, n - 3), "dims": (*base.dims[:3], w, base.dims[4])}
            for n in range(4, 2 * total + 3)
            for w in _widths(base.dims[3], step)
        ]
    stage2 = (
        itertools.product(range(1, 2 * base.depths[2] + 2), _widths(base.dims[2], step))
        if flops
        else [(base.depths[2], base.dims[2])]
    )
    return [
        {"depths": (*base.depths[:2], d2, d3, d4), "dims": (*base.dims[:2], w2, w3, w4)}
        for (d2, w2), d3, d4, w3, w4 in itertools.product(
            list(stage2),
            range(1, 2 * base.depths[3] + 3),
            range(1, base.depths[4] + 2),
            _widths(base.dims[3], step),
            _widths(base.dims[4], step),
        )
        if w4 >= w3 >= w2  # widths never shrink with depth
    ]


def match_layout(
    base: CoAtNetConfig,
    layout: str,
    target: int,
    tolerance: float = 0.05,
    target_flops: int | None = None,
) -> CoAtNetConfig:
    """The allocation of ``layout`` closest to ``base`` whose parameter count is within ``tolerance``
    of ``target`` (and, with ``target_flops``, whose FLOPs are too): see :func:`_allocations` for
    which knobs move."""
    best: tuple[float, float, CoAtNetConfig] | None = None
    for change in _allocations(base, layout, target_flops is not None):
        try:
            candidate = base.replace(layout=layout, **change)
        except ValueError:
            continue
        error = _mismatch(candidate, target, target_flops)
        # Prefer candidates well inside the tolerance, then the smallest change from the reference.
        key = (0.0 if error <= tolerance / 2 else error, _change(candidate, base))
        if best is None or key < best[:2]:
            best = (*key, candidate)
    if best is None or _mismatch(best[2], target, target_flops) > tolerance:
        what = "parameters" if target_flops is None else f"parameters and {target_flops:,} FLOPs"
        raise ValueError(f"no allocation of layout {layout} is within {tolerance:.0%} of {target:,} {what}")
    return best[2]


def _mismatch(candidate: CoAtNetConfig, target: int, target_flops: int | None) -> float:
    error = abs(estimate_params(candidate) / target - 1.0)
    if target_flops is not None:
        error = max(error, abs(estimate_flops(candidate) / target_flops - 1.0))
    return error


def match_layouts(
    base: CoAtNetConfig, layouts: Sequence[str], tolerance: float = 0.05, *, flops: bool = False
) -> dict[str, CoAtNetConfig]:
    """Every layout at the parameter count of ``base`` (within ``tolerance``), and at its FLOPs too
    with ``flops`` (the paper compares models of comparable size and compute); ``base``'s own layout
    is kept."""
    target = estimate_params(base)
    target_flops = estimate_flops(base) if flops else None
    return {
        layout: base.replace(layout=layout)
        if layout == base.layout
        # VIT-REL's token count fixes its FLOPs per parameter (16 tokens: far below CoAtNet's, 64: far
        # above): it is matched on parameters at its patch size, and its FLOPs are reported.
        else match_layout(base, layout, target, tolerance, None if layout == "VIT-REL" else target_flops)
        for layout in layouts
    }
