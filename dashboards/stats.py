"""Verdicts on the papers' claims that a reviewer accepts: paired seeds, one-sided tests, equivalence margins.

Every verdict is a one-sided test at the 5% level (scipy.stats), on the difference A - B of a
metric over seeds, oriented so that positive means "A is better":

* ``A > B``  holds if A - B > 0 is significant; does not hold if B - A > 0 is; else inconclusive.
* ``A ~ B``  holds only if equivalence within +-``margin`` is shown (TOST: both one-sided tests);
  does not hold if a difference beyond the margin is significant; else inconclusive.
* ``A >= B`` holds if ``A > B`` or ``A ~ B`` holds; does not hold if ``B > A`` holds; else inconclusive.
* ``A >> B`` holds if A - B > ``large_margin`` is significant; does not hold if A - B < ``large_margin`` is.

Absence of evidence is never agreement: with fewer than ``min_seeds`` seeds per variant every
verdict is "inconclusive (fewer than 3 seeds)". **Paired design**: when both samples are keyed by
seed (the same seed gives every variant the same data order and split), differences are taken
per seed (paired t on the common seeds); otherwise the samples are independent (Welch). Each
:class:`Verdict` says which test was used, the difference, its 95% interval, the margin, and the
power of the design in plain words (the smallest difference these seeds resolve; the seeds the
observed difference would need).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 0.05  # one-sided tests at the 95% level
POWER = 0.8  # for the "smallest resolvable difference" and "seeds needed" statements
MIN_SEEDS = 3
RELATIONS = (">", "~", ">=", ">>")

Sample = Sequence[float] | Mapping[int, float]


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    def clipped(self, low: float = -math.inf, high: float = math.inf) -> Interval:
        """The interval restricted to the metric's possible range (accuracy in [0, 100], a loss >= 0)."""
        return Interval(self.mean, max(self.low, low), min(self.high, high), self.n)


def t_critical(df: float, confidence: float = 0.95) -> float:
    """Two-sided critical value of Student's t (scipy); unbounded below 1 degree of freedom."""
    if df < 1:
        return math.inf
    return float(stats.t.ppf(0.5 + confidence / 2, df))


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean and t-interval; with one value the interval is unbounded (nothing is known of the spread)."""
    xs = np.asarray([float(v) for v in values])
    if len(xs) == 0:
        raise ValueError("no values")
    mean = float(xs.mean())
    if len(xs) == 1:
        return Interval(mean, -math.inf, math.inf, 1)
    half = t_critical(len(xs) - 1, confidence) * float(xs.std(ddof=1)) / math.sqrt(len(xs))
    return Interval(mean, mean - half, mean + half, len(xs))


@dataclass(frozen=True)
class Difference:
    """A - B over seeds: the estimate, its standard error and degrees of freedom, and how it was formed."""

    estimate: float
    se: float
    df: float
    test: str  # "paired t (n seeds)" or "Welch t (n_a, n_b seeds)"
    n_a: int
    n_b: int
    spread: float  # sd of the per-seed differences (paired) or sqrt(var_a + var_b) (Welch)
    paired: bool

    def interval(self, confidence: float = 0.95) -> Interval:
        n = min(self.n_a, self.n_b)
        if self.df < 1 or not math.isfinite(self.se):
            return Interval(self.estimate, -math.inf, math.inf, n)
        half = 0.0 if self.se == 0 else t_critical(self.df, confidence) * self.se
        return Interval(self.estimate, self.estimate - half, self.estimate + half, n)

    def p_above(self, threshold: float) -> float:
        """One-sided p-value of H1: A - B > threshold."""
        return _p_greater(self.estimate - threshold, self.se, self.df)

    def p_below(self, threshold: float) -> float:
        """One-sided p-value of H1: A - B < threshold."""
        return _p_greater(threshold - self.estimate, self.se, self.df)


def _p_greater(excess: float, se: float, df: float) -> float:
    if df < 1 or not math.isfinite(df):
        return 1.0
    if se == 0:
        return 0.0 if excess > 0 else 1.0
    return float(stats.t.sf(excess / se, df))


def _as_mapping(sample: Sample) -> Mapping[int, float] | None:
    return sample if isinstance(sample, Mapping) else None


def _values(sample: Sample) -> np.ndarray:
    values = sample.values() if isinstance(sample, Mapping) else sample
    return np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))])


def difference(a: Sample, b: Sample) -> Difference:
    """A - B: paired over the common seeds when both are keyed by seed (>= 2 in common), else Welch."""
    keyed_a, keyed_b = _as_mapping(a), _as_mapping(b)
    if keyed_a is not None and keyed_b is not None:
        common = sorted(
            s for s in set(keyed_a) & set(keyed_b) if math.isfinite(keyed_a[s]) and math.isfinite(keyed_b[s])
        )
        if len(common) >= 2:
            xa = np.array([keyed_a[s] for s in common], dtype=float)
            xb = np.array([keyed_b[s] for s in common], dtype=float)
            d = xa - xb
            sd = float(d.std(ddof=1))
            return Difference(
                float(d.mean()), sd / math.sqrt(len(d)), float(len(d) - 1), f"paired t ({len(d)} seeds)",
                len(d), len(d), sd, True,
            )  # fmt: skip
    xa, xb = _values(a), _values(b)
    estimate = float(xa.mean() - xb.mean()) if len(xa) and len(xb) else math.nan
    if len(xa) < 2 or len(xb) < 2:
        test = f"Welch t ({len(xa)}, {len(xb)} seeds)"
        return Difference(estimate, math.inf, 0.0, test, len(xa), len(xb), math.inf, False)
    va, vb = float(xa.var(ddof=1)), float(xb.var(ddof=1))
    se = math.sqrt(va / len(xa) + vb / len(xb))
    if se > 0:  # Welch-Satterthwaite
        df = (va / len(xa) + vb / len(xb)) ** 2 / (
            (va / len(xa)) ** 2 / (len(xa) - 1) + (vb / len(xb)) ** 2 / (len(xb) - 1)
        )
    else:
        df = float(len(xa) + len(xb) - 2)
    return Difference(
        estimate, se, df, f"Welch t ({len(xa)}, {len(xb)} seeds)", len(xa), len(xb), math.sqrt(va + vb), False
    )


@dataclass(frozen=True)
class Verdict:
    claim: str
    result: str  # starts with "holds", "does not hold" or "inconclusive"
    difference: Difference
    interval: Interval  # 95% two-sided interval of A - B ("better" oriented)
    margin: float | None  # the margin the relation uses (~: equivalence, >>: large), None for > and >=
    p_value: float  # the p-value that decided it (or the smaller of the two when inconclusive)
    power: str  # plain words: what these seeds can resolve, and what the observed difference would need

    def __str__(self) -> str:
        return self.result


def _resolvable(spread: float, n: int, paired: bool) -> float:
    """The smallest true difference a one-sided 5% test detects with 80% power at this spread and n."""
    if n < 2 or not math.isfinite(spread):
        return math.inf
    df = n - 1 if paired else 2 * n - 2
    se = spread / math.sqrt(n)
    return float((stats.t.ppf(1 - ALPHA, df) + stats.t.ppf(POWER, df)) * se)


def _seeds_needed(effect: float, spread: float, paired: bool, most: int = 1000) -> int | None:
    """Seeds per variant for a one-sided 5% test to detect ``effect`` with 80% power (None: over ``most``)."""
    if effect <= 0 or not math.isfinite(spread):
        return None
    if spread == 0:
        return MIN_SEEDS
    for n in range(2, most + 1):
        if _resolvable(spread, n, paired) <= effect:
            return max(n, MIN_SEEDS)
    return None


def _power_words(diff: Difference, relation: str, margin: float | None) -> str:
    n = min(diff.n_a, diff.n_b)
    if n < 2 or not math.isfinite(diff.spread):
        return "no spread can be estimated from fewer than 2 seeds"
    smallest = _resolvable(diff.spread, n, diff.paired)
    observed = abs(diff.estimate)
    if relation == "~":
        room = (margin or 0.0) - observed
        needed = _seeds_needed(room, diff.spread, diff.paired)
        target = f"equivalence within +-{margin:g} (observed {observed:.3g})"
    elif relation == ">>":
        room = abs(diff.estimate - (margin or 0.0))
        needed = _seeds_needed(room, diff.spread, diff.paired)
        target = f"the observed difference from the {margin:g} margin ({room:.3g})"
    else:
        needed = _seeds_needed(observed, diff.spread, diff.paired)
        target = f"the observed difference ({observed:.3g})"
    need = f"{needed} seeds" if needed is not None else "more than 1000 seeds (or no number of seeds)"
    return f"{n} seeds resolve differences of {smallest:.3g} or more; {target} would need {need} per variant"


def assess(
    a: Sample,
    b: Sample,
    relation: str,
    higher_is_better: bool = True,
    *,
    margin: float = 1.0,
    large_margin: float = 5.0,
    min_seeds: int = MIN_SEEDS,
    claim: str | None = None,
) -> Verdict:
    """The verdict on ``A relation B`` with everything a reader needs to check it (see the module doc)."""
    if relation not in RELATIONS:
        raise ValueError(f"unknown relation {relation!r}; use one of {', '.join(RELATIONS)}")
    if not higher_is_better:  # orient so that positive always means "A is better"
        a, b = b, a
    diff = difference(a, b)
    interval = diff.interval()
    used_margin = margin if relation in ("~", ">=") else (large_margin if relation == ">>" else None)
    claim = claim or f"A {relation} B"
    power = _power_words(diff, relation, used_margin)

    def done(result: str, p: float) -> Verdict:
        return Verdict(claim, result, diff, interval, used_margin, p, power)

    if min(diff.n_a, diff.n_b) < min_seeds:
        return done(f"inconclusive (fewer than {min_seeds} seeds)", 1.0)
    p_better, p_worse = diff.p_above(0.0), diff.p_below(0.0)
    p_equivalent = max(diff.p_above(-margin), diff.p_below(margin))  # TOST
    p_beyond = min(diff.p_above(margin), diff.p_below(-margin))
    if relation == ">":
        if p_better < ALPHA:
            return done("holds", p_better)
        if p_worse < ALPHA:
            return done("does not hold (B is better)", p_worse)
        return done("inconclusive", min(p_better, p_worse))
    if relation == "~":
        if p_equivalent < ALPHA:
            return done(f"holds (equivalent within +-{margin:g})", p_equivalent)
        if p_beyond < ALPHA:
            return done(f"does not hold (they differ by more than {margin:g})", p_beyond)
        return done("inconclusive", min(p_equivalent, p_beyond))
    if relation == ">=":
        if p_better < ALPHA:
            return done("holds (A is better)", p_better)
        if p_equivalent < ALPHA:
            return done(f"holds (equivalent within +-{margin:g})", p_equivalent)
        if p_worse < ALPHA:
            return done("does not hold (B is better)", p_worse)
        return done("inconclusive", min(p_better, p_equivalent, p_worse))
    p_large, p_not_large = diff.p_above(large_margin), diff.p_below(large_margin)
    if p_large < ALPHA:
        return done(f"holds (better by more than {large_margin:g})", p_large)
    if p_not_large < ALPHA:
        return done(f"does not hold (the difference is below {large_margin:g})", p_not_large)
    return done("inconclusive", min(p_large, p_not_large))


def verdict(a: Sample, b: Sample, relation: str, higher_is_better: bool = True, **options: float) -> str:
    """``assess(...).result``: "holds ...", "does not hold ..." or "inconclusive ..." for ``A relation B``."""
    return assess(a, b, relation, higher_is_better, **options).result
