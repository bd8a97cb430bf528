"""The training step built for the GPU, tested where it can be: on the CPU, and on CUDA when one is visible.

* No host sync per step: divergence flags live on the device and are checked every N steps, yet the
  history of a healthy run is bit-for-bit the per-step-checked one, and a diverging run is still
  reported at its first bad step.
* ``training.compile``: the compiled path runs (on CPU too) and learns like the eager one; a
  compile failure falls back to eager with one warning, recorded in the trial.
* Packed trials: ``gpu_memory_fraction`` is validated; on CUDA an induced out-of-memory is a
  ``failed`` trial. The ``cuda`` tests are skipped, with the reason, where no GPU is visible.
"""

from __future__ import annotations

import pytest
import torch

from trials.config.trial_config import load_trial_config
from trials.configio import ConfigError
from trials.runner import run_trial

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")


def tiny(training: dict | None = None, **changes) -> dict:
    config = {
        "model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 192, "val_size": 64, "batch_size": 32},
        "training": {"epochs": 2, "lr": 1e-3, "compile": False, **(training or {})},
        "measure": {"latency": False, "throughput": False, "flops": False},
        "seed": 3,
    }
    config.update(changes)
    return config


def history(result) -> list[tuple]:
    return [(m.train_loss, m.eval_loss, m.top1, m.top5, m.step) for m in result.epochs]


def test_checking_divergence_every_n_steps_gives_the_same_history_as_every_step():
    every_step = run_trial(tiny({"divergence_check_every": 1}))
    batched = run_trial(tiny({"divergence_check_every": 4}))
    once_per_epoch = run_trial(tiny({"divergence_check_every": 1000}))
    assert every_step.status == batched.status == once_per_epoch.status == "completed"
    assert history(every_step) == history(batched) == history(once_per_epoch)  # exactly, not approximately


def test_a_diverging_run_is_still_reported_at_its_first_bad_step():
    diverging = {"lr": 1e7, "grad_clip": None, "warmup_epochs": 0}
    reference = run_trial(tiny({**diverging, "divergence_check_every": 1}))
    assert reference.status == "diverged" and reference.diverged_at_step >= 1
    for every in (3, 64):
        late = run_trial(tiny({**diverging, "divergence_check_every": every}))
        assert late.status == "diverged"
        assert late.diverged_at_step == reference.diverged_at_step, every
        assert late.error == reference.error


def test_compile_auto_is_off_on_cpu_and_validated():
    result = run_trial(tiny({"compile": "auto"}))
    assert result.status == "completed" and result.final["compiled"] == 0.0
    with pytest.raises(ConfigError, match=r"training\.compile: must be true, false or auto"):
        load_trial_config(tiny({"compile": "yes"}))
    with pytest.raises(ConfigError, match=r"training\.divergence_check_every"):
        load_trial_config(tiny({"divergence_check_every": 0}))
    with pytest.raises(ConfigError, match="gpu_memory_fraction: must be a number in"):
        load_trial_config(tiny(gpu_memory_fraction=1.5))


@pytest.mark.slow
def test_the_compiled_step_runs_on_cpu_and_learns_like_the_eager_one():
    compiled = run_trial(tiny({"compile": True}))
    eager = run_trial(tiny({"compile": False}))
    assert compiled.status == "completed" and compiled.final["compiled"] == 1.0, compiled.error
    for a, b in zip(compiled.epochs, eager.epochs, strict=True):
        assert a.train_loss == pytest.approx(b.train_loss, rel=1e-3)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-3)


# -- on a GPU ------------------------------------------------------------------------------------------


@pytest.mark.cuda
@CUDA
def test_a_bf16_trial_on_cuda_learns_keeps_data_on_the_device_and_records_memory():
    from trials.config.data_config import DataConfig
    from trials.data import build_data

    config = tiny({"epochs": 3, "lr": 2e-3, "compile": False}, device="cuda", precision="auto")
    config["measure"] = {"latency": True, "throughput": True, "flops": False, "repeats": 3}
    result = run_trial(config)
    assert result.status == "completed", result.error
    assert result.cost.dtype == "bf16"
    assert result.epochs[-1].train_loss < result.epochs[0].train_loss
    assert all(m.peak_memory_mb and m.peak_memory_mb > 0 for m in result.epochs)
    assert all(m.peak_reserved_mb >= m.peak_memory_mb for m in result.epochs)
    assert result.runtime["device"] == "cuda:0" and result.final["cudnn_benchmark"] == 1.0
    assert result.cost.peak_memory_bytes and result.cost.peak_memory_bytes > 0
    assert result.epochs[-1].data_wait_fraction < 0.5
    bundle = build_data(DataConfig(name="synthetic", num_classes=4, train_size=64, val_size=32), torch.device("cuda"))
    images, labels = next(iter(bundle.train))
    assert images.is_cuda and labels.is_cuda  # in-memory data lives on the GPU


@pytest.mark.cuda
@CUDA
def test_an_out_of_memory_trial_is_failed_not_a_crash():
    # The smallest share the search accepts (the 1 GiB a CUDA process needs outside the allocator,
    # plus 256 MiB for it), then a model that needs far more than 256 MiB.
    total = torch.cuda.get_device_properties(0).total_memory
    config = tiny(device="cuda", gpu_memory_fraction=(1.25 * 2**30) / total)
    config["model"] = {**config["model"], "embed_dim": 1024, "depth": 12, "num_heads": 16}
    config["data"] = {**config["data"], "train_size": 1024, "batch_size": 1024, "image_size": 224}
    result = run_trial(config)
    assert result.status == "failed" and "out of memory" in result.error.lower()
    after = run_trial(tiny(device="cuda"))  # the process (a reused worker) can still train
    assert after.status == "completed"


@pytest.mark.cuda
@CUDA
def test_compiled_and_eager_bf16_steps_agree_on_cuda():
    compiled = run_trial(tiny({"compile": True, "epochs": 3}, device="cuda"))
    eager = run_trial(tiny({"compile": False, "epochs": 3}, device="cuda"))
    assert compiled.final["compiled"] == 1.0 and compiled.status == eager.status == "completed"
    for a, b in zip(compiled.epochs, eager.epochs, strict=True):
        assert a.train_loss == pytest.approx(b.train_loss, rel=0.03)  # bf16 tolerance


@pytest.mark.cuda
@CUDA
def test_steady_state_training_steps_never_wait_for_the_host():
    """Under sync debug mode "error" any host synchronisation in a step raises."""
    from trials.runner import _build

    config = load_trial_config(tiny({"compile": False, "epochs": 1, "divergence_check_every": 10_000}, device="cuda"))
    trainer = _build(config, {})
    batches = iter(trainer.data.train)  # the epoch's plan is copied to the device once, at the first batch
    losses = torch.zeros(4, device=trainer.device)
    norms = torch.zeros(4, device=trainer.device)
    for _ in range(2):  # warm-up: allocations, cuDNN autotuning
        trainer.train_step(*next(batches))
        trainer.optimizer.step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for i in range(4):
            losses[i], norms[i] = trainer.train_step(*next(batches))
            trainer.optimizer.step()
            trainer.scheduler.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(losses).all() and torch.isfinite(norms).all()


_PACKED_TRIAL = """
import json, sys
sys.path.insert(0, sys.argv[1])
from trials.runner import run_trial
result = run_trial(json.loads(sys.argv[2]))
print(json.dumps({"status": result.status, "error": result.error, "runtime": result.runtime}))
"""


@pytest.mark.cuda
@CUDA
def test_two_packed_trials_one_runs_out_of_memory_the_other_completes():
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).parents[1])
    greedy = tiny({"epochs": 1}, device="cuda", gpu_memory_fraction=0.5)
    greedy["model"] = {**greedy["model"], "embed_dim": 1024, "depth": 12, "num_heads": 16}
    greedy["data"] = {**greedy["data"], "train_size": 4096, "batch_size": 4096, "image_size": 224}
    modest = tiny({"epochs": 2}, device="cuda", gpu_memory_fraction=0.5)
    children = [
        subprocess.Popen([sys.executable, "-c", _PACKED_TRIAL, root, json.dumps(c)], stdout=subprocess.PIPE, text=True)
        for c in (greedy, modest)
    ]
    outcomes = [json.loads(child.communicate(timeout=600)[0].strip().splitlines()[-1]) for child in children]
    assert outcomes[0]["status"] == "failed" and "out of memory" in outcomes[0]["error"].lower()
    assert outcomes[1]["status"] == "completed", outcomes[1]["error"]
    assert all(0 < o["runtime"]["gpu_memory_cap_fraction"] < 0.5 for o in outcomes)


@pytest.mark.cuda
@CUDA
def test_a_retried_trial_stays_within_its_memory_cap():
    config = tiny({"epochs": 3}, device="cuda", gpu_memory_fraction=0.5)
    full = run_trial(config)
    saved = {}

    def stop_after_first(metrics, trainer):
        saved["state"] = {k: v for k, v in trainer.state_dict().items()}
        return True

    run_trial(config, callback=stop_after_first)
    state = torch.load(_roundtrip(saved.pop("state")), map_location="cpu", weights_only=True)
    handed_over = [state]
    del state
    resumed = run_trial(config, resume_state=handed_over.pop)
    assert resumed.status == full.status == "completed", resumed.error
    cap_mb = resumed.runtime["gpu_memory_cap_bytes"] / 2**20
    assert resumed.final["train_peak_reserved_mb"] <= cap_mb
    assert resumed.final["train_peak_memory_mb"] <= full.final["train_peak_memory_mb"] * 1.05  # no second copy


def _roundtrip(state):
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


@pytest.mark.slow
def test_the_gpu_benchmark_runs_with_torch_alone_as_a_cpu_smoke_run(tmp_path):
    """benchmarks/gpu.py must keep working where it is meant to run: no Optuna, Ray, SQLAlchemy, pydantic."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parents[1]
    blocker = tmp_path / "sitecustomize.py"  # make the heavy packages unimportable in the child
    blocker.write_text(
        "import sys\n"
        "for name in ('optuna', 'ray', 'sqlalchemy', 'pydantic', 'alembic', 'psycopg'):\n"
        "    sys.modules[name] = None\n"
    )
    out = tmp_path / "gpu.json"
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}"}
    command = [sys.executable, "-m", "benchmarks.gpu", "--device", "cpu", "--quick", "--parts", "b"]
    done = subprocess.run(
        [*command, "--json", str(out)], capture_output=True, text=True, timeout=600, env=env, cwd=root
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["b"]
    assert {r["model"] for r in rows} == {"coatnet_tiny32", "cait_tiny32"}
    assert all(r["train img/s"] > 0 and 0 <= r["data wait %"] < 100 for r in rows)
