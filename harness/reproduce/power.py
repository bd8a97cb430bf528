"""Seeds per variant from a power calculation: the paired two-sided t-test the verdicts use.

A claim ``A > B`` is decided on the per-seed differences A - B by a paired t-test (two-sided,
Holm-corrected over the study's claims, :mod:`harness.reproduce.analysis`). Before a study runs,
the number of seeds it needs follows from three things fixed in advance: the smallest difference
worth detecting, the expected seed-to-seed standard deviation of that per-seed difference, and the
level the test must clear. Holm's strictest step tests the smallest p-value at alpha / (number of
claims): a study powered there is powered for every claim Holm can decide first.

scipy is imported when a power is computed (the registry and the CLI stay light at start-up).
"""

from __future__ import annotations

import math

from trials.lazy import lazy_import

stats = lazy_import("scipy.stats")  # when a power is computed: the registry and the CLI stay light
integrate = lazy_import("scipy.integrate")

STUDY_ALPHA = 0.05  # the family-wise level every reproduction's verdicts hold
POWER = 0.8  # the power a pre-registered seed count is computed for
MOST_SEEDS = 1000  # the search stops here: a spread this large makes the study pointless


def holm_strictest(claims: int, alpha: float = STUDY_ALPHA) -> float:
    """The level Holm's first step tests the smallest p-value at: ``alpha`` / the number of claims."""
    if claims < 1:
        raise ValueError(f"a study needs at least one claim, got {claims}")
    return alpha / claims


def paired_t_power(seeds: int, difference: float, sd: float, alpha: float) -> float:
    """The power of a two-sided paired t-test at level ``alpha`` on ``seeds`` per-seed differences
    whose true mean is ``difference`` and standard deviation ``sd`` (noncentral t, both tails)."""
    if seeds < 2:
        return 0.0
    if sd <= 0 or not 0 < alpha < 1:
        raise ValueError(f"sd must be > 0 and alpha in (0, 1), got sd={sd!r}, alpha={alpha!r}")
    df = seeds - 1
    shift = difference / sd * math.sqrt(seeds)  # the noncentrality of the t statistic
    critical = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift))


def seeds_for(difference: float, sd: float, alpha: float, power: float = POWER) -> int:
    """The fewest seeds per variant (at least 2) at which the paired two-sided t-test detects
    ``difference`` with ``power`` at level ``alpha`` (see :func:`paired_t_power`)."""
    if difference <= 0:
        raise ValueError(f"the difference to detect must be > 0, got {difference!r}")
    for seeds in range(2, MOST_SEEDS + 1):
        if paired_t_power(seeds, difference, sd, alpha) >= power:
            return seeds
    raise ValueError(
        f"more than {MOST_SEEDS} seeds would be needed to detect {difference:g} at sd {sd:g}, alpha {alpha:g}"
    )


def paired_sd(run_sd: float, correlation: float = 0.0) -> float:
    """The standard deviation of a per-seed difference of two variants whose runs each vary by
    ``run_sd`` over seeds, correlated by ``correlation`` (0: independent, the conservative case;
    sharing a seed's split and data order can only make it positive)."""
    return run_sd * math.sqrt(2 * (1 - correlation))


def power_statement(difference: float, sd: float, claims: int, seeds: int, units: str = "points") -> str:
    """One sentence: the power at ``seeds`` at 5% and at Holm's strictest level over ``claims``."""
    strict = holm_strictest(claims)
    return (
        f"a paired two-sided t-test detects a difference of {difference:g} {units} (per-seed sd {sd:.3g}) "
        f"with {paired_t_power(seeds, difference, sd, STUDY_ALPHA):.0%} power at 5% and "
        f"{paired_t_power(seeds, difference, sd, strict):.0%} at Holm's strictest level "
        f"({strict:.3g}: {claims} claims) with {seeds} seeds"
    )


RELATIONS = (">", ">=", ">>", "~")


def claim_power(
    relation: str, difference: float, sd: float, seeds: int, alpha: float, margin: float, large_margin: float
) -> float:
    """The power of a claim's "holds" decision when the true per-seed difference A - B is ``difference``.

    As :mod:`dashboards.stats` decides it at the two-sided level ``alpha`` (Holm's step): each direction is a
    one-sided paired t-test at ``alpha / 2``; ``A > B`` against 0, ``A >= B`` against -``margin``, ``A >> B``
    against ``large_margin``, and ``A ~ B`` both one-sided tests of TOST within +-``margin`` (computed exactly,
    :func:`tost_power`, not as a t-test's power)."""
    if relation not in RELATIONS:
        raise ValueError(f"unknown relation {relation!r}; use one of {', '.join(RELATIONS)}")
    if seeds < 2:
        return 0.0
    if relation == "~":
        return tost_power(seeds, difference, sd, margin, alpha)
    df = seeds - 1
    threshold = {">": 0.0, ">=": -margin, ">>": large_margin}[relation]
    critical = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(critical, df, (difference - threshold) / sd * math.sqrt(seeds)))


def tost_power(seeds: int, difference: float, sd: float, margin: float, alpha: float) -> float:
    """The exact power of TOST (two one-sided paired t-tests at ``alpha / 2`` each) to show equivalence
    within +-``margin`` when the true difference is ``difference``: the probability that the mean lands
    within ``margin - t * s / sqrt(n)`` of 0 on both sides, integrated over the sample sd's chi-square law
    (the mean and the sd are independent under normality)."""
    n, df = seeds, seeds - 1
    critical = float(stats.t.ppf(1 - alpha / 2, df))
    se = sd / math.sqrt(n)
    # s = sd * sqrt(u / df) with u ~ chi2(df); the acceptance interval is empty once t * s / sqrt(n) >= margin
    u_max = df * (margin * math.sqrt(n) / (critical * sd)) ** 2

    def accepted(u: float) -> float:
        half = margin - critical * sd * math.sqrt(u / df) / math.sqrt(n)
        inside = stats.norm.cdf((half - difference) / se) - stats.norm.cdf((-half - difference) / se)
        return float(inside * stats.chi2.pdf(u, df))

    value, _ = integrate.quad(accepted, 0.0, u_max, limit=200)
    return float(min(max(value, 0.0), 1.0))


def seeds_for_claim(
    relation: str,
    difference: float,
    sd: float,
    alpha: float,
    margin: float,
    large_margin: float,
    *,
    power: float = POWER,
    most: int = MOST_SEEDS,
) -> int | None:
    """The fewest seeds (at least 2) at which :func:`claim_power` reaches ``power``; None when ``most``
    seeds do not (a true difference on the wrong side of the claim's threshold never gets there)."""
    for seeds in range(2, most + 1):
        if claim_power(relation, difference, sd, seeds, alpha, margin, large_margin) >= power:
            return seeds
    return None
