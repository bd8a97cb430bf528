"""One rule for numbers (issue 44, pattern 3): every float of a spec and of a trial config is finite,
wherever it sits; ``.inf`` and ``.nan`` are refused at load naming the key, exit 2, before anything runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from search_space.validation import load_spec
from trials.configio import ConfigError
from trials.trial_config import load_trial_config

ROOT = Path(__file__).parents[1]
QUICKSTART = yaml.safe_load((ROOT / "search_space" / "presets" / "quickstart.yaml").read_text())


def _with(path: str, value):
    spec = copy.deepcopy(QUICKSTART)
    node = spec
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return spec


@pytest.mark.parametrize(
    "path",
    ["training.lr", "training.weight_decay", "search.resources.cpus", "search.early_stopping.reduction_factor",
     "search.stop.max_hours", "measure.warmup_s", "data.val_fraction"],
)  # fmt: skip
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_number_anywhere_in_a_spec_is_refused_naming_its_key(path, value):
    with pytest.raises(ConfigError) as refused:
        load_spec(_with(path, value))
    assert refused.value.field == path and "finite" in str(refused.value)


def test_a_non_finite_choice_is_refused_with_its_index():
    with pytest.raises(ConfigError) as refused:
        load_spec(_with("params.lr", {"choice": [1e-3, float("inf")]}))
    assert refused.value.field.startswith("params.lr") and "finite" in str(refused.value)


def test_a_trial_config_refuses_non_finite_numbers_too():
    config = {"model": "cait_tiny32", "data": {"name": "synthetic", "num_classes": 4}, "training": {"lr": float("nan")}}
    with pytest.raises(ConfigError) as refused:
        load_trial_config(config)
    assert refused.value.field == "training.lr"


def test_a_grid_too_large_to_enumerate_is_refused_before_any_point_is_built():
    """8.7 * 10^9 grid points used to write the study and die with MemoryError; an int range of 10^12
    would have been listed whole. The count is computed, and refused above the documented bound,
    before any point is built (a spec whose grid would take all memory is checked in microseconds)."""
    from search_space.sampling import MAX_GRID_POINTS, grid_size
    from search_space.spec import SearchSpec
    from search_space.validation import check_grid

    spec = _with("search.sampler", "grid")
    spec["search"].pop("early_stopping", None)
    spec["params"] = {"depths[3]": {"int": [1, 10**12]}, "dims[4]": {"choice": [64, 128]}}
    parsed = SearchSpec.model_validate(spec)
    assert grid_size(parsed) == 2 * 10**12
    with pytest.raises(ConfigError) as refused:
        check_grid(parsed)
    assert refused.value.field == "search.sampler" and f"{MAX_GRID_POINTS:,}" in str(refused.value)
    spec["params"] = {"depths[3]": {"int": [1, 3]}, "dims[4]": {"choice": [64, 128]}}
    check_grid(SearchSpec.model_validate(spec))  # a small grid passes


def test_a_grid_over_a_float_range_is_refused_at_load_not_after_the_study_is_written():
    spec = _with("search.sampler", "grid")
    spec["search"].pop("early_stopping", None)
    spec["params"] = {"depths[3]": {"int": [1, 3]}, "lr": {"float": [1e-4, 1e-2]}}
    with pytest.raises(ConfigError) as refused:
        load_spec(spec)
    assert refused.value.field == "params.lr" and "grid" in str(refused.value)
