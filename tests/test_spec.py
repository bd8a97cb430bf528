"""Search-space specs: every shipped preset validates; errors name the key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from search_space.sampling import SpaceFunction, build_trial_config, cost_violations, grid_space
from search_space.validation import load_spec
from trials.configio import ConfigError

PRESETS = sorted((Path(__file__).parents[1] / "search_space" / "presets").glob("*.yaml"))


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_shipped_presets_validate(path):
    spec = load_spec(path, check_paths=False)  # the GPU presets name data directories of a cluster
    first = {name: domain.candidates()[0] for name, domain in spec.params.items()}
    config = build_trial_config(spec, first)
    cost, violations = cost_violations(spec, config)
    assert cost["flops"] > 0 and len(violations) == len(spec.constraints)


BASE = {
    "name": "q",
    "family": "cait",
    "base_model": "cait_tiny32",
    "objectives": {"top1": "max", "flops": "min"},
    "params": {"embed_dim": {"choice": [96, 192]}, "num_heads": 3, "depth": {"int": [2, 6]}},
}


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        (
            {"params": {"embed_dim": {"choice": [96, 192, 100]}, "num_heads": 8}},
            "params.embed_dim.choice[2]",
            "100 is not divisible by num_heads 8",
        ),
        ({"params": {"depth": {"int": [6, 2]}}}, "params.depth", "low 6 is above high 2"),
        ({"params": {"lr": {"float": [0, 1], "log": True}}}, "params.lr", "log-scaled float range needs low > 0"),
        ({"params": {"colour": {"choice": [1, 2]}}}, "params.colour", "unknown parameter"),
        ({"params": {"layout": {"choice": ["CCTT"]}}}, "params.layout", "unknown parameter for family cait"),
        ({"objectives": {"accuracy": "max"}}, "objectives", "unknown metric 'accuracy'"),
        ({"objectives": {"top1": "up"}}, "objectives.top1", "'max' or 'min'"),
        ({"constraints": ["top1 >= 50"]}, "constraints[0]", "cannot be checked before training"),
        ({"constraints": ["flops < lots"]}, "constraints[0]", "is not a constraint"),
        ({"search": {"sampler": "bayes"}}, "search.sampler", "'tpe', 'gp', 'botorch', 'nsga2', 'random' or 'grid'"),
        ({"search": {"n_trials": 0}}, "search.n_trials", "greater than or equal to 1"),
        ({"family": "resnet"}, "family", "'cait' or 'coatnet'"),
        ({"extra": 1}, "extra", "Extra inputs are not permitted"),
    ],
)
def test_spec_errors_name_the_key_path(changes, path, fragment):
    with pytest.raises(ConfigError) as excinfo:
        load_spec({**BASE, **changes})
    assert excinfo.value.field == path, str(excinfo.value)
    assert fragment in str(excinfo.value)


def test_per_stage_parameters_and_grid():
    spec = load_spec(
        {
            "name": "c",
            "family": "coatnet",
            "base_model": "coatnet_tiny32",
            "objectives": {"top1": "max"},
            "params": {"layout": {"choice": ["CCTT", "CTTT"]}, "depths[3]": {"int": [1, 3]}, "dims[4]": 256},
            "search": {"sampler": "grid"},
        }
    )
    config = build_trial_config(spec, {"layout": "CTTT", "depths[3]": 3, "dims[4]": 256})
    assert config["model"]["layout"] == "CTTT"
    assert config["model"]["depths"][3] == 3 and config["model"]["dims"][4] == 256
    assert grid_space(spec) == {"layout": ["CCTT", "CTTT"], "depths[3]": [1, 2, 3], "dims[4]": [256]}


def _checked_trial(spec_changes: dict, params: dict | None = None):
    """A trial of an in-memory Optuna study (``params`` enqueued) after the space function ran on it."""
    import optuna

    space = SpaceFunction(load_spec({**BASE, **spec_changes}))
    study = optuna.create_study(directions=["maximize"])
    if params:
        study.enqueue_trial(params)
    trial = study.ask()
    space(trial)
    return space, study._storage.get_trial(trial._trial_id)


def test_a_feasible_trial_without_constraints_costs_optuna_no_writes_beyond_its_params():
    space, frozen = _checked_trial({})
    assert frozen.user_attrs == {} and not any(k.startswith("constraints") for k in frozen.system_attrs)
    checked = space.checked.pop(frozen.number)  # handed to the searcher in memory
    assert checked.feasible and checked.cost["flops"] > 0 and checked.violations == []
    assert space.checked == {}


def test_an_infeasible_trial_tells_the_sampler_and_keeps_why_on_the_trial():
    largest = {"embed_dim": 192, "depth": 6}
    space, frozen = _checked_trial({"constraints": ["params <= 1e6"]}, largest)
    checked = space.checked[frozen.number]
    assert not checked.feasible and checked.violations[0] > 0 and checked.build_error is None
    assert any(k.startswith("constraints") for k in frozen.system_attrs)  # what Optuna's sampler reads
    assert frozen.user_attrs["constraints"] == checked.violations  # what optuna-dashboard shows
    assert frozen.user_attrs["estimated_cost"] == checked.cost

    smallest = {"embed_dim": 96, "depth": 2}
    space, frozen = _checked_trial({"constraints": ["params <= 1e6"]}, smallest)  # feasible: the values only
    assert space.checked[frozen.number].feasible and frozen.user_attrs == {}
    assert any(k.startswith("constraints") for k in frozen.system_attrs)
