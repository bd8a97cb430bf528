"""Cost numbers the front can trust (issue 35, point 4) and the smaller GPU items of its point 6.

* A trial times the forward it trains with (compiled when it compiles), at its training batch and at
  batch 1, after a stated warm-up, with CUDA events on CUDA; a packed trial's throughput is flagged
  as measured on a shared device.
* ``archsearch verify`` runs as a Ray task: a whole GPU for a GPU study, refused (never a CPU
  stand-in) where the cluster has none; ``search.verify_front`` is on by default for packed trials.
* Expandable segments for CUDA trials, fp16 with loss scaling where a GPU lacks bf16, checkpoints
  at a pace the spec sets, channels-last in the benchmark's inference part, the MFU formula.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from test_cuda_contracts import cuda_backend_flags, stubbed_cuda  # noqa: F401 (fixtures)
from test_gpu_training import tiny

from trials.devices import gpu
from trials.measurement import machine_load, measure, timing
from trials.runner import run_trial
from trials.training.train import resolve_dtype

# -- timing and the in-trial measurement -----------------------------------------------------------


def test_cuda_work_is_timed_with_cuda_events_and_cpu_work_with_the_host_clock(monkeypatch):
    """With CUDA stubbed: the events are recorded around the call, the end event is waited on, and
    their elapsed time (ms) is the result; the host clock is not read on CUDA."""
    calls = []

    class Event:
        def __init__(self, enable_timing: bool = False):
            assert enable_timing
            self.name = "start" if not any(c[0] == "new" for c in calls) else "end"
            calls.append(("new", self.name))

        def record(self, stream=None):
            calls.append(("record", self.name))

        def synchronize(self):
            calls.append(("synchronize", self.name))

        def elapsed_time(self, end):
            calls.append(("elapsed", self.name, end.name))
            return 250.0

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(("device_sync",)))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: pytest.fail("host clock read on CUDA"))
    cuda = torch.device("cuda", 0)
    seconds = timing.time_once(lambda: calls.append(("work",)), cuda)
    assert seconds == 0.25
    assert calls == [("new", "start"), ("new", "end"), ("record", "start"), ("work",), ("record", "end"),
                     ("synchronize", "end"), ("elapsed", "start", "end")]  # fmt: skip
    calls.clear()
    result = timing.time_repeated(lambda: calls.append(("work",)), cuda, warmup=3, repeats=2)
    assert result.seconds == (0.25, 0.25) and calls[:4] == [("work",)] * 3 + [("device_sync",)]
    assert timing.timer_name(cuda) == "cuda_events" and timing.timer_name(torch.device("cpu")) == "perf_counter"
    assert measure.default_warmup(cuda) == measure.CUDA_WARMUP == 10 and measure.default_warmup("cpu") == 2


def test_a_trial_measures_at_its_training_batch_and_batch_one_and_says_how():
    config = tiny({"epochs": 1}, measure={"flops": False, "repeats": 2})
    result = run_trial(config)
    cost = result.cost
    assert result.status == "completed", result.error
    assert cost.batch_size == config["data"]["batch_size"] == 32  # not a fixed 64
    assert cost.throughput > 0 and cost.latency_ms > 0
    assert (cost.warmup, cost.repeats, cost.timer) == (measure.CPU_WARMUP, 2, "perf_counter")
    assert not cost.compiled and "compile" in cost.compile_note and not cost.throughput_shared
    assert result.runtime["throughput_shared"] == 0.0 == result.final["throughput_shared"]
    assert result.final["measured_compiled"] == 0.0 and result.final["measure_warmup"] == 2.0
    explicit = run_trial(tiny({"epochs": 1}, measure={"flops": False, "latency": False, "batch_size": 8}))
    assert explicit.cost.batch_size == 8


def test_a_compiled_trial_is_measured_through_its_compiled_forward():
    result = run_trial(tiny({"epochs": 1, "compile": True, "compile_backend": "eager"},
                            measure={"flops": False, "repeats": 1, "warmup": 1}))  # fmt: skip
    cost = result.cost
    assert result.status == "completed", result.error
    assert cost.compiled and cost.compile_note is None and cost.compile_s > 0
    assert result.final["measured_compiled"] == 1.0 and result.final["measure_compile_s"] > 0
    assert result.final["compiled"] == 1.0  # training still compiled after the measurement's graphs


def test_a_packed_gpu_trial_flags_its_throughput_as_shared():
    from trials.config.trial_config import load_trial_config
    from trials.runner import _device_shared

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    packed, whole = load_trial_config(tiny(gpu_memory_fraction=0.25)), load_trial_config(tiny())
    assert _device_shared(packed, cuda) and not _device_shared(whole, cuda) and not _device_shared(packed, cpu)
    assert not _device_shared(load_trial_config(tiny(gpu_memory_fraction=1)), cuda)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
    cost = measure.measure_cost(model, 8, batch_size=4, repeats=1, flops=False, shared=True)
    assert cost.throughput_shared and cost.to_dict()["throughput_shared"] is True


# -- verify: a Ray task on a whole GPU, or refused -------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    """One small local Ray for this module's verify tests (a CPU-only cluster: no GPU anywhere)."""
    import logging

    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


def _study(url: str, gpus: float = 0.0, device: str = "cpu (x86_64, 2 threads)") -> None:
    from test_verify import SPEC

    from harness.store import Store
    from search_space.sampling import build_trial_config
    from search_space.validation import load_spec

    spec = load_spec({**SPEC, "search": {"resources": {"gpus": gpus}}}, check_paths=False)
    with Store.open(url) as store:
        store.create_study("fast", spec.model_dump(mode="json"), dict(spec.objectives))
        for number, params, top1, rate in ((0, {"depth": 1, "embed_dim": 32}, 60.0, 100.0),
                                           (1, {"depth": 2, "embed_dim": 32}, 50.0, 200.0)):  # fmt: skip
            measured = {"throughput": rate, "batch_size": 4, "image_size": 32, "dtype": "fp32", "device": device}
            store.finish_trial("fast", number, status="completed", config=build_trial_config(spec, params),
                               measurement=measured, final={"top1": top1})  # fmt: skip


class _RecordingRay:
    """The real Ray, with the options of each remote call recorded."""

    def __init__(self, ray):
        self._ray, self.options = ray, []

    def __getattr__(self, name):
        return getattr(self._ray, name)

    def remote(self, fn):
        remote, recorded = self._ray.remote(fn), self.options

        class Options:
            def options(self, **options):
                recorded.append((fn.__name__, options))
                return remote.options(**options)

        return Options()


def test_verify_of_a_cpu_study_runs_as_a_ray_task_on_one_cpu(tmp_path, local_ray, monkeypatch):
    from harness import verify
    from harness.store import Store

    url = f"sqlite:///{tmp_path / 'store.db'}"
    _study(url)
    recording = _RecordingRay(local_ray)
    monkeypatch.setattr(verify, "ray", recording)
    table = verify.verify_front(url, "fast", verify.VerifySettings(repeats=2, warmup=1))
    assert recording.options == [("time_front", {"num_gpus": 0, "num_cpus": 1, "max_retries": 0})]
    assert set(table["number"]) == {0, 1} and (table["throughput_verified"] > 0).all()
    with Store.open(url, create=False) as store:
        verified = store.verified("fast")
    assert list(verified["rounds"]) == [2, 2] and verified["device"].str.startswith("cpu").all()
    assert local_ray.is_initialized()  # a Ray this process already ran is left running


def test_verify_of_a_gpu_study_on_a_cluster_without_gpus_is_refused_not_timed_on_a_cpu(tmp_path, local_ray):
    from click.testing import CliRunner

    from harness.cli import main
    from harness.store import Store
    from harness.verify import VerifyError, VerifySettings, verify_front

    url = f"sqlite:///{tmp_path / 'store.db'}"
    _study(url, gpus=0.25, device="NVIDIA H100 80GB HBM3")
    with pytest.raises(VerifyError, match="trials ran on GPUs, but the Ray cluster has no GPU"):
        verify_front(url, "fast", VerifySettings(repeats=1))
    result = CliRunner().invoke(main, ["verify", "fast", "--store", url, "--repeats", "1"])
    assert result.exit_code == 2 and "has no GPU" in result.output and "Traceback" not in result.output
    with Store.open(url, create=False) as store:
        assert store.verified("fast").empty  # nothing timed, nothing stored


def test_verify_waits_for_no_one_a_cluster_whose_gpus_are_all_busy_is_refused(monkeypatch):
    from harness import verify

    busy = SimpleNamespace(cluster_resources=lambda: {"GPU": 4.0}, available_resources=lambda: {"GPU": 0.75})
    monkeypatch.setattr(verify, "ray", busy)
    with pytest.raises(verify.VerifyError, match=r"no whole GPU is free on the Ray cluster \(0.75 of 4 free\)"):
        verify._check_a_whole_gpu_is_free("fast")
    monkeypatch.setattr(verify, "ray", SimpleNamespace(cluster_resources=busy.cluster_resources,
                                                       available_resources=lambda: {"GPU": 1.0}))  # fmt: skip
    verify._check_a_whole_gpu_is_free("fast")


def test_a_study_ran_on_gpus_when_its_spec_asked_or_a_member_was_measured_on_one():
    from harness.verify import _gpu_study

    cpu = [{"measurement": {"device": "cpu (x86_64, 2 threads)"}}]
    assert not _gpu_study({"search": {"resources": {"gpus": 0}}}, cpu)
    assert _gpu_study({"search": {"resources": {"gpus": 0.25}}}, cpu)
    assert _gpu_study('{"search": {}}', [{"measurement": {"device": "NVIDIA H100 80GB HBM3"}}])


def test_verify_front_is_on_by_default_for_packed_trials_only():
    from search_space.spec import SearchSettings

    assert SearchSettings(resources={"gpus": 0.25}).verifies_front
    assert SearchSettings(resources={"gpus": 0.5}).verify_front is None  # the spec keeps what was written
    assert not SearchSettings().verifies_front and not SearchSettings(resources={"gpus": 1}).verifies_front
    assert not SearchSettings(resources={"gpus": 0.25}, verify_front=False).verifies_front
    assert SearchSettings(verify_front=True).verifies_front


# -- expandable segments ---------------------------------------------------------------------------


@pytest.fixture
def clean_allocator_env(monkeypatch):
    for name in gpu.ALLOC_CONF_VARIABLES:
        monkeypatch.delenv(name, raising=False)  # and put back as it was afterwards
    return monkeypatch


def test_a_cuda_trial_asks_for_expandable_segments_before_cuda_starts(stubbed_cuda, clean_allocator_env):  # noqa: F811
    seen = []
    clean_allocator_env.setattr(
        torch._C, "_cuda_setMemoryFraction", lambda f, i: seen.append(os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
    )
    result = run_trial(tiny(device="cuda", gpu_memory_fraction=0.5))
    assert seen == ["expandable_segments:True"]  # already set when the first CUDA call came
    assert result.runtime["cuda_expandable_segments"] is True


def test_a_users_allocator_setting_stands_and_a_cpu_trial_sets_nothing(clean_allocator_env):
    assert gpu.allocator_environment({}) == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert gpu.allocator_environment({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}) == {}
    assert gpu.allocator_environment({"PYTORCH_ALLOC_CONF": "expandable_segments:False"}) == {}
    assert gpu.prepare_allocator("cpu") == {} and "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    clean_allocator_env.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    assert gpu.prepare_allocator("cuda:0") == {"cuda_expandable_segments": False}
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128"


# -- fp16 where bf16 is missing ----------------------------------------------------------------------


def test_auto_precision_is_bf16_where_the_gpu_has_it_and_fp16_elsewhere(monkeypatch):
    cuda = torch.device("cuda", 0)
    asked = []
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: asked.append(including_emulation) or True
    )
    assert resolve_dtype("auto", cuda) == torch.bfloat16 and asked == [False]  # native bf16, not emulated
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)  # a V100, a T4
    assert resolve_dtype("auto", cuda) == torch.float16
    assert resolve_dtype("bf16", cuda) == torch.bfloat16 and resolve_dtype("fp16", cuda) == torch.float16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32 == resolve_dtype("fp32", cuda)


def test_an_fp16_trial_trains_under_a_gradient_scaler_and_an_overflow_is_not_divergence():
    saved = {}

    def keep(metrics, trainer):
        saved["trainer"], saved["state"] = trainer, trainer.state_dict()

    result = run_trial(tiny({"epochs": 1}, precision="fp16"), callback=keep)
    trainer = saved["trainer"]
    assert result.status == "completed", result.error
    assert trainer.dtype == torch.float16 and trainer.scaler.is_enabled()
    assert math.isfinite(result.final["train_loss"]) and saved["state"]["scaler"]["scale"] > 0
    assert float(trainer._scaled_step_norm(torch.tensor(float("inf")))) == 0.0  # a skipped step, not a NaN
    fp32 = run_trial(tiny({"epochs": 1}), callback=keep)
    assert not saved["trainer"].scaler.is_enabled() and saved["state"]["scaler"] == {}
    assert float(saved["trainer"]._scaled_step_norm(torch.tensor(float("inf")))) == math.inf
    assert fp32.status == "completed"


# -- checkpoint pace ---------------------------------------------------------------------------------


def test_checkpoints_follow_the_pace_in_epochs_and_seconds():
    from harness.search.worker.trainable import CheckpointPace

    now = [0.0]
    every_epoch = CheckpointPace(clock=lambda: now[0])
    assert all(every_epoch.due(epoch) for epoch in (1, 2, 3))
    pace = CheckpointPace(every=2, min_interval_s=60.0, start_epoch=4, clock=lambda: now[0])
    now[0] = 100.0
    assert not pace.due(5) and pace.due(6)  # two epochs after the one it resumed from
    pace.written(6)
    now[0] = 130.0
    assert not pace.due(8)  # two epochs, but 30 s
    now[0] = 161.0
    assert pace.due(8)


def test_the_trainable_writes_checkpoints_at_the_specs_pace(monkeypatch):
    from harness.search.result_keys import NUMBER_KEY
    from harness.search.worker import trainable
    from search_space.spec import SearchSpec

    reports = []
    context = SimpleNamespace(get_assigned_resources=lambda: {"CPU": 1.0}, get_node_id=lambda: "node")
    monkeypatch.setattr(trainable, "ray", SimpleNamespace(get_runtime_context=lambda: context, get_gpu_ids=lambda: []))
    tune = SimpleNamespace(
        get_checkpoint=lambda: None,
        report=lambda payload, checkpoint=None: reports.append((payload["epoch"], checkpoint is not None)),
        Checkpoint=SimpleNamespace(from_directory=lambda directory: directory),
    )
    monkeypatch.setattr(trainable, "tune", tune)
    config = tiny({"epochs": 5})
    spec = SearchSpec.model_validate(
        {
            "name": "w",
            "family": "cait",
            "base_model": config["model"],
            "data": config["data"],
            "training": config["training"],
            "measure": config["measure"],
            "objectives": {"top1": "max"},
            "search": {"checkpoint_every": 2},
        }
    )
    trainable.search_trainable({NUMBER_KEY: 0}, spec.model_dump(mode="json"))
    assert reports == [(1, False), (2, True), (3, False), (4, True), (5, False)]  # the last: nothing to resume


# -- the benchmark and its formula -----------------------------------------------------------------


def test_mfu_is_six_flops_per_multiply_add_and_image_over_the_peak():
    # 1 GMAC/img at 100 img/s: 2 FLOPs per MAC x 3 (forward + backward) = 6e11 FLOP/s of a 6e12 peak
    assert gpu.mfu(1e9, 100.0, 6e12) == pytest.approx(10.0)
    assert gpu.mfu(4.2e9, 3000.0, 989e12) == pytest.approx(100 * 6 * 4.2e9 * 3000 / 989e12)
    assert math.isnan(gpu.mfu(1e9, 100.0, 0.0)) and math.isnan(gpu.mfu(1e9, 100.0, float("inf")))


def test_the_benchmarks_inference_part_runs_in_the_layout_trials_use(monkeypatch):
    """Part (d) times models and inputs channels-last wherever a trial does (CUDA; forced here on a CPU)."""
    import benchmarks.gpu as bench

    timed = []

    def spy(model, batch, dtype, device):
        conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
        timed.append((conv.weight.is_contiguous(memory_format=torch.channels_last),
                      batch.is_contiguous(memory_format=torch.channels_last)))  # fmt: skip
        return lambda: None

    monkeypatch.setattr(measure, "inference_layout", lambda device: torch.channels_last)
    monkeypatch.setattr(bench, "inference_layout", lambda device: torch.channels_last)
    monkeypatch.setattr(bench, "inference_fn", spy)
    monkeypatch.setattr(bench, "_timm", lambda name, size: None)
    args = SimpleNamespace(image_size=32, batch_size=2, warmup=0, repeats=1)
    rows = bench.part_d(args, torch.device("cpu"))
    assert timed and all(conv and batch for conv, batch in timed)
    assert {r["model"] for r in rows if "infer img/s" in r} == {"cait_s24", "coatnet_0"}


# -- a throughput measured beside other work: recorded, and marked where it is shown ----------------


def _measured_trial():
    """A real tiny trial whose throughput timing lasts well over machine_load.MIN_WINDOW_S on 2 threads."""
    return run_trial(tiny({"epochs": 1}, measure={"flops": False, "latency": False, "batch_size": 64,
                                                  "repeats": 120, "warmup": 1}))  # fmt: skip


def _spinners(count: int) -> list[subprocess.Popen]:
    """Busy CPU neighbours: processes that spin, on the CPUs this process may use (they inherit its affinity)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def _others_busy_while_idle(seconds: float = 0.5) -> float:
    """How many of this process's CPUs other processes kept busy while it slept (the machine's own load)."""
    with machine_load.LoadWindow() as window:
        time.sleep(seconds)
    return window.reading(1).others_cores


def test_the_load_rule_marks_a_throughput_left_fewer_cores_than_its_threads_or_a_shared_gpu():
    contended, note = machine_load.contended, machine_load.load_note
    assert not contended(0.1, 2, 2) and contended(0.3, 2, 2) and contended(1.9, 2, 2)
    assert not contended(10.0, 16, 4) and contended(12.5, 16, 4)  # idle cores elsewhere are no neighbour
    assert not contended(None, 2, 2) and not contended(1.9, None, 2)  # nothing read: no mark
    assert note({"load_others_cores": 1.9, "load_cores": 2, "load_threads": 2}) == (
        "other processes kept 1.9 of its 2 CPUs busy (timed on 2 threads)"
    )
    assert note({"load_others_cores": 1.5, "load_cores": 2, "load_threads": 1}).endswith("(timed on 1 thread)")
    assert note({"load_others_cores": 0.05, "load_cores": 2, "load_threads": 2}) is None
    assert note({"load_others_cores": float("nan"), "load_cores": 2, "load_threads": 2}) is None  # a store's missing
    assert note({"throughput_shared": True}) == "on a GPU shared with other trials (packed)"
    assert note({}) is None and note({"throughput_shared": False, "load_cores": 2}) is None  # an older row


def test_a_trial_timed_beside_a_busy_neighbour_is_marked_in_the_store_and_its_tables(tmp_path):
    """Spinning processes, two per CPU of this process, while a real trial is measured: the reading says they
    took at least half a core (they leave a one-thread timing well under its one), the stored measurement
    keeps it, and ``trials``/``pareto``/``report`` mark the cell ``*`` with a footnote; a trial whose
    measurement says no one else was busy is not marked."""
    from click.testing import CliRunner

    from harness.cli import main
    from harness.store import Store

    cpus = len(os.sched_getaffinity(0))
    spinners = _spinners(2 * cpus)
    try:
        busy = _measured_trial()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert busy.status == "completed", busy.error
    cost = busy.cost
    assert (cost.load_cores, cost.load_threads) == (cpus, busy.runtime["threads"]) and cost.load_others_cores >= 0.5
    assert machine_load.load_note(cost.to_dict()).startswith(f"other processes kept {cost.load_others_cores:.1f} of")

    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        store.create_study("load", {"name": "load"}, {"top1": "max", "throughput": "max"})
        store.finish_trial("load", 0, status="completed", config=busy.config, measurement=cost.to_dict(),
                           final={"top1": 60.0})  # fmt: skip
        alone = {**cost.to_dict(), "throughput": 3 * cost.throughput, "load_others_cores": 0.0}
        store.finish_trial("load", 1, status="completed", config=busy.config, measurement=alone, final={"top1": 50.0})
        stored = store.trial_records("load", [0, 1])
    assert stored[0]["measurement"]["load_others_cores"] == cost.load_others_cores
    assert stored[0]["measurement"]["throughput_shared"] is False

    why = machine_load.load_note(cost.to_dict())
    for command in (["trials", "load"], ["pareto", "load"]):
        out = CliRunner().invoke(main, [*command, "--store", url])
        assert out.exit_code == 0, out.output
        cells = {n: line for line in out.output.splitlines() for n in ("0", "1") if n in line.split()[:2]}
        assert re.search(r"\d\* ", cells["0"] + " ") and not re.search(r"\d\* ", cells["1"] + " "), out.output
        assert f"* throughput measured beside other work, a lower bound (archsearch verify re-measures the " \
               f"front alone): trial 0: {why}" in out.output  # fmt: skip
    report = tmp_path / "report.html"
    out = CliRunner().invoke(main, ["report", "load", "--store", url, "-o", str(report), "--static"])
    assert out.exit_code == 0, out.output
    assert f"trial 0: {why}" in report.read_text()


def test_a_trial_timed_with_no_neighbour_is_read_and_unmarked_on_a_quiet_machine():
    """The same trial measured with no neighbour of ours: its reading is recorded, and unmarked where the
    machine itself was quiet just before (on a shared machine busy with other work, that work is a neighbour
    too and the mark is right: then only the reading is checked)."""
    quiet = _others_busy_while_idle() < machine_load.SLACK_CORES
    idle = _measured_trial()
    cpus = len(os.sched_getaffinity(0))
    assert idle.cost.load_cores == cpus and 0 <= idle.cost.load_others_cores <= cpus
    assert idle.cost.load_threads == idle.runtime["threads"]
    if not quiet:
        pytest.skip("this machine's CPUs were busy with other work before the idle measurement: its mark is theirs")
    assert machine_load.load_note(idle.cost.to_dict()) is None, idle.cost
