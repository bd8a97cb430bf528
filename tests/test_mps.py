"""Packed trials under CUDA MPS (issue 47, deliverable 5): ``search.resources.mps`` and trials.devices.mps.

* The daemon is checked, never started: a control pipe and a running ``nvidia-cuda-mps-control``
  (a pipe left by a dead daemon is stale); the refusal is one line that says how to start it, from
  the search's start-up check (a zero-CPU Ray task on each GPU node) and from the trial itself.
* A stubbed CUDA trial asking for MPS sets MPS's device-memory limit at its share of the GPU before
  its first allocation, and records it; without the daemon it fails before touching the device.
* The spec refuses MPS where nothing is packed, naming the key.
"""

from __future__ import annotations

import os

import pytest
import ray
import test_cuda_contracts as cuda_contracts
import torch
from conftest import tiny_search_spec
from test_gpu_training import tiny

from harness.search.cluster.ray_setup import SearchError, check_mps
from harness.search.worker.trainable import place_trial
from search_space.spec import Resources
from search_space.validation import load_spec
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError
from trials.devices import mps
from trials.runner import run_trial

GIB = cuda_contracts.GIB
stubbed_cuda = cuda_contracts.stubbed_cuda  # the CUDA contract tests' fixtures: CUDA stubbed, calls recorded
cuda_backend_flags = cuda_contracts.cuda_backend_flags


def _node(tmp_path, *, pipe: bool, daemon: bool):
    pipes, proc = tmp_path / "pipes", tmp_path / "proc"
    pipes.mkdir()
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "comm").write_text("nvidia-cuda-mps\n" if daemon else "python3\n")
    (proc / "self").mkdir()
    if pipe:
        os.mkfifo(pipes / "control")
    return pipes, proc


@pytest.mark.parametrize(
    ("pipe", "daemon", "said"),
    [
        (True, True, None),
        (False, True, "no control pipe"),
        (False, False, "no control pipe"),
        (True, False, "is stale"),
    ],
)
def test_the_daemon_is_running_only_with_its_pipe_and_its_process(tmp_path, pipe, daemon, said):
    pipes, proc = _node(tmp_path, pipe=pipe, daemon=daemon)
    problem = mps.daemon_problem(pipes, proc)
    if said is None:
        assert problem is None
    else:
        assert said in problem and "nvidia-cuda-mps-control -d" in problem and "\n" not in problem


def test_a_regular_file_is_not_the_control_pipe(tmp_path):
    pipes, proc = _node(tmp_path, pipe=False, daemon=True)
    (pipes / "control").write_text("")
    assert "no control pipe" in mps.daemon_problem(pipes, proc)


def test_the_pipe_directory_follows_the_clients_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(mps.PIPE_ENV, str(tmp_path))
    assert mps.pipe_directory() == tmp_path
    monkeypatch.delenv(mps.PIPE_ENV)
    assert str(mps.pipe_directory()) == mps.DEFAULT_PIPE_DIRECTORY


def test_the_pinned_limit_is_the_share_of_the_gpu_on_ordinal_zero():
    assert mps.pinned_limit(0.25, 80 * GIB) == "0=20480M"
    assert mps.pinned_limit(1 / 3, 24 * GIB) == "0=8192M"


def test_a_stubbed_cuda_trial_sets_the_mps_limit_before_its_first_allocation(stubbed_cuda, monkeypatch):
    monkeypatch.delenv(mps.PINNED_LIMIT_ENV, raising=False)
    monkeypatch.setattr(mps, "daemon_problem", lambda: None)
    seen = []
    for cls in (torch.Tensor, torch.nn.Module):
        fixture_to = cls.to

        def watching_to(self, *args, _to=fixture_to, **kwargs):
            seen.append(os.environ.get(mps.PINNED_LIMIT_ENV))
            return _to(self, *args, **kwargs)

        monkeypatch.setattr(cls, "to", watching_to)
    result = run_trial(tiny(device="cuda", gpu_memory_fraction=0.25, mps=True))
    assert result.status == "failed" and "stubbed CUDA" in result.error  # at its first allocation
    assert stubbed_cuda[0][0] == "memory_fraction"
    assert any(kind in ("tensor_to_cuda", "module_to_cuda") for kind, *_ in stubbed_cuda)
    assert seen[-1] == "0=20480M"  # the move to the device (the last call: it fails) saw the limit set
    assert result.runtime["mps_pinned_limit_mib"] == 20480


def test_a_trial_without_the_daemon_fails_in_one_line_before_touching_the_gpu(stubbed_cuda, monkeypatch):
    monkeypatch.delenv(mps.PINNED_LIMIT_ENV, raising=False)
    monkeypatch.setattr(mps, "daemon_problem", lambda: "the CUDA MPS control daemon is not running on n1: start it")
    result = run_trial(tiny(device="cuda", gpu_memory_fraction=0.25, mps=True))
    assert result.status == "failed"
    assert result.error.startswith("EnvironmentProblem: the CUDA MPS control daemon is not running on n1")
    assert stubbed_cuda == []  # nothing capped, nothing allocated
    assert mps.PINNED_LIMIT_ENV not in os.environ


def test_a_trial_without_mps_sets_no_limit(stubbed_cuda, monkeypatch):
    monkeypatch.delenv(mps.PINNED_LIMIT_ENV, raising=False)
    result = run_trial(tiny(device="cuda", gpu_memory_fraction=0.25))
    assert "mps_pinned_limit_mib" not in result.runtime and mps.PINNED_LIMIT_ENV not in os.environ


def test_mps_needs_a_packed_share():
    spec = tiny_search_spec("mps")
    spec["search"]["resources"] = {"gpus": 1, "mps": True}
    with pytest.raises(ConfigError) as raised:
        load_spec(spec)
    assert "search.resources" in str(raised.value) and "mps: true with gpus: 1" in str(raised.value)
    assert Resources(gpus=0.25, mps=True).mps
    with pytest.raises(ConfigError, match=r"^mps: packs trials on a GPU"):
        load_trial_config(tiny(mps=True))
    with pytest.raises(ConfigError, match=r"^mps: must be true or false"):
        load_trial_config(tiny(mps="yes", gpu_memory_fraction=0.5))


def test_the_worker_passes_mps_to_a_packed_trial():
    config = {}
    place_trial(config, Resources(gpus=0.25, mps=True), assigned_cpus=2.0)
    assert config["mps"] is True and config["gpu_memory_fraction"] == 0.25
    plain = {}
    place_trial(plain, Resources(gpus=0.25), assigned_cpus=2.0)
    assert "mps" not in plain  # the trial's default: its config says only what differs


@pytest.mark.slow
def test_the_start_up_check_runs_on_the_node_and_refuses_in_one_line():
    """A real Ray task pinned to this node (which has no MPS daemon) says so; the search would stop here."""
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        node = ray.get_runtime_context().get_node_id()
        with pytest.raises(SearchError) as raised:
            check_mps([node])
        text = str(raised.value)
        assert "search.resources.mps" in text and "nvidia-cuda-mps-control -d" in text and "\n" not in text
        check_mps([])  # no GPU node: nothing to check
    finally:
        if started:
            ray.shutdown()
