"""One rule for numbers (issue 44, pattern 3): every float of a spec and of a trial config is finite,
wherever it sits; ``.inf`` and ``.nan`` are refused at load naming the key, exit 2, before anything runs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from search_space.validation import load_spec
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError

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


# The integer bound rule (issue 44 D15, D21, D22): every integer fits what consumes it (a seed numpy's
# RandomState, a 64-bit integer anywhere), every budget its documented maximum; refused at load naming
# the key and the limit, exit 2, nothing written.


@pytest.mark.parametrize(
    ("path", "value", "limit"),
    [
        ("search.seed", 2**128 + 1, "4294967295"),
        ("search.seed", 2**32, "4294967295"),
        ("search.seed", -1, "0"),
        ("search.concurrency", 10**12, "10000"),
        ("search.n_trials", 10**7, "1000000"),
        ("search.retries", 10**9, "100"),
        ("training.epochs", 10**29, "100,000"),
        ("training.steps", 10**10, "1,000,000,000"),
        ("data.train_size", 10**30, "1,000,000,000"),
        ("data.seed", 2**40, "4,294,967,295"),
        ("measure.repeats", 10**20, "10,000"),
    ],
)
def test_an_integer_above_what_consumes_it_is_refused_naming_the_key_and_the_limit(path, value, limit):
    with pytest.raises(ConfigError) as refused:
        load_spec(_with(path, value))
    assert refused.value.field == path and limit in str(refused.value), str(refused.value)


def test_an_integer_beyond_64_bits_is_refused_wherever_it_sits():
    with pytest.raises(ConfigError) as refused:
        load_spec(_with("params.depths[3]", {"int": [1, 10**30]}))
    assert refused.value.field == "params.depths[3]" and "64-bit" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        load_spec(_with("params.drop_path_rate", {"choice": [0.1, -(10**30)]}))
    assert refused.value.field.startswith("params.drop_path_rate") and "64-bit" in str(refused.value)
    with pytest.raises(ConfigError, match=r"seed: a trial's seed is an integer in 0\.\.4,294,967,295"):
        load_spec(_with("params.seed", {"int": [0, 2**40]}))


def test_a_trial_config_refuses_an_unbounded_budget_or_seed():
    base = {"model": "cait_tiny32", "data": {"name": "synthetic", "num_classes": 4}}
    for section, key, value, field in [
        ("training", "epochs", 10**29, "training.epochs"),
        ("training", "steps", 10**30, "training.steps"),
        (None, "seed", 2**64, "seed"),
        ("distributed", "workers", 10**12, "distributed.workers"),
    ]:
        config = copy.deepcopy(base)
        (config.setdefault(section, {}) if section else config)[key] = value
        with pytest.raises(ConfigError) as refused:
            load_trial_config(config)
        assert refused.value.field == field and "must be at most" in str(refused.value), str(refused.value)
    huge = copy.deepcopy(base)
    huge["data"]["image_size"] = 10**5000  # more digits than Python writes: named, never printed
    with pytest.raises(ConfigError) as refused:
        load_trial_config(huge)
    assert refused.value.field == "data.image_size" and len(str(refused.value)) < 200


@pytest.mark.parametrize(("key", "value"), [("seed", 2**128 + 1), ("concurrency", 10**12)])
def test_search_refuses_an_unbounded_integer_with_exit_2_and_writes_nothing(tmp_path, key, value):
    from click.testing import CliRunner

    from harness.cli import main

    spec = _with(f"search.{key}", value)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    store, results = tmp_path / "s.db", tmp_path / "results"
    result = CliRunner().invoke(
        main, ["search", str(path), "--store", f"sqlite:///{store}", "--results-dir", str(results)]
    )
    assert result.exit_code == 2, result.output
    assert f"search.{key}" in result.output and "Traceback" not in result.output
    assert not store.exists() and not results.exists()


def _run_cli(args):
    from click.testing import CliRunner

    from harness.cli import main

    result = CliRunner().invoke(main, args)
    lines = [line for line in result.output.splitlines() if line]
    return result, lines


LONG = "n" * 100_000  # a name longer than any file system's (ENAMETOOLONG)


def test_a_store_path_too_long_to_look_at_is_one_capped_line_naming_store_exit_2(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(QUICKSTART))
    result, lines = _run_cli(["search", str(spec), "--store", f"sqlite:///{tmp_path}/{LONG}.db",
                              "--results-dir", str(tmp_path / "results")])  # fmt: skip
    assert result.exit_code == 2, result.output[:500]
    (line,) = lines
    assert "--store" in line and "File name too long" in line and len(line) < 400, line[:500]
    assert not (tmp_path / "results").exists()


def test_a_results_dir_too_long_to_create_is_one_capped_line_exit_2(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(QUICKSTART))
    store = tmp_path / "s.db"
    result, lines = _run_cli(["search", str(spec), "--store", f"sqlite:///{store}",
                              "--results-dir", str(tmp_path / LONG)])  # fmt: skip
    assert result.exit_code == 2, result.output[:500]
    (line,) = lines
    assert "--results-dir" in line and len(line) < 400, line[:500]
    assert not store.exists()


def test_a_config_path_too_long_to_look_at_is_one_capped_line_exit_2(tmp_path):
    result, lines = _run_cli(["trial", f"{tmp_path}/{LONG}.yaml"])
    assert result.exit_code == 2, result.output[:500]
    (line,) = lines
    assert "File name too long" in line and len(line) < 400, line[:500]


def test_a_data_dir_too_long_to_look_at_is_refused_naming_the_key():
    spec = _with("data", {"name": "cifar10", "data_dir": f"/tmp/{LONG}"})
    with pytest.raises(ConfigError) as refused:
        load_spec(spec)
    assert refused.value.field == "data.data_dir" and len(str(refused.value)) < 400
