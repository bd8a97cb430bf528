"""Issue 44, item 6: ``archsearch trial``'s input checked before it runs, wherever the value comes
from, and sizes checked against the CPUs this process may really use.

A data_dir that is not a directory (a FIFO, a file, nothing), a dataset missing from an existing
directory, a config file that is not a mapping (never echoed back), more data-parallel ranks than
usable CPUs: each is one line naming the key, exit 2, not a failed trial (exit 1). The local Ray
is sized to the usable CPUs, so a search asking more CPUs per trial than there are is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from conftest import tiny_search_spec, tiny_trial_config

from trials.devices.cpus import usable_cpus

EXE = os.path.join(os.path.dirname(sys.executable), "archsearch")
TRIAL = tiny_trial_config()


def _trial(tmp_path, config, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "trial.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    return subprocess.run([EXE, "trial", str(path), *args], capture_output=True, text=True, timeout=300)


def _one_line(done: subprocess.CompletedProcess, *said: str) -> str:
    assert done.returncode == 2, done.stdout[-1500:] + done.stderr[-1500:]
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and all(s in lines[0] for s in said), lines
    return lines[0]


def _data_dir(kind: str, tmp_path) -> tuple[dict, str]:
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo")
        return {"name": "cifar10", "data_dir": str(tmp_path / "fifo")}, "is not a directory"
    if kind == "file":
        (tmp_path / "file").write_text("x")
        return {"name": "imagefolder", "data_dir": str(tmp_path / "file")}, "is not a directory"
    if kind == "missing":
        return {"name": "cifar10", "data_dir": str(tmp_path / "missing")}, "does not exist"
    (tmp_path / "empty").mkdir()  # a directory without the dataset: found when the trial loads it
    return {"name": "cifar10", "data_dir": str(tmp_path / "empty")}, "not found or corrupted"


@pytest.mark.parametrize("kind", ["fifo", "file", "missing", "directory-without-the-dataset"])
def test_a_data_dir_that_holds_no_dataset_is_a_usage_error_naming_the_key(tmp_path, kind):
    data, said = _data_dir(kind, tmp_path)
    config = {**TRIAL, "data": {**TRIAL["data"], **data, "num_classes": 10}}
    _one_line(_trial(tmp_path, config), "data.data_dir:", said)


def test_a_config_that_is_not_a_mapping_is_refused_without_echoing_it(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root-password-hunter2 and more\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(secret)
    done = subprocess.run([EXE, "trial", str(link)], capture_output=True, text=True, timeout=120)
    line = _one_line(done, "a trial config is a YAML mapping", "holds a str")
    assert "hunter2" not in done.stdout + done.stderr, line


def test_more_data_parallel_ranks_than_usable_cpus_are_refused_before_any_process_starts(tmp_path):
    workers = usable_cpus() + 1
    config = {**TRIAL, "distributed": {"workers": workers}}
    _one_line(_trial(tmp_path, config), "distributed.workers:", f"{workers} processes on the CPU")


def test_a_search_asking_more_cpus_per_trial_than_this_process_may_use_is_refused(tmp_path):
    spec = tiny_search_spec("too-wide")
    spec["search"]["resources"] = {"cpus": 1, "workers": usable_cpus() + 2}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = subprocess.run(
        [EXE, "search", str(path), "--store", f"sqlite:///{tmp_path / 's.db'}", "--results-dir", str(tmp_path / "rr")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    _one_line(done, "search.resources.workers:", "but the Ray cluster has")
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "rr").exists()


def test_a_key_that_looks_like_a_line_of_another_file_is_never_echoed(tmp_path):
    """Adversarial pass D24: a config linked to /etc/shadow parsed as a one-key mapping and the
    'unknown key' error printed its first line."""
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$hunter2hash:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(secret)
    done = subprocess.run([EXE, "trial", str(link)], capture_output=True, text=True, timeout=120)
    _one_line(done, "a key that is no config key, nor looks like one (not shown)")
    assert "hunter2" not in done.stdout + done.stderr and "root" not in done.stdout + done.stderr
