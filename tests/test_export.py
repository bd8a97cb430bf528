"""``archsearch export STUDY NUMBER -o trial.yaml``: a stored trial as a trial YAML that
``archsearch trial`` trains again, the same model (params and FLOPs) on a budget of one's choice."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from conftest import tiny_search_spec

from harness.cli import main
from harness.search.worker.trainable import place_trial
from harness.store import Store
from search_space.sampling import build_trial_config
from search_space.validation import load_spec
from trials.config.trial_config import load_trial_config
from trials.runner import run_trial


def _trained_study(url: str, ranks: int = 1) -> dict:
    """A tiny study of one trial trained as a worker trains it (the spec's config, placed by
    ``place_trial``, run by ``run_trial``), stored with its measured cost and the placement it ran
    with; returns the stored measurement."""
    raw = tiny_search_spec("tiny")
    raw["params"] = {"depth": {"choice": [2]}}
    raw["training"] = {"epochs": 2, "lr": 1e-3}
    spec = load_spec(raw, check_paths=False)
    config = build_trial_config(spec, {"depth": 2})
    place_trial(config, spec.search.resources, 1.0)  # cpus, device: cpu, as on a CPU worker
    # (it blanks CUDA_VISIBLE_DEVICES as a Ray worker's would; conftest puts it back after the test)
    config["gpu_memory_fraction"] = 0.5  # what a packed GPU trial carries
    if ranks > 1:  # what place_trial gives a trial of search.resources.workers ranks (the store's config lacks it)
        config["distributed"] = {"workers": ranks}
    result = run_trial(load_trial_config(config))
    config.pop("distributed", None)
    assert result.status == "completed", result.error
    measurement = result.cost.to_dict()
    with Store.open(url) as store:
        store.create_study("tiny", spec.model_dump(mode="json"), dict(spec.objectives))
        store.finish_trial(
            "tiny",
            0,
            status="completed",
            config=config,
            measurement=measurement,
            final=result.final,
            epochs=[m.to_dict() for m in result.epochs],
        )
        store.finish_trial("tiny", 1, status="infeasible", config={}, error="flops above the limit")
        store.set_study_status("tiny", "completed")
    return {**measurement, "final": result.final}


def test_an_exported_trial_trains_the_same_model_on_the_budget_asked_for(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    stored = _trained_study(url)
    (tmp_path / "out").mkdir()
    output = tmp_path / "out" / "trial.yaml"
    output.write_text("an older export, replaced whole\n")
    runner = CliRunner()
    result = runner.invoke(main, ["export", "tiny", "0", "-o", str(output), "--epochs", "1", "--store", url])
    assert result.exit_code == 0, result.output
    assert f"written to {output}" in result.output
    assert [p.name for p in output.parent.iterdir()] == ["trial.yaml"]  # no temporary left
    text = output.read_text()
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert "trial 0 of study tiny (completed" in header[0] and f"params {stored['params']:,}" in header[0]
    assert "cpus, gpu_memory_fraction, device" in header[2]
    assert "1 epochs (the trial trained 2 epochs)" in header[3]
    exported = yaml.safe_load(text)
    assert not {"cpus", "gpu_memory_fraction", "device", "distributed"} & set(exported)
    assert exported["training"]["epochs"] == 1 and exported["model"]["depth"] == 2
    trained = runner.invoke(main, ["trial", str(output), "--format", "json"])
    assert trained.exit_code == 0, trained.output
    run = json.loads(trained.output[trained.output.index("{") :])
    assert run["status"] == "completed" and len(run["epochs"]) == 1
    assert (run["cost"]["params"], run["cost"]["flops"]) == (stored["params"], stored["flops"])


@pytest.mark.slow
def test_a_data_parallel_trial_exports_with_its_ranks_and_retrains_to_its_numbers(tmp_path):
    """Each rank of a data-parallel trial draws its own dropout and drop-path, so one process trains the same model
    to other numbers: the export said "placement: nothing was stored", left the ranks out, and its retrain missed
    the stored top-1 (10.7 against 10.0). It keeps ``distributed.workers`` and trains to the stored numbers."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    stored = _trained_study(url, ranks=2)
    assert stored["final"]["world_size"] == 2
    output = tmp_path / "trial.yaml"
    runner = CliRunner()
    result = runner.invoke(main, ["export", "tiny", "0", "-o", str(output), "--store", url])
    assert result.exit_code == 0, result.output
    text = output.read_text()
    assert "its 2 data-parallel ranks" in text and "nothing was stored" not in text
    assert yaml.safe_load(text)["distributed"] == {"workers": 2}
    trained = runner.invoke(main, ["trial", str(output), "--format", "json"])
    assert trained.exit_code == 0, trained.output
    run = json.loads(trained.output[trained.output.index("{") :])
    assert run["final"]["world_size"] == 2
    for key in ("top1", "train_loss", "eval_loss"):
        assert run["final"][key] == stored["final"][key], key


def test_steps_budget_and_the_errors_of_an_export(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("s", {"name": "s"}, {"top1": "max"})
        config = {"model": {"preset": "cait_tiny32", "depth": 1}, "training": {"epochs": 3, "steps": 7}}
        store.finish_trial("s", 0, status="completed", config=config)
        store.finish_trial("s", 1, status="infeasible", config={})
        store.finish_trial("s", 2, status="infeasible", config={"model": {"preset": "cait_tiny32", "depth": 9}})
        store.finish_trial("s", 3, status="failed", config={"model": {"preset": "no-such-preset"}})
    runner = CliRunner()

    def export(*args: str):
        return runner.invoke(main, ["export", *args, "--store", url])

    out = tmp_path / "t.yaml"
    assert export("s", "0", "-o", str(out), "--epochs", "2").exit_code == 0
    training = yaml.safe_load(out.read_text())["training"]
    assert training["epochs"] == 2 and "steps" not in training  # the stored step budget would win otherwise
    assert export("s", "0", "-o", str(out), "--steps", "5").exit_code == 0
    assert yaml.safe_load(out.read_text())["training"] == {"epochs": 3, "steps": 5}
    result = export("s", "2", "-o", str(out))  # infeasible but complete: exported, with a warning
    assert result.exit_code == 0 and "was infeasible" in result.output, result.output
    for args, said in (
        (("nope", "0"), "study 'nope' not found"),
        (("s", "9"), "study 's' has no trial 9"),
        (("s", "1"), "trial 1 of study 's' (infeasible) has no stored model config"),
        (("s", "3"), "its stored config no longer loads"),
        (("s", "0", "--epochs", "1", "--steps", "1"), "give one budget"),
    ):
        result = export(*args, "-o", str(tmp_path / "x.yaml"))
        assert result.exit_code == 2, result.output
        assert said in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "x.yaml").exists()
    result = export("s", "0", "-o", str(tmp_path / "missing" / "x.yaml"))
    assert result.exit_code == 2 and "cannot write" in result.output, result.output
