"""Matched-size layout allocation (CoAtNet's "comparable" models) and confidence intervals/verdicts."""

from __future__ import annotations

import math

import pytest

from dashboards.stats import difference_ci, mean_ci, t_critical, verdict
from search_space.cost_model import estimate_params
from search_space.matching import match_layouts
from trials.models import PRESETS, preset_parameter_count

LAYOUTS = ["CCCC", "CCCT", "CCTT", "CTTT", "VIT-REL"]


@pytest.mark.parametrize("base", ["coatnet_tiny32", "coatnet_0"])
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
    assert ci.half_width == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    ci = mean_ci([10.0, 12.0, 11.0, 13.0, 9.0])  # sd sqrt(2.5), t(4) = 2.776445
    assert ci.half_width == pytest.approx(2.776445 * math.sqrt(2.5) / math.sqrt(5), rel=1e-6)
    one = mean_ci([5.0])
    assert one.mean == 5.0 and one.low == -math.inf and one.high == math.inf


def test_welch_difference_known_value():
    a, b = (
        [20.0, 22.0, 24.0],
        [10.0, 11.0, 12.0],
    )  # var 4 and 1, n 3: se sqrt(5/3), df = (5/3)^2 / ((4/3)^2/2 + (1/3)^2/2)
    ci = difference_ci(a, b)
    df = (5 / 3) ** 2 / ((4 / 3) ** 2 / 2 + (1 / 3) ** 2 / 2)
    assert ci.mean == pytest.approx(11.0)
    assert ci.half_width == pytest.approx(t_critical(df) * math.sqrt(5 / 3), rel=1e-6)


def test_verdicts_follow_from_the_intervals():
    high, low, same = [80.0, 81.0, 82.0], [70.0, 71.0, 72.0], [80.5, 81.5, 81.0]
    assert verdict(high, low, ">") == "holds"
    assert verdict(low, high, ">") == "does not hold"
    assert verdict(high, same, ">") == "inconclusive"
    assert verdict(high, same, "~") == "holds"
    assert verdict(high, low, "~") == "does not hold"
    assert verdict(same, high, ">=") == "holds"
    assert verdict(low, high, ">=") == "does not hold"
    assert verdict([0.5, 0.6, 0.55], [0.9, 1.0, 0.95], ">", higher_is_better=False) == "holds"  # a loss
    with pytest.raises(ValueError, match="unknown relation"):
        verdict(high, low, ">>")
