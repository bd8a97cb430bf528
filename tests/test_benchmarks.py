"""The benchmarks run as modules from the repository root, as the README shows, with no sys.path edits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
MODULES = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem not in ("__init__", "hostinfo", "steps"))


def test_every_benchmark_is_listed_here():
    assert MODULES == ["fronts", "gpu", "measure", "models", "search", "store"]


@pytest.mark.parametrize("name", MODULES)
def test_each_benchmark_starts_as_a_module_from_the_root(name):
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_no_benchmark_edits_sys_path():
    for path in (ROOT / "benchmarks").glob("*.py"):
        assert "sys.path.insert" not in path.read_text(), path.name


def test_the_shared_training_step_learns():
    """benchmarks.steps.train_step is what both the timm comparison and the GPU benchmark time."""
    import torch

    from benchmarks.steps import infer_step, train_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    images, labels = torch.randn(16, 3, 2, 2), torch.randint(0, 3, (16,))
    before = torch.nn.functional.cross_entropy(model(images), labels).item()
    step = train_step(model, images, labels, torch.float32, torch.device("cpu"))
    for _ in range(30):
        step()
    after = torch.nn.functional.cross_entropy(model(images), labels).item()
    assert after < before - 0.005  # lr 1e-4: small but real steps downhill
    infer_step(model, images, torch.float32, torch.device("cpu"))()
    assert not model.training


@pytest.mark.slow
def test_the_models_benchmark_by_default_is_a_quick_run_with_progress():
    """With no arguments it runs the quick setting (batch 2, 3 rounds) and prints a progress line
    with an estimate after each model; the table comes last."""
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.models", "--models", "cait_xxs24", "--modes", "infer", "--image-size", "64"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "batch=2" in result.stdout and "repeats=3 interleaved" in result.stdout
    assert "[1/1] cait_xxs24:" in result.stdout and "left" in result.stdout
    assert "ours_img_s" in result.stdout
