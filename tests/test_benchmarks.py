"""The benchmarks run as modules from the repository root, as the README shows, with no sys.path edits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
# used by benchmarks, not run
LIBRARIES = (
    "__init__", "browser", "hostinfo", "steps", "table", "table_domains", "search_quality_syne", "front_quality",
    "ridge_surrogate",
)  # fmt: skip
MODULES = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem not in LIBRARIES)


def test_every_benchmark_is_listed_here():
    assert MODULES == [
        "blind_oracle",
        "compile_cache",
        "dataloader",
        "fidelity_tables",
        "fronts",
        "gpu",
        "gpu_search_check",
        "known_cost_ehvi",
        "loader_rate",
        "measure",
        "models",
        "paired_seeds",
        "public_tables",
        "report_page",
        "search",
        "search_quality",
        "store",
        "syne_moasha_bug",
        "table_export",
    ]


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


def test_the_search_benchmark_ratios_are_archsearch_over_plain_tune_and_tune_with_optunas_rdb():
    from benchmarks.search import _marginal, overhead_ratios

    rows = [
        {"c": 1, "runner": "archsearch", "x": 1, "marg_x": 1, "fixed_x": 1},
        {"c": 1, "runner": "tune", "x": 1.4, "marg_x": 4.5, "fixed_x": 1.2},
        {"c": 1, "runner": "tune+rdb", "x": 1.05, "marg_x": 1.08, "fixed_x": 1.1},
        {"c": 1, "runner": "optuna", "x": 400, "marg_x": 100, "fixed_x": 9},
    ]
    assert overhead_ratios(rows) == {
        "c1": {
            "ratio_total": 1.4, "ratio_marginal": 4.5, "ratio_fixed": 1.2,
            "ratio_total_rdb": 1.05, "ratio_marginal_rdb": 1.08, "ratio_fixed_rdb": 1.1,
        }
    }  # fmt: skip
    # 10 trials, one at a time, ending 1 s apart after the first; a 0.25 s body, 2 s of first-body cost:
    run = {"wall": 15.0, "ends": [5.0 + i for i in range(10)]}
    split = _marginal(run, 10, 1, body=0.25, first_body=2.0)
    assert split["marginal"] == pytest.approx(0.75) and split["fixed"] == pytest.approx(15.0 - 2.0 - 10 * 1.0)


@pytest.mark.slow
def test_the_search_benchmark_writes_its_table_and_ratios_as_json(tmp_path):
    import json

    out = tmp_path / "search.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.search", "--quick", "--skip-main", "--concurrency", "1", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["c1"]) == {
        "ratio_total", "ratio_marginal", "ratio_fixed", "ratio_total_rdb", "ratio_marginal_rdb", "ratio_fixed_rdb",
    }  # fmt: skip
    archsearch = next(row for row in report["overhead"] if row["runner"] == "archsearch")
    assert archsearch["done"] == 4 and archsearch["first_body_s"] > 0 and archsearch["body_s"] > 0
    assert all(value > 0 for value in report["c1"].values())
