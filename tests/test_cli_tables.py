"""What `pareto` and `trials` print: the study's own objectives by default, flat JSON/CSV rows in one
shape everywhere, the searched parameters always shown, and why a trial failed."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.store import Store

SPEC = {"name": "s", "params": {"embed_dim": {"choice": [32, 64]}, "depths[2]": {"int": [1, 3]}, "lr": {"fixed": 1}}}


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("s", SPEC, {"top1": "max", "flops": "min"})
        for number, (embed, top1, flops) in enumerate([(32, 50.0, 1e6), (64, 60.0, 2e6), (32, 40.0, 3e6)]):
            store.finish_trial(
                "s",
                number,
                status="completed",
                config={"model": {"embed_dim": embed, "depths": [2, 2, 3, 5, 2]}, "training": {"lr": 1e-3}},
                measurement={"flops": flops, "params": 1000},
                final={"top1": top1},
            )
        error = "RuntimeError: boom " * 20
        store.finish_trial("s", 3, status="failed", config={"model": {"embed_dim": 32}}, error=error)
    return url


def test_pareto_defaults_to_the_studys_objectives_and_shows_every_searched_parameter(url):
    result = CliRunner().invoke(main, ["pareto", "s", "--store", url])
    assert result.exit_code == 0, result.output
    header = result.output.splitlines()[0].split()
    assert header[:4] == ["study", "number", "top1", "flops"]
    assert "config.model.embed_dim" in header and "config.model.depths" in header  # same on the front, still shown
    assert "front of 2 from 4 trials" in result.output


def test_the_trials_table_never_hides_a_searched_parameter_the_rows_shown_agree_on(url):
    """``trials --sort top1 --limit 2``: the two best share ``depths`` (and ``embed_dim`` for the best
    one alone): both searched, both shown; the spec's fixed ``lr``, the same in every row, is no column."""
    for args in (["--sort", "top1", "--limit", "2"], ["--sort", "top1", "--limit", "1"], []):
        result = CliRunner().invoke(main, ["trials", "s", "--store", url, *args])
        assert result.exit_code == 0, result.output
        header = result.output.splitlines()[0].split()
        assert header[2:4] == ["config.model.embed_dim", "config.model.depths"], args
        assert "config.training.lr" not in header  # fixed by the spec, the same in every row


def test_pareto_and_trials_write_the_same_flat_json_shape(url):
    front = json.loads(CliRunner().invoke(main, ["pareto", "s", "--store", url, "--format", "json"]).output)
    trials = json.loads(CliRunner().invoke(main, ["trials", "s", "--store", url, "--format", "json"]).output)
    assert {r["number"] for r in front} == {0, 1}
    for rows in (front, trials):
        assert all("config" not in r and "config.model.embed_dim" in r for r in rows)
    assert front[0]["config.model.depths"] == [2, 2, 3, 5, 2]


def test_the_trials_table_says_why_a_trial_failed_in_a_few_words(url):
    result = CliRunner().invoke(main, ["trials", "s", "--store", url])
    assert result.exit_code == 0, result.output
    failed = next(line for line in result.output.splitlines() if " failed " in line)
    assert "RuntimeError: boom" in failed and failed.rstrip().endswith("...")


def test_trials_flags_a_stored_config_that_disagrees_with_its_spec(tmp_path):
    """A study written by an archsearch that dropped fixed values (issue 37): `trials` says which
    trials disagree with the spec and how, in a column and one warning line; a trial that agrees
    shows nothing, and its sampled and fixed values come back apart in JSON."""
    from search_space.sampling import build_trial_config, split_params
    from search_space.spec import SearchSpec

    spec = SearchSpec.model_validate(
        {
            "name": "old",
            "family": "cait",
            "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2},
            "data": {"name": "synthetic", "num_classes": 4},
            "params": {"depth": {"choice": [1, 2]}, "ca_depth": {"fixed": 1}, "mlp_ratio": 2.0},
            "objectives": {"top1": "max"},
        }
    )
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("old", spec.model_dump(mode="json"), {"top1": "max"})
        good = build_trial_config(spec, {"depth": 2})
        store.finish_trial("old", 0, status="completed", config=good, parameters=split_params(spec, {"depth": 2}))
        dropped = json.loads(json.dumps(good))
        dropped["model"].update(ca_depth=2, mlp_ratio=4.0)  # what the old searcher trained: the base's values
        store.finish_trial("old", 1, status="completed", config=dropped)

    table = CliRunner().invoke(main, ["trials", "old", "--store", url])
    assert table.exit_code == 0, table.output
    assert "warning: 1 of 2 trials shown do not match the study's spec" in table.stderr
    assert "trial 1: ca_depth: 2, the spec fixes 1; mlp_ratio: 4.0, the spec fixes 2.0" in table.stderr
    assert "spec_mismatch" in table.stdout.splitlines()[0]
    assert "fixed by the spec: ca_depth=1, mlp_ratio=2.0" in table.stdout

    rows = json.loads(CliRunner().invoke(main, ["trials", "old", "--store", url, "--format", "json"]).stdout)
    assert rows[0]["spec_mismatch"] == "" and rows[1]["spec_mismatch"].startswith("ca_depth: 2")
    assert (rows[0]["sampled.depth"], rows[0]["fixed.ca_depth"], rows[0]["fixed.mlp_ratio"]) == (2, 1, 2.0)
    assert rows[1]["fixed.ca_depth"] is None  # an older trial: no record of its parameters


def test_csv_and_json_keep_whole_number_columns_whole_even_with_a_missing_value(tmp_path):
    """Issue 61: ``trials --format csv`` wrote ``seed`` 1.0, ``params`` 156606.0, ``batch_size`` 32.0: a
    failed trial's missing values had made pandas turn those columns into floats. Stored integer
    columns, whole-number final metrics and integer config values round-trip as integers (a missing
    one empty or null); a float stays a float (top1 50.0, lr 0.002)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max", "flops": "min"})
        store.finish_trial(
            "s", 0, status="completed", seed=1,
            config={"seed": 1, "data": {"batch_size": 32}, "training": {"lr": 0.002}},
            measurement={"flops": 4_000_000, "params": 156_606, "batch_size": 32},
            final={"top1": 50.0, "epochs": 4, "steps": 188},
        )  # fmt: skip
        store.finish_trial("s", 1, status="failed", config={"training": {"lr": 0.001}}, error="boom")
    whole = ["seed", "params", "flops", "batch_size", "epochs", "steps", "config.seed", "config.data.batch_size"]
    for command in (["trials", "s"], ["pareto", "s"]):
        done = CliRunner().invoke(main, [*command, "--store", url, "--format", "csv"])
        assert done.exit_code == 0, done.output
        rows = {row["number"]: row for row in csv.DictReader(io.StringIO(done.stdout))}
        first = rows["0"]
        for column in [c for c in whole if c in first]:
            assert first[column].isdigit(), f"{command[0]}: {column}={first[column]!r}"
        assert first["config.data.batch_size"] == "32" and first["flops"] == "4000000"
        assert first["top1"] == "50.0"
        if "1" in rows:  # the failed trial (trials only: pareto shows the front)
            assert rows["1"]["seed"] == "" and rows["1"]["config.data.batch_size"] == ""
            assert rows["1"]["config.training.lr"] == "0.001"
    done = CliRunner().invoke(main, ["trials", "s", "--store", url, "--format", "json"])
    first, failed = json.loads(done.stdout)
    assert [type(first[c]) for c in whole] == [int] * len(whole), {c: first[c] for c in whole}
    assert failed["seed"] is None and failed["params"] is None and isinstance(first["top1"], float)


def test_csv_and_json_write_a_trials_facts_whole_and_a_missing_time_empty(tmp_path):
    """Review of issue 61: the facts of how a trial ran (``threads``, ``world_size``, ``data_workers``,
    ``measure_warmup``, ``compiled_graphs``, the flags ``cudnn_benchmark`` and ``compiled``), which the
    final record holds as floats, came out 4.0, 1.0, 0.0; an infeasible trial's ``started_at`` came out
    ``NaT``. Whole numbers are ints (a flag 0 or 1), a missing time empty in CSV and null in JSON; an
    accuracy or a loss stays a float even when whole, and a fraction stays a fraction."""
    facts = {"threads": 4.0, "world_size": 1.0, "data_workers": 0.0, "measure_warmup": 2.0,
             "compiled_graphs": 0.0, "cudnn_benchmark": 1.0, "compiled": 0.0}  # fmt: skip
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max", "flops": "min"})
        store.finish_trial(
            "s", 0, status="completed", config={"training": {"lr": 0.002}}, started_at=datetime.now(timezone.utc),
            measurement={"flops": 4_000_000, "params": 156_606, "throughput_shared": False},
            final={"top1": 50.0, "eval_loss": 2.0, "epochs": 4, "train_images_per_s": 812.5, **facts},
        )  # fmt: skip
        store.finish_trial("s", 1, status="infeasible", config={"training": {"lr": 0.001}}, error="too big")
    done = CliRunner().invoke(main, ["trials", "s", "--store", url, "--format", "csv"])
    assert done.exit_code == 0, done.output
    ran, infeasible = csv.DictReader(io.StringIO(done.stdout))
    assert {name: ran[name] for name in facts} == {name: str(int(value)) for name, value in facts.items()}
    assert (ran["top1"], ran["eval_loss"], ran["train_images_per_s"]) == ("50.0", "2.0", "812.5")
    assert ran["throughput_shared"] == "False" and ran["started_at"][:2] == "20"
    assert infeasible["started_at"] == "" and infeasible["threads"] == "" and infeasible["ended_at"] != ""
    done = CliRunner().invoke(main, ["trials", "s", "--store", url, "--format", "json"])
    ran, infeasible = json.loads(done.stdout)
    assert {name: ran[name] for name in facts} == {name: int(value) for name, value in facts.items()}
    assert all(type(ran[name]) is int for name in facts), {name: ran[name] for name in facts}
    assert isinstance(ran["top1"], float) and isinstance(ran["eval_loss"], float) and ran["throughput_shared"] is False
    assert infeasible["started_at"] is None and infeasible["threads"] is None
