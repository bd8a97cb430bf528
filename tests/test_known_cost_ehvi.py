"""The known-cost EHVI experiment (issue 60, tried and not kept): its closed-form improvement is the exact
expected hypervolume gain, and its replay charges epochs as the engine's replay does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import known_cost_ehvi, ridge_surrogate
from benchmarks.table import load_table
from dashboards.multiobjective import hypervolume
from tests.test_search_quality import _unseen_table


def test_the_closed_form_improvement_is_the_expected_hypervolume_gain_by_monte_carlo():
    """Against ``dashboards.multiobjective.hypervolume`` on samples of top-1, for candidates left of, inside
    and right of the front, and one past the reference (no gain)."""
    front = [(2.0, 60.0), (5.0, 70.0), (8.0, 80.0)]
    reference = (10.0, 50.0)
    flops = np.array([1.0, 3.0, 6.0, 9.0, 11.0])
    mean = np.array([62.0, 68.0, 75.0, 85.0, 90.0])
    sd = np.array([4.0, 3.0, 6.0, 2.0, 5.0])
    closed = known_cost_ehvi.expected_improvement(flops, mean, sd, known_cost_ehvi.staircase(front), reference)
    rng = np.random.default_rng(0)
    directions = ["min", "max"]
    base = hypervolume(np.array(front), directions, reference)
    for k in range(len(flops)):
        draws = rng.normal(mean[k], sd[k], 4000)
        gains = [hypervolume(np.array([*front, (flops[k], y)]), directions, reference) - base for y in draws]
        assert closed[k] == pytest.approx(np.mean(gains), rel=0.05, abs=0.05)
    assert closed[-1] == 0.0
    assert closed[0] > 0.0


def test_the_staircase_keeps_only_non_dominated_points_by_flops():
    points = [(5.0, 70.0), (2.0, 60.0), (3.0, 55.0), (5.0, 65.0), (8.0, 80.0), (9.0, 79.0)]
    assert known_cost_ehvi.staircase(points) == [(2.0, 60.0), (5.0, 70.0), (8.0, 80.0)]


def test_the_surrogate_recovers_an_additive_top1():
    """Bayesian ridge on one-hot parameters: an exactly additive top-1 is ranked right and predicted within a
    point from six observations of each configuration (the prior shrinks a little towards the mean)."""
    grid = np.array([[1, a == 0, a == 1, b == 0, b == 1] for a in (0, 1) for b in (0, 1)], dtype=float)
    x = np.tile(grid, (6, 1))
    y = 60 + 10 * x[:, 2] + 5 * x[:, 4]
    mean, sd = ridge_surrogate.fit_predict(x, y, grid)
    truth = 60 + 10 * grid[:, 2] + 5 * grid[:, 4]
    assert list(np.argsort(mean)) == list(np.argsort(truth))
    assert np.abs(mean - truth).max() < 1.0
    assert (sd > 0).all()


def test_a_replay_never_charges_more_than_its_budget_and_trains_each_configuration_once(tmp_path):
    table = load_table(_unseen_table(tmp_path / "unseen.csv"))
    for method in known_cost_ehvi.METHODS:
        run = known_cost_ehvi.replay(table, method, seed=3, workers=2, budget=len(table) * table.epochs)
        assert sorted(run.completed) == list(range(len(table)))
        assert run.completed_at == sorted(run.completed_at) and run.completed_at[-1] == len(table) * table.epochs
        short = known_cost_ehvi.replay(table, method, seed=3, workers=2, budget=30)
        assert short.completed_at and short.completed_at[-1] <= 30 and len(short.completed) < len(table)


def test_the_command_prints_both_methods_and_writes_per_seed_values(tmp_path, capsys):
    out = tmp_path / "ehvi.json"
    assert known_cost_ehvi.main(["--table", str(_unseen_table(tmp_path / "t.csv")), "--seeds", "3", "--workers", "2",
                                 "--json", str(out)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    for method in known_cost_ehvi.METHODS:
        assert f"| {method} |" in printed
        assert len(result["methods"][method]["99%"]["per_seed"]) == 3
    assert result["provenance"]["commit"]
    assert result["command"].startswith("python -m benchmarks.known_cost_ehvi --table ")


def test_bad_arguments_are_refused(tmp_path, capsys):
    assert known_cost_ehvi.main(["--table", str(tmp_path / "missing.csv"), "--seeds", "1"]) == 2
    assert known_cost_ehvi.main(["--table", str(_unseen_table(tmp_path / "t.csv")), "--seeds", "0"]) == 2
    assert "--seeds" in capsys.readouterr().err


def _ehvi_cells(result: dict) -> list[str]:
    ehvi, random = result["methods"]["known-cost-ehvi"], result["methods"]["random+spread"]
    return [known_cost_ehvi.cell(level) for level in (ehvi["95%"], ehvi["99%"], random["99%"])]


def _share_cells(result: dict) -> list[str]:
    share = result["methods"]["known-cost-share"]
    return [known_cost_ehvi.cell(share["95%"]), known_cost_ehvi.cell(share["99%"])]


@pytest.mark.parametrize(("directory", "cells"), [("known_cost_ehvi", _ehvi_cells), ("known_cost_share", _share_cells)])
def test_the_docs_rows_are_the_committed_results(directory, cells):
    """docs/benchmarks.md's known-cost EHVI and known-cost share tables: each committed JSON's medians and
    intervals, run from a committed tree."""
    root = Path(__file__).parents[1]
    doc = (root / "docs" / "benchmarks.md").read_text()
    committed = sorted((root / "benchmarks" / "results" / directory).glob("*.json"))
    assert {p.stem for p in committed} == {
        "coatnet-mnist5k", "coatnet-mnist5k-e32", "coatnet-mnist5k-n1000", "nas-bench-macro-cifar10"
    }  # fmt: skip
    for path in committed:
        result = json.loads(path.read_text())
        assert f"| `{path.stem}` | {' | '.join(cells(result))} |" in doc
        assert result["provenance"]["commit"] and not result["provenance"]["uncommitted_changes"]


def test_an_unknown_method_is_refused_by_name(tmp_path, capsys):
    out = tmp_path / "r.json"
    table = str(_unseen_table(tmp_path / "t.csv"))
    assert known_cost_ehvi.main(["--table", table, "--methods", "known-cost-share,thompson", "--json", str(out)]) == 2
    assert "--methods: unknown thompson" in capsys.readouterr().err
    assert not out.exists()

