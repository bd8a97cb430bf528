"""The ``archsearch`` command line: the model catalogue."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from harness.cli import main
from trials.models import PRESETS


def test_models_json_lists_every_preset_with_params():
    result = CliRunner().invoke(main, ["models", "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == list(PRESETS)
    by_name = {r["name"]: r for r in rows}
    assert by_name["cait_xxs24"]["family"] == "cait"
    assert by_name["cait_xxs24"]["params"] == 11_956_264
    assert by_name["coatnet_0"]["params"] == 25_036_820
    assert by_name["coatnet_0"]["config"]["layout"] == "CCTT"


def test_models_table_and_family_filter():
    result = CliRunner().invoke(main, ["models", "--family", "coatnet"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].split()[:3] == ["name", "family", "image_size"]
    assert {line.split()[0] for line in lines[2:]} == {n for n, c in PRESETS.items() if c.family == "coatnet"}


def test_models_csv():
    result = CliRunner().invoke(main, ["models", "--format", "csv", "--family", "cait"])
    assert result.exit_code == 0
    assert result.output.splitlines()[0] == "name,family,image_size,settings,params_m"


def test_bad_format_is_a_usage_error():
    result = CliRunner().invoke(main, ["models", "--format", "yaml"])
    assert result.exit_code == 2
    assert "yaml" in result.output


def test_console_script_is_installed():
    exe = shutil.which("archsearch", path=str(Path(sys.executable).parent))
    assert exe, "the archsearch console script is not installed next to this Python"
    out = subprocess.run([exe, "models", "--format", "json", "--family", "cait"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert {r["family"] for r in json.loads(out.stdout)} == {"cait"}


TINY_TRIAL_YAML = """
model: {preset: cait_tiny32, depth: 2, embed_dim: 48, num_heads: 2}
data: {name: synthetic, num_classes: 4, train_size: 128, val_size: 64, batch_size: 32}
training: {epochs: 1, lr: 1.0e-3}
measure: {batch_size: 4, repeats: 2, warmup: 1}
"""


def test_trial_command_prints_json(tmp_path):
    path = tmp_path / "trial.yaml"
    path.write_text(TINY_TRIAL_YAML)
    result = CliRunner().invoke(main, ["trial", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["status"] == "completed"
    assert out["cost"]["params"] > 0 and out["cost"]["flops"] > 0
    assert [e["epoch"] for e in out["epochs"]] == [1]
    assert out["config"]["model"]["num_classes"] == 4


def test_trial_command_table(tmp_path):
    path = tmp_path / "trial.yaml"
    path.write_text(TINY_TRIAL_YAML)
    result = CliRunner().invoke(main, ["trial", str(path)])
    assert result.exit_code == 0, result.output
    assert "status: completed" in result.output and "train_loss" in result.output


def test_trial_command_shows_an_epoch_bar_with_loss_and_top1_on_stderr_only_when_asked(tmp_path):
    path = tmp_path / "trial.yaml"
    path.write_text(TINY_TRIAL_YAML.replace("epochs: 1", "epochs: 2"))
    shown = CliRunner().invoke(main, ["trial", str(path), "--format", "json", "--progress"])
    assert shown.exit_code == 0, shown.output
    out = json.loads(shown.stdout)  # the result on stdout stays JSON
    bar = shown.stderr.replace("\r", "\n").splitlines()
    last_epoch = out["epochs"][-1]
    assert any(line.startswith("trial: 100%") and " 2/2 " in line for line in bar), bar
    assert f"loss {last_epoch['train_loss']:.4g}  top1 {last_epoch['top1']:.1f}%" in shown.stderr
    assert any(line.startswith("epoch 2/2: ") for line in bar)  # each epoch's steps, under it
    # Not a terminal (CliRunner's stderr) and not asked: no bar; --no-progress: none either.
    for flags in ([], ["--no-progress"]):
        quiet = CliRunner().invoke(main, ["trial", str(path), "--format", "json", *flags])
        assert quiet.exit_code == 0 and quiet.stderr == "" and json.loads(quiet.stdout)["status"] == "completed"


def test_trial_command_bad_input_exits_2(tmp_path):
    bad_key = tmp_path / "bad.yaml"
    bad_key.write_text(TINY_TRIAL_YAML.replace("lr: 1.0e-3", "lr: -1"))
    result = CliRunner().invoke(main, ["trial", str(bad_key)])
    assert result.exit_code == 2
    assert "training.lr: must be > 0, got -1" in result.output
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [unclosed\n")
    result = CliRunner().invoke(main, ["trial", str(broken)])
    assert result.exit_code == 2 and "invalid YAML" in result.output
    result = CliRunner().invoke(main, ["trial", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2 and "not found" in result.output


def test_bench_json_has_the_documented_keys(tmp_path):
    model_yaml = tmp_path / "model.yaml"
    model_yaml.write_text("preset: coatnet_tiny32\nlayout: CTTT\n")
    args = ["bench", "cait_tiny32", str(model_yaml), "--batch-size", "4", "--repeats", "2", "--warmup", "1"]
    result = CliRunner().invoke(main, [*args, "--format", "json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == ["cait_tiny32", str(model_yaml)]
    for row in rows:
        assert {"name", "params", "flops", "throughput", "batch_size", "device"} <= set(row)
        assert row["batch_size"] == 4 and row["throughput"] > 0 and row["flops"] > 0
    assert rows[1]["family"] == "coatnet"


def test_bench_bad_input_exits_2(tmp_path):
    result = CliRunner().invoke(main, ["bench", "resnet50"])
    assert result.exit_code == 2 and "neither a preset" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("family: cait\nembed_dim: 100\nnum_heads: 8\n")
    result = CliRunner().invoke(main, ["bench", str(bad)])
    assert result.exit_code == 2 and "embed_dim: 100 is not divisible by num_heads 8" in result.output
