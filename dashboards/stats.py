"""Means, 95% confidence intervals over seeds, and verdicts on orderings ("A > B holds?").

Standard library only. Student-t quantiles are tabulated (no scipy dependency); beyond 30
degrees of freedom the normal quantile is within 2% and is used.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 95% Student-t critical values t_{0.975, df} for df = 1..30.
_T975 = (
    12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851, 2.364624252, 2.306004135,
    2.262157163, 2.228138852, 2.200985160, 2.178812830, 2.160368656, 2.144786688, 2.131449546, 2.119905299,
    2.109815578, 2.100922040, 2.093024054, 2.085963447, 2.079613845, 2.073873068, 2.068657610, 2.063898562,
    2.059538553, 2.055529439, 2.051830516, 2.048407142, 2.045229642, 2.042272456,
)  # fmt: skip


def t_critical(df: float) -> float:
    """t_{0.975, df}; fractional df (Welch) interpolate linearly between table entries."""
    if df < 1:
        return math.inf
    if df >= 30:
        return 1.959963985 if df > 1000 else _T975[-1] + (1.959963985 - _T975[-1]) * (1 - 30 / df)
    low = int(df)
    high = min(low + 1, 30)
    frac = df - low
    return _T975[low - 1] * (1 - frac) + _T975[high - 1] * frac


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def mean_ci(values: Sequence[float]) -> Interval:
    """Mean and 95% t-interval; with one value the interval is unbounded (nothing is known of the spread)."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("no values")
    mean = statistics.fmean(xs)
    if len(xs) == 1:
        return Interval(mean, -math.inf, math.inf, 1)
    half = t_critical(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Interval(mean, mean - half, mean + half, len(xs))


def difference_ci(a: Sequence[float], b: Sequence[float]) -> Interval:
    """95% Welch interval of mean(a) - mean(b) (unequal variances)."""
    if len(a) < 2 or len(b) < 2:
        diff = statistics.fmean(a) - statistics.fmean(b)
        return Interval(diff, -math.inf, math.inf, min(len(a), len(b)))
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(a) - statistics.fmean(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(diff, diff, diff, min(len(a), len(b)))
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_critical(df) * se
    return Interval(diff, diff - half, diff + half, min(len(a), len(b)))


def verdict(a: Sequence[float], b: Sequence[float], relation: str, higher_is_better: bool = True) -> str:
    """Whether the paper's claim ``A relation B`` holds here: ``>``, ``>=`` or ``~`` (comparable).

    "holds" / "does not hold" when the 95% interval of the difference decides it, "inconclusive"
    when it straddles zero for a strict claim. Never hard-coded: it follows from the data.
    """
    ci = difference_ci(a, b) if higher_is_better else difference_ci(b, a)
    if relation == ">":
        return "holds" if ci.low > 0 else ("does not hold" if ci.high < 0 else "inconclusive")
    if relation == ">=":
        return "does not hold" if ci.high < 0 else "holds"
    if relation == "~":
        return "holds" if ci.low <= 0 <= ci.high else "does not hold"
    raise ValueError(f"unknown relation {relation!r}; use >, >= or ~")
