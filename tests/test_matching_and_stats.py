"""Matched-size layout allocation (CoAtNet's "comparable" models) and confidence intervals/verdicts."""

from __future__ import annotations

import math

import pytest

from dashboards.stats import assess, difference, mean_ci, t_critical, verdict
from search_space.cost_model import estimate_params
from search_space.matching import match_layouts
from trials.models import PRESETS, preset_parameter_count

LAYOUTS = ["CCCC", "CCCT", "CCTT", "CTTT", "VIT-REL"]


@pytest.mark.parametrize("base", ["coatnet_tiny32", pytest.param("coatnet_0", marks=pytest.mark.slow)])
def test_matched_layouts_have_parameter_counts_within_5_percent(base):
    matched = match_layouts(PRESETS[base], LAYOUTS)
    assert list(matched) == LAYOUTS
    counts = {layout: preset_parameter_count(config) for layout, config in matched.items()}  # the built models
    target = counts["CCTT"]
    for layout, count in counts.items():
        assert abs(count / target - 1) <= 0.05, (layout, count, target)
        assert count == estimate_params(matched[layout])
    assert matched["CCTT"] == PRESETS[base]  # the reference is kept as it is
    assert {config.layout for config in matched.values()} == set(LAYOUTS)


def test_t_critical_values():
    assert t_critical(1) == pytest.approx(12.7062, abs=1e-4)
    assert t_critical(4) == pytest.approx(2.7764, abs=1e-4)
    assert t_critical(10**6) == pytest.approx(1.96, abs=1e-3)
    assert t_critical(0.5) == math.inf


def test_mean_ci_known_values():
    ci = mean_ci([1.0, 2.0, 3.0])  # sd 1, se 1/sqrt(3), t(2) = 4.302653
    assert ci.mean == 2.0
    assert ci.high - ci.mean == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6) == ci.mean - ci.low
    ci = mean_ci([10.0, 12.0, 11.0, 13.0, 9.0])  # sd sqrt(2.5), t(4) = 2.776445
    assert ci.high - ci.mean == pytest.approx(2.776445 * math.sqrt(2.5) / math.sqrt(5), rel=1e-6)
    one = mean_ci([5.0])
    assert one.mean == 5.0 and one.low == -math.inf and one.high == math.inf


def test_welch_and_paired_intervals_equal_scipy():
    """The default interval is the 95% one (it matches the one-sided 2.5% tests of a two-sided 5% claim)."""
    from scipy import stats

    a, b = [20.0, 22.0, 24.0, 21.0], [10.0, 11.0, 12.0, 14.5]
    welch = difference(a, b)
    expected = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert welch.test.startswith("Welch") and not welch.paired
    assert (welch.interval().low, welch.interval().high) == pytest.approx((expected.low, expected.high), rel=1e-12)
    paired = difference(dict(enumerate(a)), dict(enumerate(b)))
    expected = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert paired.test == "paired t (4 seeds)" and paired.paired
    assert (paired.interval().low, paired.interval().high) == pytest.approx((expected.low, expected.high), rel=1e-12)
    # One-sided p-values are scipy's too.
    assert paired.p_above(0.0) == pytest.approx(stats.ttest_rel(a, b, alternative="greater").pvalue, rel=1e-12)
    assert welch.p_above(0.0) == pytest.approx(
        stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue, rel=1e-12
    )


def test_pairing_uses_the_common_seeds_and_removes_the_seed_effect():
    seed_effect = {0: 0.0, 1: 10.0, 2: -8.0, 3: 4.0, 4: -3.0}
    a = {s: 70.0 + e + 1.0 + 0.1 * s for s, e in seed_effect.items()}  # A beats B by ~1.2 on every seed
    b = {s: 70.0 + e for s, e in seed_effect.items()}
    assert verdict(a, b, ">").startswith("holds")  # paired: the seed-to-seed spread cancels
    assert verdict(list(a.values()), list(b.values()), ">") == "inconclusive"  # unpaired: drowned in it
    assert difference({**a, 9: 1.0}, b).test == "paired t (5 seeds)"  # seed 9 has no partner


def test_two_seeds_with_a_huge_spread_are_inconclusive_for_every_relation():
    a, b = {0: 10.0, 1: 90.0}, {0: 50.0, 1: 51.0}
    for relation in (">", "~", ">=", ">>"):
        assert verdict(a, b, relation) == "inconclusive (fewer than 3 seeds)"
        assert verdict(b, a, relation) == "inconclusive (fewer than 3 seeds)"


def test_verdicts_on_known_cases():
    same = {s: 80.0 + 0.1 * (s % 2) for s in range(5)}
    assert verdict(same, dict(same), "~") == "holds (equivalent within +-1)"  # identical within the margin
    assert verdict(same, dict(same), ">=").startswith("holds")
    assert verdict(same, dict(same), ">") == "inconclusive"
    high = {s: 90.0 + 0.3 * ((s * 7) % 3) for s in range(5)}  # clear, large, consistent: ~10 points
    low = {s: 80.0 + 0.2 * ((s * 5) % 3) for s in range(5)}
    assert verdict(high, low, ">") == "holds"
    assert verdict(high, low, ">>") == "holds (better by more than 5)"
    assert verdict(high, low, "~").startswith("does not hold")
    assert verdict(low, high, ">") == "does not hold (B is better)"
    assert verdict(low, high, ">=") == "does not hold (A is worse by more than 1)"
    small = {s: v + 2.0 for s, v in low.items()}  # better by 2: > holds, >> does not (below 5)
    assert verdict(small, low, ">") == "holds"
    assert verdict(small, low, ">>") == "does not hold (the difference is below 5)"
    assert verdict(small, low, ">>", large_margin=1.0).startswith("holds")
    loss_a, loss_b = {s: 0.5 + 0.01 * s for s in range(4)}, {s: 0.9 + 0.012 * s for s in range(4)}
    assert verdict(loss_a, loss_b, ">", higher_is_better=False) == "holds"  # lower loss is better
    with pytest.raises(ValueError, match="unknown relation"):
        verdict(high, low, "<")


def test_verdicts_say_how_they_were_reached_and_what_the_design_detects():
    a = {s: 71.0 + (s % 3) for s in range(5)}
    b = {s: 70.0 + ((s + 1) % 3) for s in range(5)}
    v = assess(a, b, ">", claim="A > B")
    assert v.result == "inconclusive" and v.difference.test == "paired t (5 seeds)"
    assert v.interval.low < v.difference.estimate < v.interval.high
    assert "5 seeds detect a true difference of" in v.power and "would need" not in v.power
    assert assess(a, b, "~", margin=3.0).margin == 3.0


def test_each_claim_is_a_two_sided_5_percent_test_and_its_interval_the_95_percent_one():
    from scipy import stats

    a = {s: 71.0 + (s % 3) + 0.1 * s for s in range(6)}
    b = {s: 70.0 + ((s + 1) % 3) for s in range(6)}
    v = assess(a, b, ">")
    d = [a[s] - b[s] for s in range(6)]
    low, high = stats.t.interval(0.95, 5, loc=sum(d) / 6, scale=stats.sem(d))
    assert (v.interval.low, v.interval.high) == pytest.approx((low, high), rel=1e-12)
    # the decision is exactly "the 95% interval clears 0": each direction one-sided at 2.5%
    assert (v.result == "holds") == (v.interval.low > 0)
    # a difference significant at 5% one-sided but not at 2.5% is inconclusive
    base = {s: 70.0 + s % 3 for s in range(8)}
    between = {s: base[s] + x for s, x in zip(range(8), (0.9, -0.6, 1.4, 0.1, 1.2, -0.3, 0.8, 0.4), strict=True)}
    one_sided = stats.ttest_rel(list(between.values()), list(base.values()), alternative="greater").pvalue
    assert 0.025 < one_sided < 0.05
    check = assess(between, base, ">")
    assert check.result == "inconclusive" and check.p_claim == pytest.approx(one_sided, rel=1e-12)
    assert check.p_two_sided == pytest.approx(2 * one_sided, rel=1e-12)


def test_non_inferiority_is_symmetric_to_greater_with_the_margin_as_threshold():
    base = {s: 80.0 + 0.2 * ((s * 3) % 4) for s in range(6)}
    slightly_worse = {s: v - 0.3 for s, v in base.items()}  # worse, but by less than the 1-point margin
    much_worse = {s: v - 3.0 for s, v in base.items()}
    assert verdict(slightly_worse, base, ">=").startswith("holds (not worse by 1")
    assert verdict(slightly_worse, base, ">") == "does not hold (B is better)"
    assert verdict(much_worse, base, ">=") == "does not hold (A is worse by more than 1)"
    assert verdict(much_worse, base, ">=", margin=5.0).startswith("holds")


def test_exact_sign_flip_p_values_beside_the_t_test():
    a = {s: 10.0 + s for s in range(5)}
    b = {s: 9.0 + s - 0.5 * (s % 2) for s in range(5)}  # every paired difference positive
    v = assess(a, b, ">")
    assert v.result == "holds" and v.p_exact == pytest.approx(1 / 32)  # only the all-positive pattern
    assert v.p_claim_exact == pytest.approx(1 / 32)
    assert assess([1.0, 2.0, 3.0], [0.0, 1.0, 1.5], ">").p_exact is None  # unpaired: no sign-flip test


def test_the_sign_flip_test_is_exact_up_to_16_seeds_and_a_seeded_draw_beyond():
    """Beyond 16 seeds (2^16 patterns) the sign-flip p-value is estimated from 2^18 random patterns
    with a fixed generator seed: the same digits on every machine, close to the exact value."""
    import numpy as np

    from dashboards.stats import sign_flip_p

    rng = np.random.default_rng(3)
    values = rng.normal(0.4, 1.0, size=16)
    exact = sign_flip_p(values)
    assert 0.0 < exact < 1.0
    many = rng.normal(0.5, 1.36, size=30)
    first, again = sign_flip_p(many), sign_flip_p(many)
    assert first == again  # recomputes to the same digits
    # against a large independent draw: the estimate's standard error is about sqrt(p(1-p)/2^18)
    signs = np.random.default_rng(99).integers(0, 2, size=(400_000, 30)) * 2.0 - 1.0
    reference = float(np.mean((signs * np.abs(many)).mean(axis=1) >= many.mean() - 1e-12))
    assert abs(first - reference) < 5 * math.sqrt(reference * (1 - reference) / (1 << 18)) + 1e-4
    all_positive = np.abs(many) + 0.1
    assert sign_flip_p(all_positive) == pytest.approx(1 / ((1 << 18) + 1))  # never 0: the observed one counts


def test_holm_adjusts_a_family_and_undoes_decisions_it_cannot_support():
    from dataclasses import replace

    from dashboards.stats import holm

    template = assess({s: 90.0 + s % 2 for s in range(5)}, {s: 80.0 + s % 2 for s in range(5)}, ">")
    # one-sided deciding p-values: Holm adjusts the two-sided ones (twice these)
    family = [replace(template, claim=c, p_value=p) for c, p in (("a", 0.005), ("b", 0.02), ("c", 0.015))]
    adjusted = holm(family)
    assert [v.p_adjusted for v in adjusted] == pytest.approx([0.03, 0.06, 0.06])
    assert adjusted[0].result == "holds"
    assert adjusted[1].result == "inconclusive after Holm (holds)" and adjusted[1].unadjusted == "holds"
    assert not adjusted[2].decided


def test_failure_rates_use_fishers_exact_test():
    from dashboards.stats import failure_rates

    comparison = failure_rates(0, 5, 5, 5)  # A never fails, B always does
    assert comparison.p_value == pytest.approx(1 / 252)
    assert failure_rates(2, 5, 2, 5).p_value > 0.5
