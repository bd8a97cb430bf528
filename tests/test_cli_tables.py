"""What `pareto` and `trials` print: the study's own objectives by default, flat JSON/CSV rows in one
shape everywhere, the searched parameters always shown, and why a trial failed."""

from __future__ import annotations

import json
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
