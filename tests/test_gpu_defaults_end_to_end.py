"""The path a GPU user's defaults take, end to end on a CPU (issue 56, deliverable 2).

On CUDA ``compile: auto`` compiles, measurement times the compiled forward, trials pack onto shares of
a GPU, and a search keeps its front's checkpoints: every feature of that path was proven alone, and
together every trial failed at its FLOP count. Here one search runs them together with only the device
swapped: a local Ray with two *logical* GPUs, so that ``gpus: 0.5`` packs trials on them; each trial
compiles (Inductor, regional, static shapes: ``compile: true`` stands in for ``auto``, which compiles on
CUDA only), measures FLOPs, throughput and latency, shares compile artifacts through
``compile_artifacts_dir``, and its front's checkpoints are kept. The search is interrupted (SIGINT,
as Ctrl-C) and resumed; a second search warm-starts from it with data-parallel trials (2 workers,
gloo). Every trial completes, and every record is checked against what ran: the stored config
rebuilds the trained model's exact parameters and FLOPs, the FLOPs equal the eager count, the
forward timed was the compiled one, nothing recompiled after the first epoch.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

TINY_CAIT = {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1}


def _spec(name: str, artifacts: str, **search) -> dict:
    # The shapes (training batch 32, measurement batch 8 and 1, evaluation 64) are the compiled-trial
    # tests' own: Inductor's cache on this node is warm for them when the suite runs in one go.
    return {
        "name": name,
        "family": "cait",
        "base_model": TINY_CAIT,
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 256, "val_size": 64, "batch_size": 32},
        "training": {"epochs": 2, "lr": 1e-3, "compile": True, "compile_artifacts_dir": artifacts},
        "measure": {"batch_size": 8, "repeats": 1},
        "params": {"depth": {"int": [1, 2]}, "lr": {"float": [1e-4, 1e-2], "log": True}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {
            "sampler": "tpe",
            "n_trials": 4,
            "concurrency": 2,
            "seed": 0,
            "resources": {"cpus": 1, "gpus": 0.5},
            "keep_checkpoints": "front",
            **search,
        },
    }


def _interrupt_once_a_trial_completed(url: str, name: str, done: threading.Event) -> None:
    """SIGINT to this process (as Ctrl-C) once a trial completed and another runs."""
    from harness.store import Store

    deadline = time.time() + 600
    while time.time() < deadline and not done.is_set():
        time.sleep(0.5)
        try:
            with Store.open(url, create=False) as store:
                counts = store.counts(name) if name in store.study_names() else {}
        except Exception:
            continue
        if counts.get("completed", 0) >= 1 and counts.get("running", 0) >= 1:
            os.kill(os.getpid(), signal.SIGINT)
            return


def _check_records(url: str, name: str, world_size: int) -> list[dict]:
    """Every trial of ``name`` completed, compiled, and is recorded as what ran; returns the records."""
    import torch

    from harness.store import Store
    from search_space.cost_model import estimate_cost
    from trials.measurement.flops import count_flops
    from trials.models import build_model, count_parameters, resolve_config

    with Store.open(url, create=False) as store:
        trials = store.trials(name, flatten_config=False).set_index("number").sort_index()
    assert (trials["status"] == "completed").all(), trials[["status", "error"]]
    for number, row in trials.iterrows():
        model_config = row["config"]["model"]
        # The model the data built (32 px, 3 channels, 4 classes), not the preset's; the augmentation recorded.
        assert (model_config["image_size"], model_config["in_chans"], model_config["num_classes"]) == (32, 3, 4)
        assert row["config"]["data"]["augment"] == {"hflip": True}
        model = build_model(model_config)
        assert count_parameters(model) == row["params"], number
        eager_flops = count_flops(model, torch.randn(1, 3, 32, 32)).total
        assert row["flops"] == eager_flops == estimate_cost(resolve_config(model_config)).flops, number
        # Compiled, regional, static; measured through the compiled forward; nothing recompiled.
        assert row["compiled"] == 1 and row["regional_compile"] == 1 and row["compiled_graphs"] > 0, number
        assert row["measured_compiled"] == 1 and row["recompiles"] == 0, number
        assert row["throughput"] > 0 and row["latency_ms"] > 0, number
        assert row["world_size"] == world_size, number
    return [dict(row) for _, row in trials.iterrows()]


@pytest.mark.slow
def test_a_gpu_users_default_search_runs_end_to_end_on_a_cpu(tmp_path):
    import optuna
    import ray

    from dashboards.pareto import study_front
    from harness import run_search
    from harness.search.checkpoints import kept_checkpoint
    from harness.search.interrupts import SearchInterrupted
    from harness.store import Store

    url = f"sqlite:///{tmp_path / 'store.db'}"
    results = tmp_path / "ray"
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir(mode=0o700)
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        # 1. Packed on shares of a (logical) GPU, interrupted as by Ctrl-C, resumed; the front re-timed
        #    alone on a whole GPU slot (``verify_front``, on by default for packed trials).
        done = threading.Event()
        watcher = threading.Thread(target=_interrupt_once_a_trial_completed, args=(url, "gpu-defaults", done))
        watcher.start()
        try:
            with pytest.raises(SearchInterrupted):
                run_search(_spec("gpu-defaults", str(artifacts)), store=url, results_dir=results)
        finally:
            done.set()
            watcher.join()
        study = run_search(name="gpu-defaults", resume=True, store=url, results_dir=results)
        assert study.record["status"] == "completed", study.record
        records = _check_records(url, "gpu-defaults", world_size=1)
        assert len(records) == 4
        assert any(r.get("throughput_shared") == 0 for r in records)  # CPU: not a GPU share, said so
        # The compile artifacts were saved for the cluster, and the front's checkpoints kept (only theirs).
        assert any(artifacts.rglob("*")), "no compile artifacts were shared"
        with Store.open(url, create=False) as store:
            front = {int(n) for n in study_front(store, "gpu-defaults", {"top1": "max", "flops": "min"})["number"]}
        experiment = results / "gpu-defaults"
        assert front and all(kept_checkpoint(experiment, n) is not None for n in front)
        assert all(kept_checkpoint(experiment, n) is None for n in set(range(4)) - front)

        # 2. Warm-started from it, each trial data-parallel over 2 workers, a GPU each (NCCL needs that).
        warm = _spec("gpu-defaults-dp", str(artifacts), n_trials=2, concurrency=1,
                     warm_start={"study": "gpu-defaults", "top": 0},
                     resources={"cpus": 1, "gpus": 1, "workers": 2})  # fmt: skip
        study = run_search(warm, store=url, results_dir=results)
        assert study.record["status"] == "completed", study.record
        assert len(_check_records(url, "gpu-defaults-dp", world_size=2)) == 2
        later = optuna.load_study(study_name="gpu-defaults-dp", storage=url).trials
        assert later[0].user_attrs.get("warm_start", "").startswith("gpu-defaults#")
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_the_device_checks_first_step_runs_a_default_search_as_a_cpu_smoke_run(tmp_path):
    """``benchmarks/gpu_check.sh`` part s, on the CPU and without Ray (a bare GPU node has torch alone):
    four packed trials at once, each completed, its FLOPs the cost model's; a JSON of rows."""
    import json

    from benchmarks import gpu_search_check

    out = tmp_path / "search.json"
    argv = ["--json", str(out), "--device", "cpu", "--compile", "false", "--no-ray", "--epochs", "1",
            "--train-size", "128", "--width", "32"]  # fmt: skip
    assert gpu_search_check.main(argv) == 0
    payload = json.loads(out.read_text())
    assert payload["problems"] == [] and payload["via"].startswith("run_trial")
    assert [row["status"] for row in payload["rows"]] == ["completed"] * 4
    assert all(row["flops"] == row["flops_cost_model"] > 0 for row in payload["rows"])
    # A trial that failed is a problem the step reports (and exits 1 on), not a row that passes.
    failed = {**payload["rows"][0], "status": "failed", "error": "RuntimeError: x"}
    assert gpu_search_check.problems([failed, *payload["rows"][1:]], expect_compiled=False)
    assert gpu_search_check.problems(payload["rows"], expect_compiled=True)  # CPU rows did not compile
