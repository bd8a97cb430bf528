"""Data-parallel trials: N processes take the optimiser steps one process takes on the global batch.

The trial side runs with torch alone (local ``gloo`` processes, as ``archsearch trial`` runs a
``distributed: {workers: N}`` config); the search side is a real Ray Tune search whose trials
each run as two Ray processes (``search.resources.workers``).
"""

from __future__ import annotations

import math
import os

import pytest
import ray
import torch
from conftest import tiny_search_spec

from harness.search.driver import run_search
from harness.search.worker.data_parallel import trial_bundles
from harness.search.worker.trainable import place_trial
from harness.store import Store
from search_space.spec import Resources
from search_space.validation import load_spec
from trials.config.data_config import DataConfig
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError, from_mapping
from trials.data import build_data
from trials.data.sources import share_of
from trials.runner import run_trial

# No BatchNorm, no dropout or drop-path, no augmentation: the only difference between one process
# and two is the order of floating-point sums. 96 images in batches of 31: three steps an epoch,
# each split 15/16 between the ranks (unequal parts: the loss weighting is exercised).
TRIAL = {
    "model": {
        "preset": "cait_tiny32",
        "depth": 2,
        "embed_dim": 32,
        "num_heads": 2,
        "ca_depth": 1,
        "drop_path_rate": 0.0,
    },
    "data": {"name": "synthetic", "num_classes": 4, "train_size": 96, "val_size": 32, "batch_size": 31},
    "training": {"epochs": 3, "lr": 3e-3, "label_smoothing": 0.0},
    "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False, "throughput": False},
    "device": "cpu",
}
# float32 sums in another order: about 1e-7 relative per step; three epochs of compounding stay
# far inside this (a rank training on the wrong images, or an unweighted mean, moves the loss by
# 1e-3 or more: see test_the_tolerance_would_catch_a_wrong_share).
TOLERANCE = 1e-5


def test_two_gloo_processes_take_the_steps_of_one_process_on_the_global_batch():
    one = run_trial(TRIAL)
    two = run_trial({**TRIAL, "distributed": {"workers": 2}})
    assert one.status == two.status == "completed", (one.error, two.error)
    assert two.runtime["world_size"] == 2 and one.runtime["world_size"] == 1
    assert len(one.epochs) == len(two.epochs) == 3
    for a, b in zip(one.epochs, two.epochs, strict=True):
        assert a.step == b.step
        assert math.isclose(a.train_loss, b.train_loss, abs_tol=TOLERANCE), (a.train_loss, b.train_loss)
        assert math.isclose(a.eval_loss, b.eval_loss, abs_tol=TOLERANCE), (a.eval_loss, b.eval_loss)
    # the training moved (a comparison of two untrained models would prove nothing)
    assert abs(one.epochs[-1].train_loss - one.epochs[0].train_loss) > 100 * TOLERANCE


def test_a_data_parallel_trial_resumes_every_rank_from_rank_0s_checkpoint():
    """A retried trial resumes from its last checkpoint on every rank (weights, optimiser moments,
    schedule, epoch): resumed after epoch 1 with two processes, it ends where one process ends."""
    states = []
    first = run_trial(TRIAL, callback=lambda metrics, trainer: states.append(trainer.state_dict()) or True)
    assert first.stopped_early and len(first.epochs) == 1
    resumed = run_trial({**TRIAL, "distributed": {"workers": 2}}, resume_state=states.pop)
    straight = run_trial(TRIAL)
    assert resumed.status == "completed", resumed.error
    assert [m.epoch for m in resumed.epochs] == [1, 2, 3]
    for a, b in zip(straight.epochs[1:], resumed.epochs[1:], strict=True):
        assert math.isclose(a.train_loss, b.train_loss, abs_tol=TOLERANCE), (a.train_loss, b.train_loss)
        assert math.isclose(a.eval_loss, b.eval_loss, abs_tol=TOLERANCE), (a.eval_loss, b.eval_loss)


def test_a_stop_from_rank_0s_callback_ends_every_rank():
    """The callback (a stop rule, Tune's scheduler) runs on rank 0; the peers follow it, so the
    trial ends after the epoch it said, not at a collective waiting for rank 0."""
    seen = []
    result = run_trial({**TRIAL, "distributed": {"workers": 2}}, callback=lambda m, t: seen.append(m.epoch) or True)
    assert result.status == "completed" and result.stopped_early and seen == [1]


@pytest.mark.parametrize(
    "data",
    [
        {"name": "synthetic", "num_classes": 4, "train_size": 96, "val_size": 8, "batch_size": 31},  # tensors
        # the DataLoader path (per-sample transforms, augmentation seeded per sample)
        {
            "name": "synthetic",
            "num_classes": 4,
            "train_size": 40,
            "val_size": 8,
            "batch_size": 9,
            "augment": {"randaugment": [2, 9], "hflip": True},
        },
    ],
)
def test_each_rank_trains_on_its_own_part_of_every_global_batch(data):
    """Two ranks' batches, side by side, are the one-process batches: the same images, each once
    (loss matching alone would not see two ranks that both trained on the whole batch)."""
    config = from_mapping(DataConfig, {"augment": {"hflip": True, "random_crop": True}} | data)
    whole = [(x.clone(), y.clone()) for x, y in build_data(config).train]
    parts = []
    for rank in range(2):
        bundle = build_data(config)
        bundle.train.shard(rank, 2)
        parts.append(list(bundle.train))
    assert len(parts[0]) == len(parts[1]) == len(whole)
    for (x, y), (x0, y0), (x1, y1) in zip(whole, parts[0], parts[1], strict=True):
        assert torch.equal(torch.cat([y0, y1]), y)
        assert torch.allclose(torch.cat([x0, x1]), x)
        assert abs(len(y0) - len(y1)) <= 1


def test_the_ranks_parts_of_a_batch_are_disjoint_and_cover_it():
    for rows in (1, 7, 31, 32):
        for world in (1, 2, 3, 4):
            parts = [share_of(10, 10 + rows, rank, world) for rank in range(world)]
            covered = [i for part in parts for i in range(part.start, part.stop)]
            assert covered == list(range(10, 10 + rows))
            sizes = [part.stop - part.start for part in parts]
            assert max(sizes) - min(sizes) <= 1


def test_a_distributed_trial_config_is_validated_naming_the_key():
    with pytest.raises(ConfigError, match=r"distributed\.workers"):
        load_trial_config({**TRIAL, "distributed": {"workers": 0}})
    with pytest.raises(ConfigError, match=r"distributed\.backend"):
        load_trial_config({**TRIAL, "distributed": {"backend": "mpi"}})
    with pytest.raises(ConfigError, match=r"data\.batch_size"):
        load_trial_config({**TRIAL, "data": {**TRIAL["data"], "batch_size": 2}, "distributed": {"workers": 4}})


@pytest.mark.parametrize(
    ("resources", "fragment"),
    [
        ({"gpus": 1.5}, "ask for workers: 2"),
        ({"gpus": 2}, "ask for workers: 2"),
        ({"gpus": 0.3}, "not a share that packs"),
        ({"gpus": 0.5, "workers": 2}, "need a GPU each"),
        ({"workers": 0}, "workers"),
    ],
)
def test_resources_that_cannot_run_are_refused_naming_the_key(resources, fragment):
    spec = tiny_search_spec("bad")
    spec["search"]["resources"] = resources
    with pytest.raises(ConfigError) as raised:
        load_spec(spec)
    assert "search.resources" in str(raised.value) and fragment in str(raised.value)


@pytest.mark.parametrize("gpus", [0, 1, 0.5, 0.25, 1 / 3, 0.333, 0.125])
def test_whole_gpus_and_shares_that_pack_are_accepted(gpus):
    assert Resources(gpus=gpus).gpus == gpus


def test_a_data_parallel_trial_reserves_one_bundle_per_rank():
    assert trial_bundles(Resources(workers=3, cpus=4, gpus=1)) == [{"CPU": 4, "GPU": 1}] * 3
    assert trial_bundles(Resources(workers=2, cpus=1)) == [{"CPU": 1}] * 2


@pytest.mark.slow
def test_a_search_with_two_workers_per_trial_completes_and_stores_world_size_2(tmp_path):
    spec = tiny_search_spec("data-parallel", n_trials=2)
    spec["search"]["resources"] = {"workers": 2, "cpus": 1}
    spec["training"]["epochs"] = 2
    url = f"sqlite:///{tmp_path}/store.db"
    try:
        summary = run_search(load_spec(spec), url, results_dir=tmp_path / "results")
    finally:
        ray.shutdown()  # run_search started a local Ray: the next test's ray.init must find none
    assert summary.status == "completed"
    with Store.open(url) as store:
        trials = store.trials("data-parallel")
    assert list(trials["status"]) == ["completed", "completed"]
    assert list(trials["world_size"]) == [2.0, 2.0]


def test_gpus_0_means_the_cpu_on_any_node(monkeypatch):
    """Ray 2.60 leaves a GPU node's GPUs visible to zero-GPU workers: the trial is put on the CPU
    by its config, and its DataLoader workers see no GPU either."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    config = {"device": "auto"}
    place_trial(config, Resources(gpus=0, cpus=2), assigned_cpus=None)
    assert config["device"] == "cpu" and config["cpus"] == 2
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert "gpu_memory_fraction" not in config and "distributed" not in config


def test_a_packed_trial_keeps_its_device_and_caps_its_share(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    config = {"device": "auto"}
    place_trial(config, Resources(gpus=0.25, cpus=4), assigned_cpus=4.0)
    assert config == {"device": "auto", "gpu_memory_fraction": 0.25, "cpus": 4.0}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"
    config = {}
    place_trial(config, Resources(gpus=1, workers=4), assigned_cpus=1.0)
    assert config == {"cpus": 1.0, "distributed": {"workers": 4}}
