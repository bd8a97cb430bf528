"""The memory pre-flight (issue 57, item 4): what training a configuration needs, from the cost model,
against the memory where it will run, before the model is built or a trial dispatched.

Members of the pattern: the estimate itself (parameters exact, activations against what autograd
really saves); a search's space (a value that never fits refused at spec time naming it, one that
fits only with some others made infeasible with the partly-invalid warning); ``trial`` and ``bench``
(exit 2 before building); a GPU trial's budget (its device's memory, or its share).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import yaml

import search_space.sampling as sampling
from harness.preflight import device_budget, memory_preflight
from search_space.buildable import buildability
from search_space.cost_model import estimate_cost
from search_space.memory import MemoryBudget, training_memory, trial_memory
from search_space.sampling import SpaceFunction, build_trial_config, check_memory
from search_space.validation import load_spec
from tests.conftest import tiny_search_spec
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError
from trials.models import build_model
from trials.models.config import CaiTConfig, CoAtNetConfig

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")
NEVER_FITS = 99_998  # embed_dim: terabytes of weights, on any machine


def _saved_for_backward(model: torch.nn.Module, images: torch.Tensor) -> int:
    """Elements autograd saves for the backward pass of one training forward (distinct storages)."""
    seen: dict[int, int] = {}
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def pack(tensor: torch.Tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:  # a parameter (or a transposed view of one): counted with the weights
            seen[storage.data_ptr()] = storage.nbytes() // tensor.element_size()
        return tensor

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(images).sum()
    return sum(seen.values())


@pytest.mark.parametrize(
    "config",
    [
        CaiTConfig(image_size=32, patch_size=4, embed_dim=64, depth=3, num_heads=4, ca_depth=1, num_classes=10),
        CaiTConfig(image_size=32, patch_size=4, embed_dim=48, depth=2, num_heads=4, ca_depth=2, talking_heads=True),
        CoAtNetConfig(
            image_size=32, layout="CCTT", depths=(1, 1, 1, 1, 1), dims=(16, 16, 32, 64, 64), head_size=16
        ),
    ],
    ids=["cait", "cait-talking-heads", "coatnet-cctt"],
)
def test_the_activation_estimate_is_within_a_quarter_of_what_autograd_saves(config):
    model = build_model(config)
    images = torch.randn(2, config.in_chans, config.image_size, config.image_size)
    saved = _saved_for_backward(model, images) / 2
    estimated = estimate_cost(config).activations
    assert 0.8 <= estimated / saved <= 1.25, (estimated, saved)
    assert estimate_cost(config).params == sum(p.numel() for p in model.parameters())


def test_the_need_is_weights_gradients_adamw_state_and_activations_at_the_batch():
    config = CaiTConfig(image_size=32, patch_size=4, embed_dim=64, depth=2, num_heads=4, ca_depth=1)
    cost = estimate_cost(config)
    need = training_memory(config, 32, half_precision=False)
    assert need.state_bytes == 16 * cost.params
    assert need.activation_bytes == 4 * 32 * cost.activations
    assert training_memory(config, 32, half_precision=True).activation_bytes == 2 * 32 * cost.activations
    # Data-parallel: on the CPU every rank (its own model copy, its share of the batch) is on this machine.
    two = trial_memory(config, 32, 2, "cpu", half_precision=False)
    assert two.state_bytes == 2 * need.state_bytes and two.activation_bytes == need.activation_bytes
    assert trial_memory(config, 32, 2, "cuda", half_precision=False).state_bytes == need.state_bytes
    # Deep models are priced in O(1) (repeat), activations included.
    deep = CaiTConfig(image_size=32, patch_size=4, embed_dim=64, depth=10**9, num_heads=4, ca_depth=1)
    assert estimate_cost(deep).activations > 10**9


def _spec(**params) -> dict:
    spec = tiny_search_spec("mem")
    spec["params"] = params
    return spec


def test_a_value_that_never_fits_is_refused_at_spec_time_naming_it(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec(embed_dim={"choice": [32, NEVER_FITS]})))
    store = tmp_path / "store.db"
    run = subprocess.run(
        [EXE, "search", str(path), "--store", f"sqlite:///{store}", "--results-dir", str(tmp_path / "ray")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr
    assert f"embed_dim={NEVER_FITS}" in run.stderr and "cannot fit" in run.stderr, run.stderr
    assert not store.exists() and not (tmp_path / "ray").exists()  # nothing created, Ray never started


def test_values_that_fit_only_with_some_others_are_made_infeasible_with_the_warning(monkeypatch):
    spec = load_spec(_spec(embed_dim={"choice": [32, 256]}, depth={"choice": [1, 8]}))
    fits = training_memory(_model(spec, 256, 1), spec.data["batch_size"], half_precision=False).total
    # A machine with just that much memory: embed_dim 256 fits at depth 1, not at depth 8.
    monkeypatch.setattr(sampling, "host_memory", lambda: MemoryBudget(fits, "a test machine's memory"))
    found = buildability(spec)
    warning = found.warning(spec)
    assert warning is not None and "embed_dim=256" in warning and "depth=8" in warning, warning
    feasibility, _ = SpaceFunction(spec).check({"embed_dim": 256, "depth": 8})
    assert not feasibility.feasible and "cannot fit" in feasibility.build_error
    assert SpaceFunction(spec).check({"embed_dim": 256, "depth": 1})[0].feasible
    assert SpaceFunction(spec).check({"embed_dim": 32, "depth": 8})[0].feasible


@pytest.mark.parametrize(("concurrency", "cpus_here", "fits"), [(1, 8, True), (2, 8, False), (4, 1, True)])
def test_trials_that_run_side_by_side_share_the_machines_memory(monkeypatch, concurrency, cpus_here, fits):
    """A trial that fits this machine alone does not fit beside another: eight 9 GB trials passed a 25 GB machine
    one at a time. The share is the concurrency, or fewer where this machine's CPUs run fewer at once."""
    raw = _spec(embed_dim={"choice": [32, 256]})
    raw["search"] = {**raw.get("search", {}), "concurrency": concurrency, "resources": {"cpus": 1, "gpus": 0}}
    spec = load_spec(raw)
    alone = training_memory(_model(spec, 256, spec.base_model.get("depth", 1)), spec.data["batch_size"],
                            half_precision=False).total  # fmt: skip
    monkeypatch.setattr(sampling, "host_memory", lambda: MemoryBudget(int(alone * 1.5), "a test machine's memory"))
    monkeypatch.setattr(sampling, "usable_cpus", lambda: cpus_here)
    config = build_trial_config(spec, {"embed_dim": 256})
    if fits:
        check_memory(spec, config)
    else:
        with pytest.raises(ConfigError, match=r"its 1/2 share of a test machine's memory \(2 trials at a time\)"):
            check_memory(spec, config)


def _model(spec, embed_dim: int, depth: int):
    from search_space.sampling import priced_model

    return priced_model(build_trial_config(spec, {"embed_dim": embed_dim, "depth": depth}))


def test_a_gpu_search_leaves_the_limit_to_the_device_the_trial_lands_on():
    spec = _spec(embed_dim={"choice": [32, NEVER_FITS]})
    spec["search"]["resources"] = {"gpus": 1}
    loaded = load_spec(spec, check_paths=False)
    check_memory(loaded, build_trial_config(loaded, {"embed_dim": NEVER_FITS}))  # not this machine's to judge


def _write(tmp_path, model: dict) -> str:
    config = {
        "model": {"family": "cait", "depth": 1, "num_heads": 2, "ca_depth": 1, "patch_size": 4, **model},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 32, "val_size": 32, "batch_size": 8},
        "training": {"epochs": 1},
        "device": "cpu",
    }
    path = tmp_path / "trial.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_trial_refuses_a_model_that_cannot_fit_before_building_it(tmp_path):
    run = subprocess.run([EXE, "trial", _write(tmp_path, {"embed_dim": NEVER_FITS})], capture_output=True, text=True)
    assert run.returncode == 2, run.stderr
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("Error")]
    assert f"embed_dim={NEVER_FITS}" in line and "more than" in line and "memory" in line, line


def test_bench_refuses_weights_that_cannot_fit(tmp_path):
    path = tmp_path / "model.yaml"
    model = {"family": "cait", "embed_dim": NEVER_FITS, "num_heads": 2, "image_size": 32, "patch_size": 4}
    path.write_text(yaml.safe_dump(model))
    run = subprocess.run([EXE, "bench", str(path)], capture_output=True, text=True)
    assert run.returncode == 2 and f"embed_dim={NEVER_FITS}" in run.stderr and "weights" in run.stderr, run.stderr


def test_a_gpu_trials_budget_is_its_device_or_its_share_of_it():
    trial = load_trial_config({"model": "cait_tiny32", "gpu_memory_fraction": 0.25, "precision": "bf16"})
    budget = device_budget(trial, torch.device("cuda:0"), {"gpu_total_bytes": 80_000_000_000})
    assert budget.bytes == 20_000_000_000 and budget.where == "its 0.25 share of cuda:0's 80.0 GB"
    whole = load_trial_config({"model": "cait_tiny32", "precision": "bf16"})
    assert device_budget(whole, torch.device("cuda:0"), {"gpu_total_bytes": 80_000_000_000}).bytes == 80_000_000_000
    big = CaiTConfig(image_size=32, patch_size=4, embed_dim=4096, depth=24, num_heads=2, ca_depth=1)
    with pytest.raises(ConfigError, match=r"its 0.25 share of cuda:0's 80.0 GB"):
        memory_preflight(trial, big, torch.device("cuda:0"), {"gpu_total_bytes": 80_000_000_000})
    memory_preflight(whole, big.replace(depth=1), torch.device("cuda:0"), {"gpu_total_bytes": 80_000_000_000})


@pytest.mark.parametrize("batch", ["1000000", "100000000000000000000"])
def test_bench_refuses_a_batch_that_cannot_fit_before_allocating_it(batch):
    """Both were an internal error (a 12 TB allocation, an int64 overflow), and 10^6 a kill by the OOM killer."""
    run = subprocess.run([EXE, "bench", "cait_tiny32", "--batch-size", batch, "--repeats", "1"], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 2 and "internal error" not in run.stderr, run.stderr
    assert "batch" in run.stderr, run.stderr


@pytest.mark.parametrize(("name", "capped"), [("synthetic", True), ("mnist5k", True), ("digits", False)])
def test_the_batch_priced_is_what_a_step_holds_the_training_split_where_it_is_smaller(monkeypatch, name, capped):
    """A 64-image synthetic set with batch_size 4096 trains in steps of 64: pricing the 4096 refused
    trials that fit (found by the adversarial pass). train_size sets only synthetic and mnist5k."""
    spec = _spec(embed_dim={"choice": [64]})
    spec["data"] = {"name": name, "train_size": 64, "batch_size": 4096}
    loaded = load_spec(spec, check_paths=False)
    config = build_trial_config(loaded, {"embed_dim": 64})
    model = sampling.priced_model(config)
    at_64 = training_memory(model, 64, half_precision=False).total
    monkeypatch.setattr(sampling, "host_memory", lambda: MemoryBudget(at_64, "a test machine's memory"))
    if capped:
        check_memory(loaded, config)
    else:  # digits' training split is its own (about 1,400 images): the batch is what a step holds
        with pytest.raises(ConfigError, match="cannot fit"):
            check_memory(loaded, config)
