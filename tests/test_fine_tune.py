"""Fine-tuning a front member instead of retraining it (issue 45 item 7): ``search.keep_checkpoints:
front`` keeps the front's final weights when a study completes, ``archsearch export STUDY N --weights
W.pt`` writes them beside the trial YAML (``init_from``), and ``archsearch trial`` (``init_from:`` or
``--init-from``) starts the model from them, loaded strictly."""

from __future__ import annotations

import json
import os

import pytest
import ray
import torch
import yaml
from click.testing import CliRunner
from conftest import tiny_search_spec

from harness.cli import main
from harness.search.checkpoints import prune_checkpoints, trial_dirs
from harness.search.result_keys import NUMBER_KEY
from harness.search.worker.trainable import CHECKPOINT_FILE, load_checkpoint
from harness.store import Store
from search_space.validation import load_spec
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError
from trials.runner import run_trial

TINY_TRIAL = {
    "model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
    "data": {"name": "synthetic", "num_classes": 4, "train_size": 64, "val_size": 32, "batch_size": 32},
    "training": {"epochs": 1, "lr": 1e-2},
    "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
    "device": "cpu",
}
# A learning rate far below float32's resolution at the weights' scale: an epoch leaves them where they
# started, so what a trial starts from is read off its first evaluation and its weights after it.
STANDING_STILL = {"epochs": 1, "lr": 1e-12, "min_lr": 0.0, "weight_decay": 0.0}


def _weights_after(config: dict) -> tuple[dict[str, torch.Tensor], object]:
    """(the model's state dict after the trial's last epoch, the trial's result)."""
    seen: dict[str, torch.Tensor] = {}

    def keep(metrics, trainer) -> None:
        seen.clear()
        seen.update({k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()})

    result = run_trial(config, callback=keep, progress=False)
    assert result.status == "completed", result.error
    return seen, result


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 0.0) -> bool:
    return list(a) == list(b) and all(torch.allclose(a[k].float(), b[k].float(), rtol=0, atol=atol) for k in a)


def test_init_from_starts_the_model_from_the_weights_and_refuses_what_does_not_fit(tmp_path, monkeypatch):
    trained, first = _weights_after(TINY_TRIAL)
    (tmp_path / "run").mkdir()
    weights = tmp_path / "run" / "w.pt"
    torch.save(trained, weights)
    config = {**TINY_TRIAL, "training": STANDING_STILL, "init_from": "w.pt"}
    (tmp_path / "run" / "fine.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)  # not the YAML's directory: init_from is read relative to the YAML
    loaded = load_trial_config(tmp_path / "run" / "fine.yaml")
    assert loaded.init_from == str(weights)
    after, tuned = _weights_after(loaded)
    assert _same(after, trained, atol=1e-9)  # it started from the weights (and an lr of 1e-12 kept them)
    assert tuned.epochs[0].eval_loss == pytest.approx(first.epochs[-1].eval_loss, rel=1e-6)
    assert tuned.epochs[0].top1 == first.epochs[-1].top1
    assert (tuned.cost.params, tuned.cost.flops) == (first.cost.params, first.cost.flops)  # the same model
    scratch, _ = _weights_after({**TINY_TRIAL, "training": STANDING_STILL})
    assert not _same(scratch, trained, atol=1e-6)

    runner = CliRunner()
    ran = runner.invoke(main, ["trial", "run/fine.yaml", "--format", "json"])  # the CLI anchors it the same way
    assert ran.exit_code == 0, ran.output
    report = json.loads(ran.output[ran.output.index("{") :])
    assert report["config"]["init_from"] == str(weights)
    assert report["epochs"][0]["eval_loss"] == pytest.approx(first.epochs[-1].eval_loss, rel=1e-6)

    deeper = {**TINY_TRIAL, "model": {**TINY_TRIAL["model"], "depth": 2}}
    wider = {**TINY_TRIAL, "model": {**TINY_TRIAL["model"], "embed_dim": 48}}
    torch.save({"model": trained, "optimizer": {}, "epoch": 1}, tmp_path / "trainer.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    torch.save({**trained, "extra.weight": torch.zeros(2)}, tmp_path / "extra.pt")
    for trial, init_from, said in (
        (deeper, "run/w.pt", "parameter 'blocks.1.norm1.weight' is not in the file"),
        (wider, "run/w.pt", "parameter 'pos_embed' has shape (1, 64, 32) in the file, (1, 64, 48) in the model"),
        (TINY_TRIAL, "extra.pt", "the file has parameter 'extra.weight', which the model lacks"),
        (TINY_TRIAL, "trainer.pt", "a whole training checkpoint, not model weights"),
        (TINY_TRIAL, "junk.pt", "not a weights file torch loads with weights_only=True"),
        (TINY_TRIAL, "missing.pt", "no such file"),
    ):
        (tmp_path / "t.yaml").write_text(yaml.safe_dump(trial))
        result = runner.invoke(main, ["trial", "t.yaml", "--init-from", init_from])
        assert result.exit_code == 2, result.output
        assert "init_from" in result.output and said in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    with pytest.raises(ConfigError, match="init_from"):
        load_trial_config({**TINY_TRIAL, "init_from": ""})
    assert "init_from" not in load_trial_config(TINY_TRIAL).to_dict()  # a trial from scratch: as before


def _trial_dir(experiment, name: str, number: int | None, checkpoints: int = 1):
    directory = experiment / name
    directory.mkdir(parents=True)
    if number is not None:
        (directory / "params.json").write_text(json.dumps({NUMBER_KEY: number, "depth": 1}))
    for k in range(checkpoints):
        (directory / f"checkpoint_{k:06d}").mkdir()
        (directory / f"checkpoint_{k:06d}" / CHECKPOINT_FILE).write_bytes(b"x" * 10)
    return directory


def test_pruning_keeps_the_checkpoints_of_the_numbers_kept_read_from_params_json(tmp_path):
    """Ray's trial dir names say nothing of archsearch's numbers (a digest of the parameters, and
    Ray's own counter): the number is the one in the config Ray wrote into the dir."""
    experiment = tmp_path / "study"
    front = _trial_dir(experiment, "search_trainable_a1b2_00003_3_depth=1", 5)
    other = _trial_dir(experiment, "search_trainable_a1b2_00005_5_depth=2", 3)
    unknown = _trial_dir(experiment, "search_trainable_a1b2_00000_0_depth=1", None)
    outside = _trial_dir(tmp_path, "elsewhere", 5)
    (experiment / "linked").symlink_to(outside)  # never followed: neither read nor emptied
    assert trial_dirs(experiment) == {5: [front], 3: [other], None: [unknown]}
    assert prune_checkpoints(experiment, keep={5}) == 20
    assert [p.name for p in front.iterdir() if p.is_dir()] == ["checkpoint_000000"]
    assert not list(other.glob("checkpoint_*")) and not list(unknown.glob("checkpoint_*"))
    assert (other / "params.json").is_file()  # Ray's small state stays
    assert (outside / "checkpoint_000000" / CHECKPOINT_FILE).is_file()
    assert prune_checkpoints(experiment) == 10 and not list(front.glob("checkpoint_*"))


def test_export_weights_refusals_write_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    spec = load_spec(tiny_search_spec("s"), check_paths=False)
    with Store.open(url) as store:
        store.create_study("s", spec.model_dump(mode="json"), dict(spec.objectives))
        store.finish_trial("s", 0, status="completed", config={"model": {"preset": "cait_tiny32", "depth": 1}})
    runner = CliRunner()
    for args, said in (
        (["--weights", "-"], "the weights are binary"),
        (["--weights", "t.yaml"], "the extension .yaml does not match what is written"),  # and it is -o too
        (["--results-dir", "ray"], "--results-dir goes with --weights"),
        (["--weights", "w.pt"], "has no kept checkpoint under"),
        (["--weights", "w.pt", "--results-dir", "elsewhere"], "keep_checkpoints: front"),
    ):
        result = runner.invoke(main, ["export", "s", "0", "-o", "t.yaml", *args, "--store", url])
        assert result.exit_code == 2, result.output
        assert said in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not {"t.yaml", "w.pt", "ray", "ray_results", "elsewhere"} & {p.name for p in tmp_path.iterdir()}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_a_front_study_keeps_the_fronts_weights_and_a_trial_fine_tunes_from_them(local_ray, tmp_path, monkeypatch):
    from harness.search.driver import run_search

    raw = tiny_search_spec("ft", n_trials=3)
    raw["params"] = {"depth": {"choice": [1, 2, 3]}}
    # Costs alone decide this front: depth 1 dominates, whatever the one-epoch accuracies.
    raw["objectives"] = {"flops": "min", "params": "min"}
    raw["search"] = {**raw["search"], "sampler": "grid", "keep_checkpoints": "front"}
    url, results = f"sqlite:///{tmp_path / 'store.db'}", tmp_path / "ray"
    summary = run_search(load_spec(raw), url, results_dir=results)
    assert summary.status == "completed" and summary.counts["completed"] == 3
    with Store.open(url, create=False) as store:
        records = store.trial_records("ft")
    front = {int(n) for n in summary.front["number"]}
    (member,) = front
    assert records[member]["config"]["model"]["depth"] == 1 and len(records) == 3
    others = sorted(set(records) - front)

    # Only the front member's checkpoint is left; every trial dir (Ray's state) stays.
    experiment = results / "ft"
    dirs = [d for d in experiment.iterdir() if d.is_dir()]
    number_of = {d: json.loads((d / "params.json").read_text())[NUMBER_KEY] for d in dirs}
    assert sorted(number_of.values()) == sorted(records)
    kept = sorted(experiment.glob("*/checkpoint_*"))
    assert [number_of[k.parent] for k in kept] == [member]
    checkpoint = load_checkpoint(kept[0])
    assert checkpoint["epoch"] == 1  # the final epoch's: the trained weights

    out = tmp_path / "out"
    out.mkdir()
    runner = CliRunner()

    def export(number: int, *args: str):
        yaml_out = str(out / f"t{number}.yaml")
        return runner.invoke(main, ["export", "ft", str(number), "-o", yaml_out, *args, "--store", url])

    result = export(member, "--weights", str(out / "w.pt"), "--results-dir", str(results))
    assert result.exit_code == 0, result.output
    assert f"its final weights (epoch 1) to {out / 'w.pt'}" in result.output
    text = (out / f"t{member}.yaml").read_text()
    assert "Starts from the trial's final weights (after epoch 1)" in text
    exported = yaml.safe_load(text)
    assert exported["init_from"] == "w.pt"  # relative to the YAML: the two move together
    assert _same(torch.load(out / "w.pt", weights_only=True), checkpoint["model"])

    # Off the front: its weights are gone.
    refused = export(others[0], "--weights", str(out / "w_other.pt"), "--results-dir", str(results))
    assert refused.exit_code == 2 and len(refused.output.strip().splitlines()) == 1, refused.output
    assert f"trial {others[0]} of study 'ft' has no kept checkpoint" in refused.output
    assert "`search.keep_checkpoints: front`" in refused.output and "kept its Pareto front's alone" in refused.output
    assert not (out / "w_other.pt").exists() and not (out / f"t{others[0]}.yaml").exists()

    # The exported trial fine-tunes: it starts from the member's final weights, so its first
    # evaluation (an epoch at an lr that moves nothing) is the member's last; from scratch it ends elsewhere.
    still = {**exported, "training": {**exported["training"], **STANDING_STILL}}
    (out / "still.yaml").write_text(yaml.safe_dump(still))
    monkeypatch.chdir(tmp_path)
    last = records[member]["epochs"][-1]
    after, tuned = _weights_after(load_trial_config(out / "still.yaml"))
    assert _same(after, checkpoint["model"], atol=1e-9)
    assert tuned.epochs[0].top1 == last["top1"]
    assert tuned.epochs[0].eval_loss == pytest.approx(last["eval_loss"], rel=1e-6)
    assert (tuned.cost.params, tuned.cost.flops) == (
        records[member]["measurement"]["params"],
        records[member]["measurement"]["flops"],
    )
    scratch = {key: value for key, value in still.items() if key != "init_from"}
    (out / "scratch.yaml").write_text(yaml.safe_dump(scratch))
    from_scratch, _ = _weights_after(load_trial_config(out / "scratch.yaml"))
    assert not _same(from_scratch, checkpoint["model"], atol=1e-6)
    ran = runner.invoke(main, ["trial", "out/scratch.yaml", "--init-from", "out/w.pt", "--format", "json"])
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.output[ran.output.index("{") :])["epochs"][0]["eval_loss"] == pytest.approx(
        last["eval_loss"], rel=1e-6
    )

    # A deeper trial of the study does not take the member's weights: exit 2, naming the parameter.
    assert export(others[0]).exit_code == 0
    mismatched = runner.invoke(main, ["trial", str(out / f"t{others[0]}.yaml"), "--init-from", str(out / "w.pt")])
    assert mismatched.exit_code == 2 and len(mismatched.output.strip().splitlines()) == 1, mismatched.output
    assert "init_from" in mismatched.output and "parameter 'blocks.1." in mismatched.output
    assert os.path.isfile(out / "w.pt")
