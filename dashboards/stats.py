"""Verdicts on the papers' claims that a referee accepts: paired seeds, two-sided 5% tests, margins, Holm.

Every claim is decided by a two-sided test at the 5% level on the difference A - B of a metric
over seeds, oriented so that positive means "A is better": each relation has a "holds" and a
"does not hold" direction, symmetric to each other, and each direction is a one-sided t-test at
2.5% (``ALPHA / 2``), so that the claim as a whole errs at most 5% of the time whichever way the
truth lies:

* ``A > B``   holds if A - B > 0 is significant; does not hold if A - B < 0 is.
* ``A >= B``  non-inferiority with ``margin``: holds if A - B > -margin is significant; does not
  hold if A - B < -margin is (A is worse by more than the margin).
* ``A ~ B``   equivalence within +-``margin`` (TOST: both one-sided tests) holds; does not hold if
  a difference beyond the margin, either way, is significant.
* ``A >> B``  holds if A - B > ``large_margin`` is significant; does not hold if A - B < ``large_margin`` is.

Anything else is inconclusive: absence of evidence is never agreement; with fewer than
``min_seeds`` seeds per variant every verdict is "inconclusive (fewer than 3 seeds)". **Paired
design**: when both samples are keyed by seed (a seed gives every variant the same data order and
split), differences are per seed (paired t); otherwise the samples are independent (Welch). The
interval reported is the **95%** two-sided t-interval, the one that matches one-sided 2.5% tests
and TOST (a decision is exactly "the 95% interval clears the threshold"). Beside the t-test, the
**sign-flip** p-value of the same one-sided hypothesis, which assumes no normality: exact (all 2^n
sign patterns) up to :data:`EXACT_UP_TO` paired seeds, else from :data:`SIGN_FLIP_DRAWS` random
patterns with a fixed generator seed (so it recomputes to the same digits). With n seeds it cannot
go below 1/2^n. **Power** is stated as the design's: the smallest true difference these seeds
detect with 80% power at the spread seen, never "the seeds that would decide it" (a post-hoc
figure that only restates the p-value). **Multiplicity**: :func:`holm` adjusts a study's family of
claims (Holm's step-down on each claim's two-sided p-value, twice the deciding one-sided one); a
decision whose adjusted p-value reaches 5% becomes inconclusive. :func:`failure_rates` compares
how often two variants fail to learn (Fisher's exact test), for runs that must be counted, never
averaged away.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

ALPHA = 0.05  # each claim a two-sided test at 5%: each of its two directions one-sided at ALPHA / 2
SIDE_ALPHA = ALPHA / 2
CONFIDENCE = 1 - 2 * SIDE_ALPHA  # 0.95: the two-sided interval that matches one-sided 2.5% tests and TOST
POWER = 0.8  # for the "smallest difference these seeds detect" statement
EXACT_UP_TO = 16  # paired seeds: up to this, the sign-flip p-value enumerates every pattern
SIGN_FLIP_DRAWS = 1 << 18  # beyond it, this many random patterns (generator seed SIGN_FLIP_SEED)
SIGN_FLIP_SEED = 0
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
    per_seed: tuple[float, ...] = ()  # the paired differences A - B, one per common seed

    def interval(self, confidence: float = CONFIDENCE) -> Interval:
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

    def exact_p(self, threshold: float, above: bool) -> float | None:
        """Sign-flip permutation p-value of H1: A - B > threshold (``above``) or < threshold.

        Under H0 each per-seed difference from the threshold is as likely negative as positive, so
        all 2^n sign patterns are equally likely; the p-value is the share whose mean is at least
        as extreme as the observed one: every pattern up to EXACT_UP_TO seeds, else SIGN_FLIP_DRAWS
        random ones (the observed pattern counted among them, so it is never 0). Paired designs only.
        """
        if not self.paired or not self.per_seed:
            return None
        return sign_flip_p(np.asarray(self.per_seed, dtype=float) - threshold, above)


def sign_flip_p(centred: np.ndarray, above: bool = True) -> float:
    """The sign-flip p-value of "the per-seed values ``centred`` have a mean above 0" (``above``) or below."""
    centred = centred if above else -centred
    observed = centred.mean()
    magnitude = np.abs(centred)
    if len(centred) <= EXACT_UP_TO:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(centred))))
        return float(np.mean((signs * magnitude).mean(axis=1) >= observed - 1e-12))
    rng = np.random.default_rng(SIGN_FLIP_SEED)
    hits, done = 0, 0
    while done < SIGN_FLIP_DRAWS:
        chunk = min(1 << 14, SIGN_FLIP_DRAWS - done)
        signs = rng.integers(0, 2, size=(chunk, len(centred))) * 2.0 - 1.0
        hits += int(np.sum((signs * magnitude).mean(axis=1) >= observed - 1e-12))
        done += chunk
    return (hits + 1) / (done + 1)


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
                len(d), len(d), sd, True, tuple(float(x) for x in d),
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
    interval: Interval  # 95% two-sided interval of A - B ("better" oriented): matches the 2.5% one-sided tests
    margin: float | None  # the margin the relation uses (~ and >=: margin, >>: large margin), None for >
    p_value: float  # the one-sided t-test p-value that decided it (the smaller direction's when inconclusive)
    power: str  # plain words: the smallest difference these seeds detect with 80% power
    p_exact: float | None = None  # the sign-flip p-value of the same one-sided hypothesis (paired designs)
    p_adjusted: float | None = None  # after Holm over the study's family of claims (see holm), two-sided
    unadjusted: str | None = None  # the result before Holm, where Holm changed it
    p_claim: float | None = None  # one-sided t-test p of the claim's own direction ("holds"); TOST's for ~
    p_claim_exact: float | None = None  # the sign-flip p-value of that direction

    @property
    def p_two_sided(self) -> float:
        """The claim's two-sided p-value: twice the deciding one-sided one (what Holm adjusts)."""
        return min(1.0, 2 * self.p_value)

    @property
    def decided(self) -> bool:
        return not self.result.startswith("inconclusive")

    def __str__(self) -> str:
        return self.result


def _resolvable(spread: float, n: int, paired: bool) -> float:
    """The smallest true difference a one-sided 2.5% test (one direction of a two-sided 5% claim)
    detects with 80% power at this spread and n."""
    if n < 2 or not math.isfinite(spread):
        return math.inf
    df = n - 1 if paired else 2 * n - 2
    se = spread / math.sqrt(n)
    return float((stats.t.ppf(1 - SIDE_ALPHA, df) + stats.t.ppf(POWER, df)) * se)


def _power_words(diff: Difference) -> str:
    n = min(diff.n_a, diff.n_b)
    if n < 2 or not math.isfinite(diff.spread):
        return "no spread can be estimated from fewer than 2 seeds"
    smallest = _resolvable(diff.spread, n, diff.paired)
    return f"{n} seeds detect a true difference of {smallest:.3g} or more with 80% power (at the spread seen)"


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
    power = _power_words(diff)

    if relation == "~":
        p_claim = max(diff.p_above(-margin), diff.p_below(margin))  # TOST
        exact_low, exact_high = diff.exact_p(-margin, True), diff.exact_p(margin, False)
        p_claim_exact = None if exact_low is None or exact_high is None else max(exact_low, exact_high)
    else:
        claim_threshold = {">": 0.0, ">=": -margin, ">>": large_margin}[relation]
        p_claim, p_claim_exact = diff.p_above(claim_threshold), diff.exact_p(claim_threshold, True)

    def done(result: str, p: float, threshold: float | None = None, above: bool = True) -> Verdict:
        exact = None if threshold is None else diff.exact_p(threshold, above)
        return Verdict(
            claim, result, diff, interval, used_margin, p, power, exact,
            p_claim=p_claim, p_claim_exact=p_claim_exact,
        )  # fmt: skip

    if min(diff.n_a, diff.n_b) < min_seeds:
        return done(f"inconclusive (fewer than {min_seeds} seeds)", 1.0)
    if relation == "~":
        p_low, p_high = diff.p_above(-margin), diff.p_below(margin)
        p_equivalent = max(p_low, p_high)  # TOST
        p_above, p_below = diff.p_above(margin), diff.p_below(-margin)
        if p_equivalent < SIDE_ALPHA:
            weaker = (-margin, True) if p_low >= p_high else (margin, False)
            return done(f"holds (equivalent within +-{margin:g})", p_equivalent, *weaker)
        if min(p_above, p_below) < SIDE_ALPHA:
            side = (margin, True) if p_above <= p_below else (-margin, False)
            return done(f"does not hold (they differ by more than {margin:g})", min(p_above, p_below), *side)
        return done("inconclusive", min(p_equivalent, p_above, p_below))
    threshold = {">": 0.0, ">=": -margin, ">>": large_margin}[relation]
    p_holds, p_fails = diff.p_above(threshold), diff.p_below(threshold)
    if p_holds < SIDE_ALPHA:
        why = {">": "", ">=": f" (not worse by {margin:g} or more)", ">>": f" (better by more than {large_margin:g})"}
        return done("holds" + why[relation], p_holds, threshold, True)
    if p_fails < SIDE_ALPHA:
        why = {
            ">": " (B is better)",
            ">=": f" (A is worse by more than {margin:g})",
            ">>": f" (the difference is below {large_margin:g})",
        }
        return done("does not hold" + why[relation], p_fails, threshold, False)
    return done("inconclusive", min(p_holds, p_fails))


def holm(verdicts: Sequence[Verdict], alpha: float = ALPHA) -> list[Verdict]:
    """Holm's step-down adjustment over a family of claims (one study's), in the given order.

    Each verdict's two-sided p-value (:attr:`Verdict.p_two_sided`) is adjusted: sorted ascending,
    the i-th smallest of m is multiplied by (m - i + 1), made monotone, capped at 1. A decision
    ("holds" or "does not hold") whose adjusted p-value is not below ``alpha`` becomes
    "inconclusive after Holm"; the result before the adjustment is kept in ``unadjusted``. Claims
    that could not be tested (fewer seeds) stay in the family, with p = 1, so that dropping them
    cannot make the others easier to pass.
    """
    m = len(verdicts)
    order = sorted(range(m), key=lambda i: verdicts[i].p_two_sided)
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * verdicts[i].p_two_sided))
        adjusted[i] = running
    out = []
    for v, p in zip(verdicts, adjusted, strict=True):
        if v.decided and p >= alpha:
            out.append(replace(v, result=f"inconclusive after Holm ({v.result})", p_adjusted=p, unadjusted=v.result))
        else:
            out.append(replace(v, p_adjusted=p))
    return out


@dataclass(frozen=True)
class FailureComparison:
    """How often two variants failed to learn, and Fisher's exact test of "A fails less often than B"."""

    failed_a: int
    runs_a: int
    failed_b: int
    runs_b: int
    p_value: float  # one-sided: A's failure rate is lower than B's


def failure_rates(failed_a: int, runs_a: int, failed_b: int, runs_b: int) -> FailureComparison:
    """Fisher's exact test (one-sided) on the 2x2 table of failed / learned runs of A and B."""
    table = [[failed_a, runs_a - failed_a], [failed_b, runs_b - failed_b]]
    _, p = stats.fisher_exact(table, alternative="less")
    return FailureComparison(failed_a, runs_a, failed_b, runs_b, float(p))


def verdict(a: Sample, b: Sample, relation: str, higher_is_better: bool = True, **options: float) -> str:
    """``assess(...).result``: "holds ...", "does not hold ..." or "inconclusive ..." for ``A relation B``."""
    return assess(a, b, relation, higher_is_better, **options).result
