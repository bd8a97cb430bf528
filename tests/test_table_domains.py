"""Ordinal replays (issue 60): a table's numeric parameters replayed as the int/float domains a user would write
(``benchmarks.table_domains``, ``benchmarks.search_quality --domains ordinal``), a proposal between two of the
table's values evaluated as the nearest row, in log space on a log domain."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import search_quality
from benchmarks.front_quality import TrueFront
from benchmarks.table import TableError, load_table
from benchmarks.table_domains import NearestRow, nearest, spec_params, user_domain
from harness.store import Store
from search_space.spec import ChoiceDomain, FloatDomain, IntDomain

ROOT = Path(__file__).parents[1]
OBJECTIVES = {"top1": "max", "flops": "min"}
WIDTHS, DEPTHS, RATES, KINDS = [8, 16, 32, 64], [1, 2, 3], [1e-3, 3e-3, 1e-2], ["a", "b"]


def _rows(config_id: int, params: dict, top1: float, flops: float, epochs: int = 2) -> list[dict]:
    return [{"config_id": config_id, "epoch": e, "top1": round(top1 * (0.6 if e < epochs else 1.0), 3),
             "epoch_s": 1.0 + flops / 1000, "flops": flops, "params": flops * 10, "throughput": 1.0, **params}
            for e in range(1, epochs + 1)]  # fmt: skip


def _ordinal_table(path: Path) -> Path:
    """width (8..64, geometric) x depth (1..3) x lr (1e-3, 3e-3, 1e-2: a rounded geometric grid) x kind: 72
    configurations, 2 epochs; top-1 grows with width and depth, is best at lr 3e-3, and kind a is ahead."""
    rows = []
    for config_id, (width, depth, lr, kind) in enumerate(itertools.product(WIDTHS, DEPTHS, RATES, KINDS)):
        top1 = 40 + 5 * WIDTHS.index(width) + 4 * depth - 6 * abs(RATES.index(lr) - 1) + 3 * (kind == "a")
        rows += _rows(config_id, {"width": width, "depth": depth, "lr": lr, "kind": kind}, top1, width * depth)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_each_column_gets_the_domain_a_user_would_write(tmp_path):
    """Read back from a CSV, as a replay reads it: arithmetic ints a step, geometric ones log, irregular ones the
    step that holds them all; floats log where geometric; booleans, strings and two values a choice."""
    columns = {
        "depth": [1, 2, 3, 4],  # arithmetic
        "stride": [2, 4, 6, 8],  # arithmetic, step 2
        "width": [32, 64, 128, 256],  # geometric
        "heads": [2, 4, 6, 10],  # irregular: gaps 2, 2, 4
        "blocks": [1, 2, 3, 5],  # irregular: gaps 1, 1, 2
        "lr": [1e-4, 3e-4, 1e-3, 3e-3],  # a rounded geometric grid
        "drop": [0.0, 0.1, 0.2, 0.3],  # arithmetic floats (0.0 reads back as the int 0)
        "flag": [True, False, True, False],
        "norm": ["bn", "ln", "gn", "bn"],
        "kernel": [3, 5, 3, 5],  # two values
    }
    rows = []
    for i in range(12):  # depth cycles with period 4 and lr with 4, the rest alongside: 12 distinct rows
        params = {name: values[(i + (i // 4 if name == "lr" else 0)) % 4] for name, values in columns.items()}
        rows += _rows(i, params, 50.0 + i, 100.0 + i)
    path = tmp_path / "columns.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    domains = spec_params(load_table(path), "ordinal")
    assert domains == {
        "depth": {"int": [1, 4]},
        "stride": {"int": [2, 8], "step": 2},
        "width": {"int": [32, 256], "log": True},
        "heads": {"int": [2, 10], "step": 2},
        "blocks": {"int": [1, 5]},
        "lr": {"float": [1e-4, 3e-3], "log": True},
        "drop": {"float": [0.0, 0.3]},
        "flag": {"choice": [False, True]},
        "norm": {"choice": ["bn", "gn", "ln"]},
        "kernel": {"choice": [3, 5]},
    }
    assert spec_params(load_table(path), "choice")["width"] == {"choice": [32, 64, 128, 256]}
    assert user_domain([1, 2, 5, 10]) == {"int": [1, 10], "log": True}  # the 1-2-5 grid: log
    assert user_domain([100, 110, 130]) == {"int": [100, 130], "step": 10}  # dense, uneven: linear
    assert user_domain([4, 5, 6]) == {"int": [4, 6]}  # arithmetic, however close its ratios
    assert user_domain([1, "a", 2]) == {"choice": [1, 2, "a"]}
    with pytest.raises(TableError, match="--domains"):
        spec_params(load_table(path), "ordered")


def test_a_value_between_two_rows_is_evaluated_as_the_nearer_one_in_log_space_on_a_log_domain(tmp_path):
    assert nearest([32, 64], 46, log=True) == 64 and nearest([32, 64], 46) == 32  # sqrt(32 * 64) = 45.25
    assert nearest([32, 64], 45, log=True) == 32
    assert nearest([3e-3, 1e-2], 6e-3, log=True) == 1e-2 and nearest([3e-3, 1e-2], 6e-3) == 3e-3
    assert nearest([2, 6, 10], 8) == 6 and nearest([2, 6, 10], 9) == 10  # a tie goes to the smaller
    assert nearest([2, 6, 10], 1) == 2 and nearest([2, 6, 10], 11) == 10 and nearest([2, 6, 10], 6) == 6
    table = load_table(_ordinal_table(tmp_path / "t.csv"))
    spec = search_quality.table_spec(table, "o", "tpe", 0, 2, OBJECTIVES, 0, domains="ordinal")
    rows = NearestRow(table, spec.params)
    proposal = {"width": 23, "depth": 2, "lr": 6e-3, "kind": "b"}  # width: 22.6 is the log midpoint of 16, 32
    assert rows.snapped(proposal) == {"width": 32, "depth": 2, "lr": 1e-2, "kind": "b"}
    assert rows.index(proposal) == table.index_of({"width": 32, "depth": 2, "lr": 1e-2, "kind": "b"})
    assert rows.index({**proposal, "kind": "c"}) is None  # a choice is never moved
    choices = search_quality.table_spec(table, "c", "tpe", 0, 2, OBJECTIVES, 0).params
    assert NearestRow(table, choices).index(proposal) is None  # under choice nothing moves: the table has no width 23


def test_an_ordinal_replay_runs_the_engine_and_evaluates_every_proposal_as_a_table_row(tmp_path):
    """The real engine (TPE after a spread) proposes widths and learning rates the table does not hold; each
    is priced and trained as its nearest row, every epoch of its stored curve that row's, and nothing crashes
    where two proposals land on one row (each is trained and charged)."""
    table = load_table(_ordinal_table(tmp_path / "t.csv"))
    spec = search_quality.table_spec(table, "o", "tpe", 0, 2, OBJECTIVES, 0, domains="ordinal")
    assert isinstance(spec.params["width"], IntDomain) and spec.params["width"].log
    assert isinstance(spec.params["lr"], FloatDomain) and spec.params["lr"].log
    assert isinstance(spec.params["depth"], IntDomain) and not spec.params["depth"].log
    assert isinstance(spec.params["kind"], ChoiceDomain)
    truth = TrueFront(table, OBJECTIVES)
    url = f"sqlite:///{tmp_path / 'replay.db'}"
    budget = 60
    run = search_quality.replay(table, truth, "tpe+spread", 0, 2, budget, url, domains="ordinal")
    assert 0 < run.spent <= budget + 2 * table.epochs and run.completed
    assert truth.curve(run).volume[-1] > 0
    rows = NearestRow(table, spec.params)
    with Store.open(url, create=False) as store:
        trials = store.trials("tpe+spread-0", flatten_config=False)
        curves = store.learning_curves("tpe+spread-0")
    trained = trials[trials["status"].isin(["completed", "pruned"])]
    assert len(trained) == len(run.completed) + len(run.pruned)
    off_table = 0
    indices = []
    for row in trained.itertuples(index=False):
        params = row.config["params"]
        index = rows.index(params)
        assert index is not None, params  # every evaluated configuration is a table row
        indices.append(index)
        off_table += table.index_of(params) is None
        curve = curves[curves["number"] == row.number].sort_values("epoch")
        assert curve["top1"].tolist() == table.top1[index, : len(curve)].tolist()  # the nearest row's epochs
    landed = len(indices) - len(set(indices))
    assert off_table > 0  # the test saw proposals between the table's values (floats: every lr)
    completed = [i for i, status in zip(indices, trained["status"], strict=True) if status == "completed"]
    assert sorted(run.completed) == sorted(completed)
    assert landed > 0  # proposals that landed on a row trained before were trained again (seed 0: 8 of 30)


def test_the_cli_records_the_domains_and_refuses_syne_tune_under_ordinal(tmp_path, capsys):
    path = _ordinal_table(tmp_path / "t.csv")
    out = tmp_path / "q.json"
    args = ["--table", str(path), "--methods", "random,tpe", "--seeds", "2", "--workers", "2", "--budget", "30"]
    assert search_quality.main([*args, "--domains", "ordinal", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["domains"] == "ordinal" and "--domains ordinal" in result["command"]
    assert result["search_space"]["width"] == {"int": [8, 64], "log": True}
    assert result["search_space"]["lr"] == {"float": [1e-3, 1e-2], "log": True}
    assert result["methods"]["tpe"]["nadir"]["epochs_to_95"]["seeds"] == 2
    bad = ["--methods", "random,syne-random", "--domains", "ordinal", "--json", str(tmp_path / "s.json")]
    assert search_quality.main([*args[:2], *bad]) == 2
    assert "Syne Tune" in capsys.readouterr().err and not (tmp_path / "s.json").exists()


def test_the_committed_tables_have_no_parameter_of_three_values_so_ordinal_replays_them_as_choices():
    """Every numeric parameter of the committed tables has two values: ``--domains ordinal`` changes nothing
    there (a comparison on them measures nothing of the domains; it needs a table with three values or more)."""
    for path in sorted((ROOT / "benchmarks" / "tables").glob("*.csv.gz")):
        table = load_table(path)
        assert spec_params(table, "ordinal") == spec_params(table, "choice"), path.name
