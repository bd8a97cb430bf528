"""A simulated multi-node cluster (``ray.cluster_utils.Cluster``, logical GPUs): one GPU per trial, and
a node lost mid-trial leads to a retry that resumes from the trial's last epoch checkpoint."""

from __future__ import annotations

import threading
import time

import pytest
import ray
import ray.cluster_utils as cluster_utils

from search_space.validation import load_spec


@pytest.mark.slow
def test_one_gpu_per_trial_and_a_lost_node_is_retried_from_its_checkpoint(tmp_path):
    from harness.search.driver import run_search
    from harness.store import Store

    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    workers = [cluster.add_node(num_cpus=1, num_gpus=1) for _ in range(2)]  # both busy at concurrency 2
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        spec = load_spec(
            {
                "name": "cluster",
                "family": "cait",
                "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
                "data": {"name": "synthetic", "num_classes": 4, "train_size": 768, "val_size": 64, "batch_size": 32},
                "training": {"epochs": 4, "lr": 1e-3},
                "measure": {"flops": False, "throughput": False, "latency": False},
                "params": {"embed_dim": {"choice": [32, 48]}, "lr": {"float": [1e-4, 1e-2]}},
                "objectives": {"top1": "max"},
                "search": {
                    "sampler": "random",
                    "n_trials": 3,
                    "concurrency": 2,
                    "seed": 0,
                    "resources": {"cpus": 1, "gpus": 1},
                    "retries": 2,
                },
            }
        )
        url = f"sqlite:///{tmp_path / 'store.db'}"
        outcome: dict = {}

        def search() -> None:
            try:
                outcome["summary"] = run_search(spec, url, address=cluster.address, results_dir=tmp_path / "ray")
            except BaseException as error:  # surfaced by the assertions below
                outcome["error"] = error

        thread = threading.Thread(target=search)
        thread.start()
        # Wait until two trials run on two GPU nodes and have each finished an epoch, then lose a node.
        removed = False
        deadline = time.time() + 240
        while time.time() < deadline and thread.is_alive() and not removed:
            time.sleep(0.5)
            if not (tmp_path / "store.db").exists():
                continue
            try:
                with Store.open(url, create=False) as store:
                    if "cluster" not in store.study_names():
                        continue
                    curves = store.learning_curves("cluster")
                    running = store.trials("cluster").query("status == 'running'")
            except Exception:
                continue
            started = set(curves["number"]) & set(running["number"])
            if len(started) >= 2:
                cluster.remove_node(workers[0])
                removed = True
        assert removed, "never saw two trials running at once"
        thread.join(timeout=400)
        assert not thread.is_alive()
        assert "error" not in outcome, outcome.get("error")

        with Store.open(url, create=False) as store:
            trials = store.trials("cluster")
            curves = store.learning_curves("cluster")
        assert len(trials) == 3 and trials["number"].is_unique
        assert (trials["status"] == "completed").all(), trials[["number", "status", "error"]]
        # Each trial had a GPU of its own (logical GPUs on CPU-only nodes).
        assert trials["device"].str.startswith("GPU ").all()
        # Every learning curve is complete and has no duplicate epoch.
        assert curves.groupby("number")["epoch"].apply(sorted).apply(list).tolist() == [[1, 2, 3, 4]] * 3
        # The trial on the lost node was retried and resumed from its checkpoint, not from scratch.
        resumed = trials["resumed_from_epoch"].dropna() if "resumed_from_epoch" in trials else []
        assert len(resumed) >= 1 and (resumed >= 1).all()
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
def test_a_data_parallel_trial_spans_two_nodes(tmp_path):
    """``workers: 2, gpus: 1`` on nodes with one (logical) GPU each: the trial's placement group
    can only be met by two nodes, so its ranks meet across nodes (gloo here: no CUDA)."""
    from harness.search.driver import run_search
    from harness.store import Store

    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1, num_gpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        spec = load_spec(
            {
                "name": "two-nodes",
                "family": "cait",
                "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
                "data": {"name": "synthetic", "num_classes": 4, "train_size": 64, "val_size": 32, "batch_size": 32},
                "training": {"epochs": 2, "lr": 1e-3},
                "measure": {"flops": False, "throughput": False, "latency": False},
                "params": {"embed_dim": {"choice": [32, 48]}},
                "objectives": {"top1": "max"},
                "search": {"sampler": "grid", "n_trials": 2, "resources": {"cpus": 1, "gpus": 1, "workers": 2}},
            }
        )
        url = f"sqlite:///{tmp_path / 'store.db'}"
        summary = run_search(spec, url, address=cluster.address, results_dir=tmp_path / "ray")
        assert summary.status == "completed", summary.message
        with Store.open(url, create=False) as store:
            trials = store.trials("two-nodes")
        assert (trials["status"] == "completed").all(), trials[["number", "status", "error"]]
        assert (trials["world_size"] == 2).all()
    finally:
        ray.shutdown()
        cluster.shutdown()
