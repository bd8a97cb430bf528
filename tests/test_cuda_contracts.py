"""The CUDA path, checked on a CPU: every call a trial makes into ``torch.cuda``, and the GPU logic around it.

No GPU is lent to this project, yet users run archsearch on GPU clusters. The pinned torch is a
CUDA build, so every ``torch.cuda`` function exists; the ``stubbed_cuda`` fixture stubs CUDA's
initialisation (and the device's properties), records the private setters the public API ends
in, and records the first moves of tensors and modules to the device. A trial then runs its real
code up to its first real allocation, which fails for lack of a GPU, and the test checks the
arguments and the order of what came before.

The compile tests use torch.compile for real, with backends registered here (one that fails to
compile, one whose graph runs out of memory, one whose backward fails to compile), because what
matters is what the trainer does with each kind of failure.
"""

from __future__ import annotations

import gc
import json
import sys
import weakref
from types import SimpleNamespace

import pytest
import torch
from test_gpu_training import tiny  # the same tiny CaiT trial as the GPU training tests

from trials.config.data_config import DataConfig
from trials.data import auto_loader_processes, build_data, loader_processes_for
from trials.devices import gpu
from trials.runner import run_trial
from trials.training.train import Trainer

GIB = 2**30


def _targets_cuda(args, kwargs) -> bool:
    for value in (*args, kwargs.get("device")):
        if isinstance(value, torch.device) and value.type == "cuda":
            return True
        if isinstance(value, str) and value.startswith("cuda"):
            return True
    return False


@pytest.fixture
def cuda_backend_flags():
    """configure_backends sets cuDNN autotuning and TF32 on CUDA: put them back for the other tests."""
    flags = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield
    torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


@pytest.fixture
def stubbed_cuda(monkeypatch, cuda_backend_flags):
    """CUDA as a CPU machine can fake it: an 80 GiB 'H100', calls recorded, allocations refused."""
    events: list[tuple] = []
    properties = SimpleNamespace(total_memory=80 * GIB, name="NVIDIA H100 80GB HBM3 (stubbed)")
    for name in gpu.ALLOC_CONF_VARIABLES:  # a CUDA trial sets the allocator's: put them back afterwards
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch.cuda.memory, "_lazy_init", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: properties)
    monkeypatch.setattr(
        torch._C, "_cuda_setMemoryFraction", lambda fraction, index: events.append(("memory_fraction", fraction, index))
    )
    tensor_to, module_to = torch.Tensor.to, torch.nn.Module.to

    def recording_tensor_to(self, *args, **kwargs):
        if _targets_cuda(args, kwargs):
            events.append(("tensor_to_cuda",))
            raise RuntimeError("stubbed CUDA: this machine has no GPU memory to allocate")
        return tensor_to(self, *args, **kwargs)

    def recording_module_to(self, *args, **kwargs):
        if _targets_cuda(args, kwargs):
            events.append(("module_to_cuda",))
            raise RuntimeError("stubbed CUDA: this machine has no GPU memory to allocate")
        return module_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", recording_tensor_to)
    monkeypatch.setattr(torch.nn.Module, "to", recording_module_to)
    return events


# -- the memory cap --------------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cuda", "auto", "cuda:0"])
def test_a_cuda_trial_caps_its_memory_with_an_integer_index_and_a_float_before_anything_is_allocated(
    stubbed_cuda, device
):
    result = run_trial(tiny(device=device, gpu_memory_fraction=0.25))
    assert result.status == "failed" and "stubbed CUDA" in result.error  # no real GPU: fails at its first allocation
    kind, fraction, index = stubbed_cuda[0]
    assert kind == "memory_fraction", stubbed_cuda
    assert type(index) is int and index == 0
    assert type(fraction) is float and fraction == pytest.approx(0.25 - 1 / 80) and fraction < 0.25
    assert stubbed_cuda[1][0] in ("tensor_to_cuda", "module_to_cuda")  # the first allocation came after the cap
    assert result.runtime["device"] == "cuda:0"
    assert result.runtime["gpu_memory_cap_bytes"] == int((0.25 - 1 / 80) * 80 * GIB)


def test_an_integer_share_of_one_is_the_whole_gpu_as_a_float(stubbed_cuda):
    result = run_trial(tiny(device="cuda", gpu_memory_fraction=1))
    assert stubbed_cuda[0] == ("memory_fraction", 1.0, 0) and type(stubbed_cuda[0][1]) is float
    unpacked = run_trial(tiny(device="cuda"))  # no share: the whole GPU (undoes an earlier trial's cap)
    assert stubbed_cuda[2] == ("memory_fraction", 1.0, 0)
    assert result.status == unpacked.status == "failed" and "stubbed CUDA" in unpacked.error


def test_a_cuda_trial_turns_on_cudnn_autotuning_and_tf32_and_records_them(stubbed_cuda):
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    result = run_trial(tiny(device="cuda"))
    assert result.runtime["cudnn_benchmark"] is True and result.runtime["tf32_matmul"] is True
    assert gpu.configure_backends(torch.device("cpu")) == {"cudnn_benchmark": True, "tf32_matmul": True}


def test_packed_shares_leave_each_process_its_memory_outside_the_allocator():
    total = 80 * GIB
    for n in (1, 2, 4, 8):
        cap = gpu.memory_cap_fraction(1 / n, total)
        if n == 1:
            assert cap == 1.0
        else:
            assert cap == pytest.approx(1 / n - gpu.PROCESS_OVERHEAD_BYTES / total)
            assert n * (cap * total + gpu.PROCESS_OVERHEAD_BYTES) <= total * (1 + 1e-12)
    assert gpu.memory_cap_fraction(None, total) == 1.0
    with pytest.raises(gpu.GpuShareError, match=r"leaves nothing after the 1\.0 GiB"):
        gpu.memory_cap_fraction(0.1, 8 * GIB)


def test_a_share_too_small_for_one_process_is_a_config_error_naming_the_key(stubbed_cuda, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(total_memory=8 * GIB))
    result = run_trial(tiny(device="cuda", gpu_memory_fraction=0.1))
    assert result.status == "failed"
    assert result.error.startswith("ConfigError: gpu_memory_fraction: a share of 0.1 of a 8.0 GiB GPU")
    assert stubbed_cuda == []  # nothing set, nothing allocated


def test_the_benchmark_packs_trials_through_the_same_share(stubbed_cuda, monkeypatch):
    """benchmarks/gpu.py hands each packed child the share a search gives it; run_trial applies the
    one formula to it (the cap a packed trial of the benchmark and of a search get is the same)."""
    from benchmarks.gpu import packed_trial_config

    base = tiny(device="cuda")
    for n in (2, 4, 8):
        packed = packed_trial_config(base, torch.device("cuda"), n)
        assert packed["gpu_memory_fraction"] == 1 / n and "gpu_memory_fraction" not in base
    assert "gpu_memory_fraction" not in packed_trial_config(base, torch.device("cuda"), 1)
    assert "gpu_memory_fraction" not in packed_trial_config(base, torch.device("cpu"), 4)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(total_memory=8 * GIB))
    run_trial(packed_trial_config(base, torch.device("cuda"), 4))
    assert stubbed_cuda[0] == ("memory_fraction", gpu.memory_cap_fraction(0.25, 8 * GIB), 0)


def test_the_benchmark_configures_the_backends_as_a_trial_does(tmp_path, monkeypatch):
    """The benchmark's header reports the backend settings a trial runs with, set by the same call."""
    import benchmarks.gpu as bench

    calls = []

    def recording(device):
        calls.append(device)
        return {"cudnn.benchmark": "recorded"}

    monkeypatch.setattr(bench, "configure_backends", recording)
    out = tmp_path / "gpu.json"
    bench.main(["--device", "cpu", "--quick", "--parts", "", "--json", str(out)])
    assert calls == [torch.device("cpu")]
    assert json.loads(out.read_text())["header"]["cudnn.benchmark"] == "recorded"


# -- compilation -----------------------------------------------------------------------------------


def _register(name: str, backend) -> str:
    from torch._dynamo import register_backend
    from torch._dynamo.backends.registry import _COMPILER_FNS

    if name not in _COMPILER_FNS:
        register_backend(backend, name=name)
    return name


def _broken_backend(gm, example_inputs):
    raise RuntimeError("backend unavailable on this machine")


def _oom_when_run_backend(gm, example_inputs):
    def run(*args):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (stubbed in the compiled graph)")

    return run


def _oom_while_compiling_backend(gm, example_inputs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB (stubbed during autotuning)")


def _backward_broken_backend():
    from torch._dynamo.backends.common import aot_autograd

    def forward_compiler(gm, example_inputs):
        return gm.forward

    def backward_compiler(gm, example_inputs):
        raise RuntimeError("backward codegen failed (stubbed)")

    return aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)


def test_a_compile_failure_falls_back_to_eager_with_one_warning():
    backend = _register("archsearch_test_broken", _broken_backend)
    with pytest.warns(RuntimeWarning, match="torch.compile failed") as caught:
        result = run_trial(tiny({"compile": True, "compile_backend": backend}))
    eager = run_trial(tiny({"compile": False}))
    assert len([w for w in caught if "torch.compile failed" in str(w.message)]) == 1
    assert result.status == "completed" and result.final["compiled"] == 0.0, result.error
    assert len(result.notes) == 1 and result.notes[0].startswith("torch.compile failed (BackendCompilerFailed")
    assert "backend unavailable on this machine" in result.notes[0] and result.notes[0].endswith("ran eagerly")
    assert [m.train_loss for m in result.epochs] == [m.train_loss for m in eager.epochs]  # nothing ran twice


def test_a_backward_compile_failure_falls_back_as_well():
    backend = _register("archsearch_test_backward_broken", _backward_broken_backend())
    with pytest.warns(RuntimeWarning, match="backward codegen failed"):
        result = run_trial(tiny({"compile": True, "compile_backend": backend}))
    eager = run_trial(tiny({"compile": False}))
    assert result.status == "completed" and result.final["compiled"] == 0.0, result.error
    assert [m.train_loss for m in result.epochs] == pytest.approx([m.train_loss for m in eager.epochs], rel=1e-5)


@pytest.mark.parametrize("backend", [_oom_when_run_backend, _oom_while_compiling_backend])
def test_an_out_of_memory_in_the_first_compiled_call_is_an_oom_not_a_compile_failure(backend):
    name = _register(f"archsearch_test_{backend.__name__.strip('_')}", backend)
    result = run_trial(tiny({"compile": True, "compile_backend": name}))
    assert result.status == "failed"
    assert "out of memory" in result.error.lower()
    assert not any("torch.compile failed" in note for note in result.notes)
    assert result.epochs == []


def test_the_eager_retry_runs_after_the_failed_attempts_exception_is_released(monkeypatch):
    import trials.compilation.compiled_forward as compiled_forward

    seen = []

    def spy(device):
        seen.append(sys.exc_info()[0])  # inside an except block this is the compile error

    monkeypatch.setattr(compiled_forward, "release_memory", spy)
    backend = _register("archsearch_test_broken", _broken_backend)
    with pytest.warns(RuntimeWarning):
        result = run_trial(tiny({"compile": True, "compile_backend": backend}))
    assert result.status == "completed" and seen == [None]


def test_an_unknown_compile_backend_is_a_config_error():
    result = run_trial(tiny({"compile": True, "compile_backend": "no_such_backend"}))
    assert result.status == "failed"
    assert result.error.startswith("ConfigError: training.compile_backend: 'no_such_backend'")


@pytest.mark.slow
def test_eight_architectures_compiled_one_after_another_in_one_process_each_compile():
    """As a reused Ray actor runs them: without a compiler reset per trial, Dynamo's 8 variants per
    code object fill after about four CaiT trials and the rest silently run eagerly."""
    from torch._dynamo.utils import counters

    shapes = [(32, 1), (64, 1), (32, 2), (64, 2), (32, 3), (64, 3), (96, 1), (96, 2)]
    for embed_dim, depth in shapes:
        model = {"preset": "cait_tiny32", "depth": depth, "embed_dim": embed_dim, "num_heads": 2, "ca_depth": 1}
        before = counters["stats"]["unique_graphs"]
        result = run_trial(tiny({"compile": True, "compile_backend": "eager", "epochs": 1}, model=model))
        added = counters["stats"]["unique_graphs"] - before
        assert result.status == "completed", result.error
        assert added > 0, (embed_dim, depth)
        assert result.final["compiled"] == 1.0 and result.final["compiled_graphs"] == added


def test_epoch_one_leaves_the_compiling_step_out_and_records_compile_seconds():
    result = run_trial(tiny({"compile": True, "compile_backend": "eager", "epochs": 2}))
    assert result.status == "completed", result.error
    assert result.final["compile_s"] > 0
    first, second = result.epochs
    steps_per_epoch, batch = 192 // 32, 32
    assert first.train_images_per_s * first.epoch_time == pytest.approx((steps_per_epoch - 1) * batch)
    assert second.train_images_per_s * second.epoch_time == pytest.approx(steps_per_epoch * batch)


# -- resuming, failing, and what a failed trial leaves behind --------------------------------------


def test_a_resumed_trial_drops_the_loaded_state_once_applied():
    config = tiny({"epochs": 2})
    saved = {}

    def keep_first(metrics, trainer):
        saved["state"] = trainer.state_dict()
        return True

    run_trial(config, callback=keep_first)
    state = saved.pop("state")
    probe = weakref.ref(next(iter(state["model"].values())))
    handed_over = [state]
    del state
    alive_during_training = []

    def check(metrics, trainer):
        gc.collect()
        alive_during_training.append(probe() is not None)

    resumed = run_trial(config, callback=check, resume_state=handed_over.pop)
    assert resumed.status == "completed" and [m.epoch for m in resumed.epochs] == [1, 2]
    assert alive_during_training == [False]


def test_checkpoints_load_onto_the_cpu_and_as_weights_only(tmp_path, monkeypatch):
    from harness.search.worker.trainable import CHECKPOINT_FILE, load_checkpoint

    saved = {}

    def keep(metrics, trainer):
        saved["state"] = trainer.state_dict()
        return True

    run_trial(tiny(), callback=keep)
    torch.save(saved["state"], tmp_path / CHECKPOINT_FILE)
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k) or real_load(*a, **k))
    state = load_checkpoint(tmp_path)  # a real trainer state passes the weights-only unpickler
    assert calls == [{"map_location": "cpu", "weights_only": True}]
    assert state["epoch"] == 1 and all(t.device.type == "cpu" for t in state["model"].values())


def test_a_failed_trial_releases_its_memory_after_the_except_block(monkeypatch):
    import trials.runner as runner

    seen = []

    def spy(device):
        gc.collect()
        seen.append((sys.exc_info()[0], sum(type(o) is Trainer for o in gc.get_objects())))

    monkeypatch.setattr(runner, "release_memory", spy)

    def data_error(metrics, trainer):
        raise OSError("the data server went away")

    result = run_trial(tiny(), callback=data_error)
    assert result.status == "failed" and "the data server went away" in result.error
    assert seen == [(None, 0)]  # no exception in flight, no trainer (model, optimiser) alive


def test_a_sticky_cuda_error_marks_the_worker_unusable_and_an_oom_does_not():
    sticky = torch.AcceleratorError("CUDA error: an illegal memory access was encountered")
    assert gpu.is_sticky_cuda_error(sticky) and not gpu.is_out_of_memory(sticky)
    assert gpu.is_sticky_cuda_error(RuntimeError("CUDA error: device-side assert triggered"))
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")
    assert gpu.is_out_of_memory(oom) and not gpu.is_sticky_cuda_error(oom) and not gpu.is_compile_error(oom)

    def broken_context(metrics, trainer):
        raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")

    result = run_trial(tiny(), callback=broken_context)
    assert result.status == "failed" and result.worker_unusable
    assert not run_trial(tiny(), callback=lambda m, t: (_ for _ in ()).throw(oom)).worker_unusable


def test_the_trainable_ends_a_worker_whose_cuda_context_is_broken(monkeypatch):
    """Ray never reuses the actor of a trial that raised; the trainable raises for exactly this case
    (run for real on a stubbed Ray: a grep of its source let a mutant that returned first survive)."""
    from harness.search.result_keys import NUMBER_KEY
    from harness.search.worker import trainable
    from search_space.spec import SearchSpec
    from trials.runner import TrialResult

    reports = []
    context = SimpleNamespace(get_assigned_resources=lambda: {"CPU": 1.0}, get_node_id=lambda: "node")
    monkeypatch.setattr(trainable, "ray", SimpleNamespace(get_runtime_context=lambda: context, get_gpu_ids=lambda: [0]))
    monkeypatch.setattr(trainable, "tune", SimpleNamespace(get_checkpoint=lambda: None, report=reports.append))
    base = {"preset": "cait_tiny32", "embed_dim": 32, "num_heads": 2}
    spec = SearchSpec.model_validate({"name": "w", "family": "cait", "base_model": base, "objectives": {"top1": "max"}})

    def outcome(unusable: bool):
        def run_trial(config, **kwargs):
            error = "AcceleratorError: illegal memory access"
            return TrialResult(status="failed", config=config, error=error, worker_unusable=unusable)

        return run_trial

    monkeypatch.setattr(trainable.runner, "run_trial", outcome(True))
    with pytest.raises(trainable.WorkerUnusable, match="CUDA context is broken"):
        trainable.search_trainable({NUMBER_KEY: 0}, spec.model_dump(mode="json"))
    assert reports == []  # nothing reported: the trial fails by raising, and Ray ends the actor
    monkeypatch.setattr(trainable.runner, "run_trial", outcome(False))
    trainable.search_trainable({NUMBER_KEY: 1}, spec.model_dump(mode="json"))  # an ordinary failure: reported
    assert reports[-1]["archsearch_status"] == "failed"


# -- data path -------------------------------------------------------------------------------------


def test_data_loader_workers_stay_within_the_trials_cpus():
    assert auto_loader_processes(cpus=1) == 0  # a packed cpus: 1 trial loads in its own process
    assert auto_loader_processes(cpus=2) <= 1
    assert loader_processes_for(DataConfig(num_workers=8), cpus=2) == 2
    config = tiny(cpus=1)
    config["data"] = {**config["data"], "augment": {"randaugment": [2, 9]}}  # the DataLoader path
    result = run_trial({**config, "training": {**config["training"], "epochs": 1}})
    assert result.status == "completed", result.error
    assert result.runtime["data_workers"] == 0 and result.final["data_workers"] == 0.0


def test_channels_last_batches_reach_the_model_without_another_copy():
    config = DataConfig(name="synthetic", num_classes=4, train_size=64, val_size=32, batch_size=16)
    bundle = build_data(config, "cpu", channels_last=True)
    images, _ = next(iter(bundle.train))  # random crop + flip, then normalised
    val_images, _ = next(iter(bundle.val))
    from trials.config.trial_config import TrainingConfig
    from trials.models import build_model

    model = build_model("coatnet_tiny32", num_classes=4, image_size=bundle.image_size)
    trainer = Trainer(model, bundle, TrainingConfig(epochs=1, compile=False), torch.device("cpu"), channels_last=True)
    for batch in (images, val_images):
        assert batch.is_contiguous(memory_format=torch.channels_last)
        assert trainer._prepare(batch) is batch  # no conversion in the step


def test_every_datasheet_name_finds_its_own_peak_not_one_it_contains():
    """Issue 35: a GH200 was labelled H200 (its name contains H200, listed first)."""
    names = {
        "NVIDIA GH200 480GB": "GH200",
        "NVIDIA H200": "H200 SXM",
        "NVIDIA H100 80GB HBM3": "H100 SXM",
        "NVIDIA H100 PCIe": "H100 PCIe",
        "NVIDIA H100 NVL": "H100 NVL",
        "NVIDIA A100-SXM4-80GB": "A100",
    }
    for device, label in names.items():
        assert gpu.datasheet_peak(device)[0].startswith(label), device
    for key, _, _ in gpu.DATASHEET_BF16_DENSE_TFLOPS:  # no key shadowed by an earlier one it contains
        assert gpu.datasheet_peak(f"NVIDIA {key}")[0].startswith(key), key
    assert gpu.datasheet_peak("Tesla T4") is None


def test_a_resident_batch_on_the_current_gpu_counts_as_on_cuda_and_only_host_tensors_are_pinned(monkeypatch):
    """Found on an H200: ``torch.device("cuda:0") != torch.device("cuda")``, so data built for
    ``"cuda"`` was sent through the host copy and pinning a CUDA tensor raised."""
    from trials.data.sources import _to_device, is_on

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    on = SimpleNamespace  # is_on reads only ``.device``
    assert is_on(on(device=torch.device("cuda", 1)), torch.device("cuda"))
    assert is_on(on(device=torch.device("cuda", 1)), torch.device("cuda", 1))
    assert not is_on(on(device=torch.device("cuda", 0)), torch.device("cuda"))
    assert not is_on(on(device=torch.device("cpu")), torch.device("cuda"))
    assert is_on(on(device=torch.device("cpu")), torch.device("cpu"))

    calls = []

    class Batch:
        def __init__(self, device):
            self.device = torch.device(device)

        def pin_memory(self):
            calls.append("pin")
            return self

        def to(self, device, non_blocking=False):
            calls.append(("to", str(device), non_blocking))
            return self

    _to_device(Batch("cpu"), torch.device("cuda"))
    _to_device(Batch("cuda:0"), torch.device("cuda", 1))
    assert calls == ["pin", ("to", "cuda", True), ("to", "cuda:1", True)]
