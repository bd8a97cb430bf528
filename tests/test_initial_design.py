"""``search.initial_spread``: the first trials at evenly spaced quantiles of the cost priced before
training (issue 32, item 5), feasible and distinct, and the first the searcher dispatches."""

from __future__ import annotations

import numpy as np
import optuna

from harness.search.propose import initial_design
from harness.search.propose.samplers import make_sampler
from harness.search.propose.searcher import ArchsearchSearch
from harness.search.result_keys import split_tune_config
from harness.store import Store
from search_space.sampling import SpaceFunction, build_trial_config, cost_violations
from search_space.validation import load_spec

SPEC = {
    "name": "spread",
    "family": "coatnet",
    "base_model": "coatnet_tiny32",
    "params": {
        "layout": {"choice": ["CCCC", "CCTT", "CTTT"]},
        "depths[3]": {"int": [1, 3]},
        "dims[3]": {"choice": [64, 96, 128]},
        "drop_path_rate": {"float": [0.0, 0.2]},
        "mlp_ratio": 2.0,
    },
    "objectives": {"top1": "max", "flops": "min"},
    "constraints": ["flops <= 1.0e7"],
    "search": {"sampler": "tpe", "n_trials": 20, "seed": 3, "initial_spread": 5},
}


def test_the_spread_is_feasible_distinct_and_runs_from_the_cheapest_to_the_dearest_of_the_space():
    spec = load_spec(SPEC)
    chosen = initial_design.spread(spec, SpaceFunction(spec), 5)
    assert len(chosen) == 5 and len({str(sorted(p.items())) for p in chosen}) == 5
    costs = [cost_violations(spec, build_trial_config(spec, p)) for p in chosen]
    flops = [cost["flops"] for cost, _ in costs]
    assert flops == sorted(flops) and all(v <= 0 for _, violations in costs for v in violations)
    # the ends of the sampled range: nothing in a fresh random sample of the space is cheaper
    rng = np.random.default_rng(99)
    sample = [initial_design.random_params(spec, rng) for _ in range(200)]
    cheapest = min(cost_violations(spec, build_trial_config(spec, p))[0]["flops"] for p in sample)
    assert flops[0] <= cheapest * 1.05
    assert "mlp_ratio" not in chosen[0]  # fixed values are the spec's, not enqueued


def test_the_searcher_dispatches_the_spread_first(tmp_path):
    spec = load_spec(SPEC)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store.open(url).create_study("spread", spec.model_dump(mode="json"), dict(spec.objectives))
    searcher = ArchsearchSearch(spec, url, "spread", optuna.storages.RDBStorage(url), make_sampler(spec))
    expected = initial_design.spread(spec, SpaceFunction(spec), 5)
    assert initial_design.apply(searcher, spec, spec.name, quiet=True) == 5
    for i, params in enumerate(expected):
        _, _, dispatched = split_tune_config(searcher.suggest(f"t{i}"))
        assert {k: dispatched[k] for k in params} == params


def test_no_cost_objective_means_no_spread():
    spec = load_spec({**SPEC, "objectives": {"top1": "max", "throughput": "max"}})
    assert initial_design.cost_objective(spec) is None and initial_design.spread(spec, SpaceFunction(spec), 5) == []


def test_the_default_spread_is_eight_or_half_the_trials_where_fewer():
    """Issue 46: no 32-trial gate (forced on at 16-24 trials the spread reached 95% on 20/20 seeds); the
    sampler keeps at least half of a small search."""
    base = {k: v for k, v in SPEC.items() if k != "search"}
    def planned(**search):
        return initial_design.planned_spread(load_spec({**base, "search": {"sampler": "tpe", **search}}))
    assert planned(n_trials=32) == planned(n_trials=16) == initial_design.DEFAULT_SPREAD == 8
    assert [planned(n_trials=n) for n in (15, 10, 3, 1)] == [7, 5, 1, 0]
    assert planned(n_trials=64, initial_spread=3) == 3 and planned(n_trials=64, initial_spread=0) == 0
    # A grid needs discrete params (a float range is refused at load, issue 44): the grid never spreads.
    discrete = {name: d for name, d in base["params"].items() if not (isinstance(d, dict) and "float" in d)}
    grid = load_spec({**base, "params": discrete, "search": {"sampler": "grid", "n_trials": 64}})
    assert initial_design.planned_spread(grid) == 0
    no_cost = load_spec({**base, "objectives": {"top1": "max", "throughput": "max"}, "search": {"n_trials": 64}})
    assert initial_design.planned_spread(no_cost) == 0


def test_the_spread_takes_evenly_spaced_quantiles_of_the_priced_candidates():
    """The candidates sorted by cost (equal costs in the order drawn), the cheapest and the dearest
    included; cost twins may take two places (the twin-aware rule was measured worse, issue 46)."""
    priced = [(1.0, {"w": 1, "lr": "a"}), (1.0, {"w": 1, "lr": "b"}), (1.0, {"w": 1, "lr": "c"}),
              (2.0, {"w": 2, "lr": "a"}), (2.0, {"w": 2, "lr": "b"}), (3.0, {"w": 3, "lr": "a"})]  # fmt: skip
    # positions 0, 2.5 -> 2 (round half to even), 5: two twins of the cheapest cost, and the dearest
    assert initial_design.pick(priced, 3) == [{"w": 1, "lr": "a"}, {"w": 1, "lr": "c"}, {"w": 3, "lr": "a"}]
    assert initial_design.pick(priced, 6) == [params for _, params in priced]
    assert initial_design.pick(priced, 8) == [params for _, params in priced]  # at most every candidate
    assert initial_design.pick([priced[5], priced[1], priced[0]], 2) == [priced[1][1], priced[5][1]]
    assert initial_design.pick(priced, 0) == [] and initial_design.pick([], 3) == []
