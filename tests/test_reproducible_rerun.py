"""Issue 45, item 3: a run re-runs to the same numbers.

A CPU result depends on torch's intra-op thread count (a reduction split over N threads sums in
another order). The thread count is recorded with every trial, exported, and honoured by
``archsearch trial`` (``threads:``, else ``floor(cpus)``, else 1 on the CPU, as a search's default
placement runs). The slow test exports a completed trial of a real search and trains it again with
``archsearch trial``: every epoch's numbers are bit for bit the stored ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml
from conftest import tiny_search_spec, tiny_trial_config

from harness.store import Store
from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError
from trials.runner import run_trial

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")
TRIAL = tiny_trial_config()


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("placement", "threads"),
    [({}, 1), ({"cpus": 2.7}, 2), ({"cpus": 0.25}, 1), ({"threads": 2}, 2), ({"threads": 2, "cpus": 1}, 2)],
)
def test_a_trial_runs_with_the_threads_its_config_states_and_records_them(torch_threads, placement, threads):
    torch.set_num_threads(3)  # whatever the process had before: the trial's own count wins
    result = run_trial({**TRIAL, **placement})
    assert result.status == "completed", result.error
    assert result.runtime["threads"] == threads and result.final["threads"] == threads
    assert result.cost.device.endswith(f", {threads} threads)")


@pytest.mark.parametrize("threads", [0, -1, 2.5, "two", 10**6])
def test_a_thread_count_that_is_not_a_positive_integer_is_refused_naming_the_key(threads):
    with pytest.raises(ConfigError, match=r"^threads: must be an integer in 1\.\.1024"):
        load_trial_config({**TRIAL, "threads": threads})


@pytest.mark.slow
def test_an_exported_trial_trains_again_to_bit_identical_epochs(tmp_path):
    spec = tiny_search_spec("again", n_trials=1)
    spec["training"]["epochs"] = 2
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    searched = subprocess.run(
        [EXE, "search", str(path), "--store", url, "--results-dir", str(tmp_path / "rr")],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert searched.returncode == 0, searched.stderr[-2000:]
    exported = tmp_path / "trial.yaml"
    done = subprocess.run([EXE, "export", "again", "0", "-o", str(exported), "--store", url], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(exported.read_text())
    assert config["threads"] == 1 and "cpus" not in config  # the search's placement: one CPU, one thread
    again = subprocess.run([EXE, "trial", str(exported), "--format", "json"], capture_output=True, text=True,
                           timeout=600, env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    rerun = json.loads(again.stdout)
    with Store.open(url, create=False) as store:
        stored = store.learning_curves("again").to_dict("records")
    assert len(rerun["epochs"]) == len(stored) == 2
    for epoch, row in zip(rerun["epochs"], stored, strict=True):
        for key in ("train_loss", "eval_loss", "top1", "top5"):
            assert epoch[key] == row[key], (key, epoch[key], row[key])  # bit for bit, not approximately
