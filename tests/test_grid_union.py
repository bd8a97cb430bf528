"""``search.grid``: a grid search over a union of sub-grids (e.g. 30 seeds for two variants, 7 for
the rest), each point visited once, values checked against the params' domains."""

from __future__ import annotations

import optuna
import pytest

from harness.search.propose.samplers import TuneGridSampler, make_sampler
from search_space.sampling import discrete_space_size, grid_points, grid_space
from search_space.validation import load_spec
from trials.configio import ConfigError

SPEC = {
    "name": "g",
    "family": "cait",
    "base_model": {"preset": "cait_tiny32", "embed_dim": 32, "num_heads": 2, "depth": 1, "ca_depth": 1},
    "data": {"name": "synthetic", "train_size": 32, "val_size": 32},
    "variants": {"a": {"depth": 1}, "b": {"depth": 2}, "c": {"depth": 3}},
    "params": {"variant": {"choice": ["a", "b", "c"]}, "seed": {"choice": [0, 1, 2, 3, 4]}},
    "objectives": {"top1": "max"},
    "search": {
        "sampler": "grid",
        "n_trials": 9,
        "grid": [{"variant": ["a", "b"], "seed": [0, 1]}, {"variant": ["c"]}, {"variant": ["a"], "seed": [0]}],
    },
}


def _spec(**search):
    return load_spec({**SPEC, "search": {**SPEC["search"], **search}})


def test_the_grid_is_the_union_of_its_sub_grids_each_point_once():
    spec = _spec()
    points = grid_points(spec)
    expected = {("a", 0), ("a", 1), ("b", 0), ("b", 1), *(("c", s) for s in range(5))}
    assert {(p["variant"], p["seed"]) for p in points} == expected
    assert len(points) == len(expected) == discrete_space_size(spec) == 9  # ("a", 0) listed twice, run once
    whole = _spec(grid=None)
    assert len(grid_points(whole)) == discrete_space_size(whole) == 15  # without grid: the whole product


@pytest.mark.parametrize(
    ("grid", "key", "fragment"),
    [
        ([{"variant": ["a"], "seed": [7]}], "search.grid[0].seed", "7 is not in params.seed's domain"),
        ([{"variant": ["a"]}, {"depth": [1]}], "search.grid[1].depth", "is not a searched parameter"),
        ([{"variant": []}], "search.grid[0].variant", "non-empty list"),
    ],
)
def test_a_grid_point_outside_the_space_is_refused_naming_its_key(grid, key, fragment):
    with pytest.raises(ConfigError) as error:
        _spec(grid=grid)
    assert error.value.field == key and fragment in str(error.value)


def test_a_grid_with_another_sampler_is_refused():
    with pytest.raises(ConfigError, match=r"search\.sampler is 'tpe'") as error:
        _spec(sampler="tpe")
    assert error.value.field == "search.grid"


def test_the_sampler_visits_exactly_the_union_and_then_says_it_is_done():
    spec = _spec()
    sampler = make_sampler(spec)
    assert isinstance(sampler, TuneGridSampler) and sampler.size == 9
    study = optuna.create_study(sampler=sampler)
    space = grid_space(spec)
    seen = []
    while not sampler.all_started(study):
        trial = study.ask()
        seen.append(
            (trial.suggest_categorical("variant", space["variant"]), trial.suggest_categorical("seed", space["seed"]))
        )
        study.tell(trial, 0.0)
    assert sorted(seen) == sorted((p["variant"], p["seed"]) for p in grid_points(spec))
