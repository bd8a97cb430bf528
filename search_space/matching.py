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

MAX_WIDTHS = 8  # candidate widths per stage: enough to match within 5%, few enough to search in seconds


def _widths(base: int, step: int) -> list[int]:
    """Candidate widths around ``base``: multiples of ``step`` from about 0.5x to 2x, ``base`` included;
    at most MAX_WIDTHS of them, evenly spread (CoAtNet-0's stages would otherwise offer 10-37 each,
    and matching on FLOPs searches four stages' widths at once)."""
    low, high = max(step, int(base * 0.5) // step * step), int(base * 2.0) // step * step
    widths = list(range(low, high + step, step))
    if len(widths) > MAX_WIDTHS:
        picks = {widths[round(i * (len(widths) - 1) / (MAX_WIDTHS - 1))] for i in range(MAX_WIDTHS)}
        widths = sorted(picks | ({base} if base in widths else set()))
    return widths


def _change(candidate: CoAtNetConfig, base: CoAtNetConfig) -> float:
    """How far an allocation is from the reference (log-ratios of S3/S4 depths and widths)."""
    return sum(
        abs(math.log(getattr(candidate, f)[i] / getattr(base, f)[i])) for f in ("depths", "dims") for i in (3, 4)
    )


def _allocations(base: CoAtNetConfig, layout: str, anchor: CoAtNetConfig | None = None) -> list[dict]:
    """Candidate re-allocations of ``layout`` around ``base`` (keyword arguments of ``base.replace``).

    Parameters only (no ``anchor``): S3/S4 block counts and widths move (S0..S2 kept). With FLOPs
    too, S2's block count and width move as well (the early, high-resolution stage is where compute
    goes), with S3/S4 searched in a neighbourhood of ``anchor``, the parameter-only match: the full
    product of four stages' settings would be millions of candidates for CoAtNet-0.
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
    if anchor is None:
        stage2 = [(base.depths[2], base.dims[2])]
        depths3, depths4 = range(1, 2 * base.depths[3] + 3), range(1, base.depths[4] + 2)
        widths3, widths4 = _widths(base.dims[3], step), _widths(base.dims[4], step)
    else:
        stage2 = list(itertools.product(range(1, 2 * base.depths[2] + 2), _widths(base.dims[2], step)))
        depths3 = range(max(1, anchor.depths[3] - 2), anchor.depths[3] + 3)
        depths4 = range(max(1, anchor.depths[4] - 1), anchor.depths[4] + 2)
        widths3 = _near(_widths(base.dims[3], step), anchor.dims[3])
        widths4 = _near(_widths(base.dims[4], step), anchor.dims[4])
    return [
        {"depths": (*base.depths[:2], d2, d3, d4), "dims": (*base.dims[:2], w2, w3, w4)}
        for (d2, w2), d3, d4, w3, w4 in itertools.product(stage2, depths3, depths4, widths3, widths4)
        if w4 >= w3 >= w2  # widths never shrink with depth
    ]


def _near(widths: list[int], width: int, reach: int = 2) -> list[int]:
    """The candidate widths within ``reach`` places of ``width`` in ``widths``."""
    at = min(range(len(widths)), key=lambda i: abs(widths[i] - width))
    return widths[max(0, at - reach) : at + reach + 1]


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
    anchor = None if target_flops is None or layout == "VIT-REL" else match_layout(base, layout, target, tolerance)
    best: tuple[float, float, CoAtNetConfig] | None = None
    for change in _allocations(base, layout, anchor):
        try:
            candidate = base.replace(layout=layout, **change)
        except ValueError:
            continue
        # A candidate whose parameters alone miss by more than the best so far cannot win: skip its FLOPs.
        error = _mismatch(candidate, target, target_flops, bound=max(best[0], tolerance / 2) if best else math.inf)
        # Prefer candidates well inside the tolerance, then the smallest change from the reference.
        key = (0.0 if error <= tolerance / 2 else error, _change(candidate, base))
        if best is None or key < best[:2]:
            best = (*key, candidate)
    if best is None or _mismatch(best[2], target, target_flops) > tolerance:
        what = "parameters" if target_flops is None else f"parameters and {target_flops:,} FLOPs"
        raise ValueError(f"no allocation of layout {layout} is within {tolerance:.0%} of {target:,} {what}")
    return best[2]


def _mismatch(candidate: CoAtNetConfig, target: int, target_flops: int | None, bound: float = math.inf) -> float:
    """The larger relative error of parameters and FLOPs; FLOPs are not priced once params exceed ``bound``."""
    error = abs(estimate_params(candidate) / target - 1.0)
    if target_flops is not None and error <= bound:
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
