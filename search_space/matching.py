"""Matched-size model families: re-allocate blocks and channels so that every layout has about
the same parameter count as a reference, as the CoAtNet paper compares "comparable" models.

Pure Python (the closed-form cost model): choosing an allocation costs no model build.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from trials.models.config import CoAtNetConfig

from .cost_model import estimate_params


def _widths(base: int, step: int) -> list[int]:
    """Candidate widths around ``base``: multiples of ``step`` from about 0.5x to 2x."""
    low, high = max(step, int(base * 0.5) // step * step), int(base * 2.0) // step * step
    return list(range(low, high + step, step))


def _change(candidate: CoAtNetConfig, base: CoAtNetConfig) -> float:
    """How far an allocation is from the reference (log-ratios of S3/S4 depths and widths)."""
    return sum(
        abs(math.log(getattr(candidate, f)[i] / getattr(base, f)[i])) for f in ("depths", "dims") for i in (3, 4)
    )


def match_layout(base: CoAtNetConfig, layout: str, target: int, tolerance: float = 0.05) -> CoAtNetConfig:
    """The allocation of ``layout`` closest to ``base`` whose parameter count is within ``tolerance`` of
    ``target``: S3/S4 block counts and widths are re-allocated (S0..S2 are kept)."""
    step = base.head_size  # T stages need multiples of the head size; C stages use the same grid
    if layout == "VIT-REL":
        # One stack of blocks at S3's width: only the total block count matters (each stage >= 1).
        total = sum(base.depths[1:])
        allocations = [
            ((*base.depths[:1], 1, 1, 1, n - 3), (*base.dims[:3], w, base.dims[4]))
            for n in range(4, 2 * total + 3)
            for w in _widths(base.dims[3], step)
        ]
    else:
        allocations = [
            ((*base.depths[:3], d3, d4), (*base.dims[:3], w3, w4))
            for d3, d4, w3, w4 in itertools.product(
                range(1, 2 * base.depths[3] + 3),
                range(1, base.depths[4] + 2),
                _widths(base.dims[3], step),
                _widths(base.dims[4], step),
            )
            if w4 >= w3  # widths never shrink with depth
        ]
    best: tuple[float, float, CoAtNetConfig] | None = None
    for depths, dims in allocations:
        try:
            candidate = base.replace(layout=layout, depths=depths, dims=dims)
        except ValueError:
            continue
        error = abs(estimate_params(candidate) / target - 1.0)
        # Prefer candidates well inside the tolerance, then the smallest change from the reference.
        key = (0.0 if error <= tolerance / 2 else error, _change(candidate, base))
        if best is None or key < best[:2]:
            best = (*key, candidate)
    if best is None or abs(estimate_params(best[2]) / target - 1.0) > tolerance:
        raise ValueError(f"no allocation of layout {layout} is within {tolerance:.0%} of {target:,} parameters")
    return best[2]


def match_layouts(base: CoAtNetConfig, layouts: Sequence[str], tolerance: float = 0.05) -> dict[str, CoAtNetConfig]:
    """Every layout at the parameter count of ``base`` (within ``tolerance``); ``base``'s own layout is kept."""
    target = estimate_params(base)
    return {
        layout: base.replace(layout=layout) if layout == base.layout else match_layout(base, layout, target, tolerance)
        for layout in layouts
    }
