"""A real Ray cluster, joined the way a user does: ``ray start --head``, a second node, ``--address``.

The head and the worker node are separate ``ray start --block`` processes in their own sessions,
tracked by PID and stopped by PID (never ``ray stop``, which would stop every Ray on the machine).
Token authentication is on, as Ray 2.60 makes it by default; the token lives in a private HOME so
that the test neither reads nor overwrites the user's. The search runs as the ``archsearch``
console script, as a user types it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from harness.store import Store

pytestmark = pytest.mark.slow

EXE = Path(sys.executable).with_name("archsearch")
RAY = Path(sys.executable).with_name("ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the process's session (ray start and what it started), then SIGKILL what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=5)  # what SIGTERM has not ended by then, SIGKILL ends
            time.sleep(1)  # children of the group may outlive the leader by a moment
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _wait_for(path: Path, text: str, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[:3]} exited: {path.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)
    raise TimeoutError(f"no {text!r} in {path} after {timeout}s")


@pytest.fixture(scope="module")
def cluster():
    """A two-node Ray cluster with token authentication: (address, environment for its clients)."""
    root = Path(tempfile.mkdtemp(prefix="asr", dir="/tmp"))  # short: Ray's socket paths have a length limit
    home = root / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["HOME"] = str(home)
    port = _free_port()
    address = f"127.0.0.1:{port}"
    started = []
    try:
        # The token every node and client of this cluster shares, generated as a user does.
        subprocess.run([str(RAY), "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60)
        head_log = root / "head.log"
        head = subprocess.Popen(
            [str(RAY), "start", "--head", "--port", str(port), "--temp-dir", str(root / "ray"), "--num-cpus", "2",
             "--include-dashboard", "false", "--block", "--disable-usage-stats"],
            stdout=head_log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
        started.append(head)
        _wait_for(head_log, "will now block forever", head)
        assert (home / ".ray" / "auth_token").is_file()  # with a token there, Ray 2.60 turns authentication on
        worker_log = root / "worker.log"
        worker = subprocess.Popen(
            [str(RAY), "start", "--address", address, "--num-cpus", "1", "--block", "--disable-usage-stats"],
            stdout=worker_log.open("w"), stderr=subprocess.STDOUT, env={**env, "RAY_AUTH_MODE": "token"},
            start_new_session=True,
        )  # fmt: skip
        started.append(worker)
        _wait_for(worker_log, "will now block forever", worker)
        yield address, env, root
    finally:
        for process in reversed(started):
            _stop(process)
        shutil.rmtree(root, ignore_errors=True)


def _spec(path: Path) -> Path:
    spec = {
        "name": "on-a-cluster",
        "family": "cait",
        "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 128, "val_size": 64, "batch_size": 32},
        "training": {"epochs": 1},
        "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
        "params": {"embed_dim": {"choice": [32, 48]}, "depth": {"int": [1, 2]}, "lr": {"float": [1e-4, 1e-2]}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {"sampler": "random", "n_trials": 4, "concurrency": 3, "seed": 0, "resources": {"cpus": 1}},
    }
    path.write_text(yaml.safe_dump(spec))
    return path


def _search(args: list[str], env: dict, cwd: Path, timeout: float = 400) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    done = subprocess.run([str(EXE), "search", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)  # fmt: skip
    return done, time.perf_counter() - started


def test_a_search_joins_a_two_node_cluster_with_its_token_and_stores_every_trial_once(cluster, tmp_path):
    address, env, _ = cluster
    spec = _spec(tmp_path / "spec.yaml")
    store = f"sqlite:///{tmp_path / 'store.db'}"
    # No RAY_AUTH_MODE in the environment: archsearch finds the token in ~/.ray/auth_token itself.
    refused, _ = _search([str(spec), "--address", address, "--store", store], env, tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "the Ray cluster has 2 nodes" in refused.stderr and "--results-dir" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    shared = tmp_path / "shared-results"  # what an NFS mount is to a real cluster
    done, _seconds = _search(
        [str(spec), "--address", address, "--store", store, "--results-dir", str(shared)], env, tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Configuration for experiment" not in done.stdout + done.stderr  # Ray's banner: not by default
    assert "InvalidAuthToken" not in done.stderr
    assert "[on-a-cluster] done" in done.stderr  # archsearch's own progress line stays
    assert "Pareto front" in done.stdout
    with Store.open(store, create=False) as s:
        trials = s.trials("on-a-cluster")
        status = s.study("on-a-cluster")["status"]
    dispatched = trials[trials["status"] != "infeasible"]
    assert len(dispatched) == 4 and trials["number"].is_unique
    assert (dispatched["status"] == "completed").all(), dispatched[["number", "status", "error"]]
    assert status == "completed"
    assert (shared / "on-a-cluster").is_dir()  # trial checkpoints went where every node can read them


def test_a_wrong_token_is_one_line_and_exit_2(cluster, tmp_path):
    address, env, _ = cluster
    spec = _spec(tmp_path / "spec.yaml")
    wrong = {**env, "RAY_AUTH_TOKEN": "0" * 32}
    done, _seconds = _search([str(spec), "--address", address, "--store", f"sqlite:///{tmp_path / 's.db'}"], wrong,
                            tmp_path, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"the Ray cluster at {address} refused the token from $RAY_AUTH_TOKEN" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_nothing_listening_is_one_line_and_exit_2(tmp_path):
    spec = _spec(tmp_path / "spec.yaml")
    port = _free_port()
    done, _seconds = _search([str(spec), "--address", f"127.0.0.1:{port}", "--store", f"sqlite:///{tmp_path / 's.db'}"],
                            dict(os.environ), tmp_path, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"nothing listens at 127.0.0.1:{port}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
