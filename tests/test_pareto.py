"""Pareto fronts and hypervolume: properties against brute force, exact known values, the CLI."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from dashboards.pareto import ParetoError, front_mask, hypervolume, hypervolume_progress, parse_objectives
from harness.cli import main
from harness.store import Store


def brute_force_front(values: np.ndarray, directions: list[str]) -> set[int]:
    """Indices of rows no other row dominates (at least as good everywhere, better somewhere)."""
    better = [(lambda a, b: a > b) if d == "max" else (lambda a, b: a < b) for d in directions]
    at_least = [(lambda a, b: a >= b) if d == "max" else (lambda a, b: a <= b) for d in directions]
    front = set()
    for i, row in enumerate(values):
        dominated = any(
            all(ge(other[k], row[k]) for k, ge in enumerate(at_least))
            and any(gt(other[k], row[k]) for k, gt in enumerate(better))
            for j, other in enumerate(values)
            if j != i
        )
        if not dominated:
            front.add(i)
    return front


small_ints = st.integers(min_value=0, max_value=6)  # few distinct values: ties and duplicates are common


@settings(max_examples=150, deadline=None, database=None)
@given(
    dims=st.integers(min_value=2, max_value=3),
    data=st.data(),
)
def test_front_equals_brute_force_with_ties_duplicates_and_statuses(dims, data):
    n = data.draw(st.integers(min_value=1, max_value=25))
    directions = data.draw(st.lists(st.sampled_from(["max", "min"]), min_size=dims, max_size=dims))
    values = np.array(data.draw(st.lists(st.lists(small_ints, min_size=dims, max_size=dims), min_size=n, max_size=n)))
    statuses = data.draw(
        st.lists(st.sampled_from(["completed", "completed", "pruned", "failed"]), min_size=n, max_size=n)
    )
    names = [f"m{k}" for k in range(dims)]
    frame = pd.DataFrame(values.astype(float), columns=names).assign(status=statuses)
    mask = front_mask(frame, dict(zip(names, directions, strict=True)))
    done = [i for i, s in enumerate(statuses) if s == "completed"]
    expected = {done[i] for i in brute_force_front(values[done], directions)} if done else set()
    assert set(np.flatnonzero(mask)) == expected


@settings(max_examples=100, deadline=None, database=None)
@given(data=st.data())
def test_hypervolume_matches_a_grid_count_and_ignores_dominated_points(data):
    dims = data.draw(st.integers(min_value=2, max_value=3))
    n = data.draw(st.integers(min_value=1, max_value=8))
    points = np.array(data.draw(st.lists(st.lists(small_ints, min_size=dims, max_size=dims), min_size=n, max_size=n)))
    reference = np.full(dims, 7.0)
    # Unit cells of [0, 7)^d dominated by some point (minimisation): exact on an integer grid.
    cells = 0
    for cell in itertools.product(range(7), repeat=dims):
        if any(all(p[k] <= cell[k] for k in range(dims)) for p in points):
            cells += 1
    assert hypervolume(points, ["min"] * dims, reference) == pytest.approx(cells)
    # Maximising the negated values is the same problem.
    assert hypervolume(-points, ["max"] * dims, -reference) == pytest.approx(cells)


def test_hypervolume_known_values():
    assert hypervolume(np.array([[1, 3], [2, 1]]), ["min", "min"], [4, 4]) == pytest.approx(7.0)
    assert hypervolume(np.array([[1, 1, 1]]), ["min"] * 3, [2, 3, 4]) == pytest.approx(6.0)
    two_boxes = np.array([[0, 0, 1], [1, 1, 0]])  # union of 2x2x1 and 1x1x2 boxes in a 2x2x2 reference
    assert hypervolume(two_boxes, ["min"] * 3, [2, 2, 2]) == pytest.approx(4 + 1 * 1 * 2 - 1 * 1 * 1)
    assert hypervolume(np.array([[80.0, 1e9]]), ["max", "min"], [0.0, 2e9]) == pytest.approx(80.0 * 1e9)
    assert hypervolume(np.array([[5, 5]]), ["min", "min"], [4, 4]) == 0.0  # outside the reference box


def test_hypervolume_progress_is_monotone_and_ends_at_the_front_volume():
    frame = pd.DataFrame(
        {
            "number": range(6),
            "status": ["completed", "failed", "completed", "pruned", "completed", "completed"],
            "top1": [50.0, None, 60.0, 70.0, 55.0, 40.0],
            "flops": [4.0, None, 6.0, 1.0, 3.0, 8.0],
        }
    )
    progress = hypervolume_progress(frame, {"top1": "max", "flops": "min"}, reference=[0.0, 10.0])
    assert progress["n_finished"].tolist() == [1, 2, 3, 4, 5, 6]
    assert progress["hypervolume"].is_monotonic_increasing
    done = frame[frame["status"] == "completed"]
    expected = hypervolume(done[["top1", "flops"]].to_numpy(), ["max", "min"], [0.0, 10.0])
    assert progress["hypervolume"].iloc[-1] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("top1:max", "2 or 3 objectives"),
        ("top1:up,flops:min", "direction 'up' of 'top1' must be max or min"),
        ("top1,flops:min", "is not METRIC:DIRECTION"),
        ("a:max,b:max,c:max,d:max", "2 or 3 objectives"),
        ("top1:max,top1:min", "objective 'top1' is given twice"),
        ("top1:max,flops:min,top1:max", "objective 'top1' is given twice"),
    ],
)
def test_bad_objectives(text, fragment):
    with pytest.raises(ParetoError, match=fragment):
        parse_objectives(text)


@pytest.fixture
def study_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    rows = [  # (status, layout, top1, flops)
        ("completed", "CCTT", 70.0, 5e6),
        ("completed", "CTTT", 72.0, 9e6),
        ("completed", "CCTT", 65.0, 3e6),
        ("completed", "CTTT", 60.0, 8e6),  # dominated
        ("pruned", "CCTT", 90.0, 1e6),  # would dominate everything, but it did not finish
        ("failed", "CTTT", None, None),
        ("infeasible", "CTTT", None, 9e9),
    ]
    with Store.open(url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max", "flops": "min"})
        store.create_study("empty", {}, {"top1": "max"})
        for number, (status, layout, top1, flops) in enumerate(rows):
            store.finish_trial(
                "s",
                number,
                status=status,
                config={"model": {"layout": layout, "depth": number}},
                measurement={"flops": flops, "params": 1000 + number} if flops else None,
                final={"top1": top1} if top1 is not None else None,
            )
    return url


def test_pareto_cli_json_agrees_with_the_store(study_store):
    result = CliRunner().invoke(
        main, ["pareto", "s", "--objectives", "top1:max,flops:min", "--store", study_store, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["number"] for r in rows] == [1, 0, 2]  # sorted by top1, best first
    assert rows[0] == {
        "study": "s",
        "number": 1,
        "top1": 72.0,
        "flops": 9e6,
        "config.model.layout": "CTTT",  # flat, as `trials --format json` writes it
        "config.model.depth": 1,
    }
    with Store.open(study_store, create=False) as store:
        trials = store.trials("s")
    done = trials[trials["status"] == "completed"].reset_index(drop=True)
    expected = {int(done["number"][i]) for i in brute_force_front(done[["top1", "flops"]].to_numpy(), ["max", "min"])}
    assert {r["number"] for r in rows} == expected


def test_pareto_cli_filters_and_counts(study_store):
    runner = CliRunner()
    result = runner.invoke(
        main, ["pareto", "s", "--objectives", "top1:max,flops:min", "--where", "layout=CCTT", "--store", study_store]
    )
    assert result.exit_code == 0, result.output
    assert "front of 2 from 3 trials" in result.output  # CCTT: 2 completed on the front + 1 pruned
    result = runner.invoke(
        main,
        [
            "pareto",
            "s",
            "--objectives",
            "top1:max,flops:min",
            "--where",
            "depth=2",
            "--store",
            study_store,
            "--format",
            "json",
        ],
    )
    assert [r["number"] for r in json.loads(result.output)] == [2]


def test_pareto_across_two_studies(study_store):
    with Store.open(study_store) as store:
        store.create_study("other-gpu", {}, {"top1": "max", "flops": "min"})
        store.finish_trial(
            "other-gpu",
            0,
            status="completed",
            config={"model": {"layout": "CCTT"}},
            measurement={"flops": 4e6},
            final={"top1": 71.0},
        )
    result = CliRunner().invoke(
        main,
        ["pareto", "s", "other-gpu", "--objectives", "top1:max,flops:min", "--store", study_store, "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    front = {(r["study"], r["number"]) for r in json.loads(result.output)}
    assert front == {("s", 1), ("other-gpu", 0), ("s", 2)}  # (s, 0) at 70 / 5e6 is now dominated


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["nope", "--objectives", "top1:max,flops:min"], "study 'nope' not found"),
        (["s", "--objectives", "accuracy:max,flops:min"], "unknown metric 'accuracy'"),
        (["s", "--objectives", "top1:up,flops:min"], "must be max or min"),
        (["empty", "--objectives", "top1:max,flops:min"], "has no trials yet"),
        (["s", "--objectives", "top1:max,flops:min", "--where", "colour=red"], "unknown filter key 'colour'"),
    ],
)
def test_pareto_cli_bad_input_exits_2_with_one_line(study_store, args, fragment):
    result = CliRunner().invoke(main, ["pareto", *args, "--store", study_store])
    assert result.exit_code == 2
    assert fragment in result.output
    assert len(result.output.strip().splitlines()) == 1


@settings(max_examples=100, deadline=None, database=None)
@given(data=st.data())
def test_incremental_hypervolume_progress_equals_the_hypervolume_of_every_prefix(data):
    """The one-pass progress equals recomputing the front's hypervolume for each prefix (the definition)."""
    dims = data.draw(st.integers(min_value=2, max_value=3))
    n = data.draw(st.integers(min_value=1, max_value=30))
    directions = data.draw(st.lists(st.sampled_from(["max", "min"]), min_size=dims, max_size=dims))
    values = np.array(
        data.draw(st.lists(st.lists(small_ints, min_size=dims, max_size=dims), min_size=n, max_size=n)), dtype=float
    )
    statuses = data.draw(
        st.lists(st.sampled_from(["completed", "completed", "pruned", "failed"]), min_size=n, max_size=n)
    )
    names = [f"m{k}" for k in range(dims)]
    objectives = dict(zip(names, directions, strict=True))
    frame = pd.DataFrame(values, columns=names).assign(status=statuses, number=range(n))
    reference = [-1.0 if d == "max" else 7.0 for d in directions]  # every point strictly inside
    progress = hypervolume_progress(frame, objectives, reference=reference)
    assert progress["n_finished"].tolist() == list(range(1, n + 1))
    for k in range(n):
        done = frame.iloc[: k + 1]
        done = done[done["status"] == "completed"]
        expected = hypervolume(done[names].to_numpy(), directions, reference) if len(done) else 0.0
        assert progress["hypervolume"].iloc[k] == pytest.approx(expected), k


def test_hypervolume_progress_follows_finish_order_and_skips_unfinished_trials():
    frame = pd.DataFrame(
        {
            "number": [0, 1, 2, 3],
            "status": ["completed", "completed", "running", "infeasible"],
            "ended_at": pd.to_datetime(["2026-01-01 10:00", "2026-01-01 09:00", None, "2026-01-01 08:00"]),
            "top1": [50.0, 60.0, 99.0, 99.0],
            "flops": [2.0, 1.0, 0.5, 0.5],
        }
    )
    progress = hypervolume_progress(frame, {"top1": "max", "flops": "min"}, reference=[0.0, 10.0])
    # Trial 1 finished first (60 x 9 = 540); trial 0 (50, 2) is then dominated; 2 and 3 never finished.
    assert progress["hypervolume"].tolist() == pytest.approx([540.0, 540.0])


@pytest.mark.parametrize("dims", [2, 3])
def test_hypervolume_progress_across_screening_blocks_matches_prefix_volumes(dims):
    """Thousands of trials (several screening blocks), with slowly improving fronts as in a real search."""
    rng = np.random.default_rng(dims)
    n = 3000
    drift = np.linspace(0.0, 1.0, n)[:, None]
    values = rng.random((n, dims)) + drift  # later trials tend to be better (maximised)
    statuses = rng.choice(["completed", "completed", "completed", "pruned", "failed"], size=n)
    names = [f"m{k}" for k in range(dims)]
    objectives = dict.fromkeys(names, "max")
    frame = pd.DataFrame(values, columns=names).assign(status=statuses, number=range(n))
    progress = hypervolume_progress(frame, objectives, reference=[0.0] * dims)
    for k in [0, 1, 511, 512, 513, 1024, 1999, n - 1]:
        done = frame.iloc[: k + 1]
        done = done[done["status"] == "completed"]
        expected = hypervolume(done[names].to_numpy(), ["max"] * dims, [0.0] * dims) if len(done) else 0.0
        assert progress["hypervolume"].iloc[k] == pytest.approx(expected, rel=1e-12), k


def test_plateau_check_measures_the_fronts_growth_over_the_window_against_a_reference_fixed_before_it():
    from dashboards.multiobjective import plateau_check

    directions = ["max", "min"]
    early = np.array([[50.0, 4.0], [60.0, 5.0], [70.0, 8.0]])
    assert plateau_check(early, directions, 3) is None  # nothing before the window yet
    flat = plateau_check(np.vstack([early, [[55.0, 6.0], [40.0, 9.0]]]), directions, 2)  # dominated: no growth
    assert flat.gain == 0.0 and flat.volume_before > 0
    # The reference lies 10% of each range beyond the worst of the trials before the window.
    assert flat.reference == pytest.approx((50.0 - 2.0, 8.0 + 0.4))
    grown = plateau_check(np.vstack([early, [[80.0, 3.0], [40.0, 9.0]]]), directions, 2)
    assert grown.gain > 0.5
    # A relative gain does not depend on the objectives' units.
    rescaled = plateau_check(np.vstack([early, [[80.0, 3.0], [40.0, 9.0]]]) * [1.0, 1e6], directions, 2)
    assert rescaled.gain == pytest.approx(grown.gain)
    one = plateau_check(np.array([[1.0], [2.0], [2.0], [2.5]]), ["max"], 2)  # best distance from the reference
    assert one.gain == pytest.approx((2.5 - 0.9) / (2.0 - 0.9) - 1)


def test_a_plateau_rule_the_budget_cannot_fill_is_refused_naming_the_key():
    from search_space.validation import load_spec
    from trials.configio import ConfigError

    spec = {
        "name": "p", "family": "cait", "base_model": "cait_tiny32", "objectives": {"top1": "max", "flops": "min"},
        "search": {"n_trials": 10, "stop": {"hypervolume_plateau": {"window": 10}}},
    }  # fmt: skip
    with pytest.raises(ConfigError) as error:
        load_spec(spec, check_paths=False)
    assert error.value.field == "search.stop.hypervolume_plateau.window" and "n_trials 10" in str(error.value)
    spec["search"] = {"n_trials": 10, "stop": {"max_hours": 0}}
    with pytest.raises(ConfigError) as error:
        load_spec(spec, check_paths=False)
    assert "search.stop.max_hours" in str(error.value)
