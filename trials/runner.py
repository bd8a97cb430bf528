"""``run_trial(config) -> TrialResult``: build, measure, train and evaluate one configuration.

Nothing raises out of :func:`run_trial`: a config that cannot be built ends as ``failed`` with
the message, a run whose loss stops being finite ends as ``diverged`` with the step. A search
records all three outcomes and goes on.
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from trials.config.trial_config import TrialConfig, load_trial_config, trial_threads
from trials.configio import ConfigError
from trials.data import build_data
from trials.devices import mps
from trials.devices.distributed import (
    Group,
    LocalPeers,
    PeerLauncher,
    Rendezvous,
    close_group,
    open_group,
    open_store,
    pack_state,
    resolve_backend,
    unpack_state,
)
from trials.devices.gpu import (
    GpuShareError,
    cap_process_memory,
    configure_backends,
    is_sticky_cuda_error,
    prepare_allocator,
    release_memory,
)
from trials.devices.sync_batchnorm import synchronise_batchnorm
from trials.epoch_progress import EpochProgress, GuardedCallback, OnEpoch, check_on_epoch
from trials.errors import EnvironmentProblem
from trials.measurement.measure import CostMeasurement, measure_cost
from trials.models import build_model
from trials.models.build import resolve_config
from trials.models.config import ModelConfig
from trials.status import TrialStatus
from trials.training.checkpoint import load_initial_weights
from trials.training.predictions import TestPredictions
from trials.training.train import EpochCallback, EpochMetrics, Trainer, resolve_device, resolve_dtype, seed_everything


@dataclass
class TrialResult:
    status: TrialStatus
    config: dict[str, Any]
    cost: CostMeasurement | None = None
    epochs: list[EpochMetrics] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    diverged_at_step: int | None = None
    stopped_early: bool = False
    wall_time_s: float = 0.0
    notes: list[str] = field(default_factory=list)  # how it ran, when that matters (a compile fallback)
    # Facts about how it ran, decided as the trial starts (kept when it fails): device, GPU memory
    # cap, cuDNN autotuning and TF32, DataLoader processes, graphs compiled, compile seconds.
    runtime: dict[str, Any] = field(default_factory=dict)
    # A sticky CUDA error broke this process's CUDA context: the worker must not run another trial.
    worker_unusable: bool = False
    # The key a configuration error named (a data_dir without the dataset, a model that does not
    # build): the trial's input was wrong, not its run; ``archsearch trial`` exits 2 on it, naming it.
    config_key: str | None = None
    # The model config as built (the data's image size, channels and classes applied); None until built.
    built_model: dict[str, Any] | None = None
    # The test split's per-image predicted classes and labels (datasets with a test split), from the
    # pass that gave ``final["test_top1"]``; kept off ``to_dict``, the compact form is its ``encode()``.
    test_predictions: TestPredictions | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "config": self.config,
            "cost": self.cost.to_dict() if self.cost else None,
            "epochs": [m.to_dict() for m in self.epochs],
            "final": self.final,
            "error": self.error,
            "diverged_at_step": self.diverged_at_step,
            "stopped_early": self.stopped_early,
            "wall_time_s": self.wall_time_s,
            "notes": list(self.notes),
            "runtime": dict(self.runtime),
            "worker_unusable": self.worker_unusable,
            "config_key": self.config_key,
        }


def final_metrics(history: list[EpochMetrics]) -> dict[str, float]:
    """The last epoch's metrics, the best top-1 seen, and the amount of training done."""
    if not history:
        return {}
    last = history[-1]
    return {
        "top1": last.top1,
        "top5": last.top5,
        "eval_loss": last.eval_loss,
        "train_loss": last.train_loss,
        "best_top1": max(m.top1 for m in history),
        "epochs": last.epoch,
        "steps": last.step,
        "train_images_per_s": last.train_images_per_s,
        **_peak("train_peak_memory_mb", [m.peak_memory_mb for m in history]),
        **_peak("train_peak_reserved_mb", [m.peak_reserved_mb for m in history]),
        **({} if last.train_eval_loss is None else {"train_eval_loss": last.train_eval_loss}),
    }


def test_metrics(trainer) -> dict[str, float]:
    """The held-out test split's loss and accuracy after training (datasets that keep one apart).

    Evaluated once per trainer and kept: the search reports it from its last epoch callback (so it
    reaches the store through Ray Tune) and ``run_trial`` records it after ``fit``; both get the same
    numbers from one pass. That pass also keeps each image's predicted class (:func:`test_predictions`).
    """
    if trainer.data.test is None:
        return {}
    if getattr(trainer, "test_result", None) is None:
        kept: list = []
        loss, top1, top5 = trainer.evaluate(trainer.data.test, keep=kept)
        trainer.test_result = {"test_loss": loss, "test_top1": top1, "test_top5": top5}
        if kept:  # the same pass's top-1 indices: their accuracy is test_top1 exactly
            trainer.test_predictions = TestPredictions.from_arrays(
                torch.cat([p for p, _ in kept]).cpu().numpy(),
                torch.cat([y for _, y in kept]).cpu().numpy(),
                int(trainer.data.num_classes),
            )
    return dict(trainer.test_result)


def test_predictions(trainer) -> TestPredictions | None:
    """The test split's per-image predictions and labels, from :func:`test_metrics`'s one pass (None
    where the data has no test split or it has not been evaluated)."""
    return getattr(trainer, "test_predictions", None)


def _peak(name: str, values: list[float | None]) -> dict[str, float]:
    known = [v for v in values if v is not None]
    return {name: max(known)} if known else {}


def _config_key(error: BaseException) -> str | None:
    return (error.field or "config") if isinstance(error, ConfigError) else None


def _error_text(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if isinstance(error, ConfigError) else f"{text}\n{''.join(traceback.format_tb(error.__traceback__))}"


ResumeState = Mapping[str, Any] | Callable[[], Mapping[str, Any]]
# (the model config as it will be built, the device, the trial's runtime facts): raises ConfigError to refuse.
Preflight = Callable[[TrialConfig, ModelConfig, torch.device, dict[str, Any]], None]


def run_trial(
    config: TrialConfig | Mapping[str, Any],
    callback: EpochCallback | None = None,
    progress: bool | None = None,
    resume_state: ResumeState | None = None,
    *,
    launcher: PeerLauncher | None = None,
    group_rank: tuple[int, Rendezvous] | None = None,
    preflight: Preflight | None = None,
    on_epoch: OnEpoch | None = None,
) -> TrialResult:
    """Run one trial end to end. ``callback(metrics, trainer)`` runs after each epoch (True: stop).

    ``on_epoch(record)`` runs after each epoch too, before ``callback``, with an
    :class:`trials.epoch_progress.EpochProgress` (epoch k of E, training loss, validation top-1, seconds):
    a watcher, which cannot stop the trial and whose errors are one warning, never a failed trial
    (:class:`trials.epoch_progress.GuardedCallback`).

    ``resume_state`` is a :meth:`Trainer.state_dict` from an earlier attempt of the same trial
    (or a function returning one, so that the caller keeps no reference to it): training continues
    from its last finished epoch instead of starting over. The state is dropped once applied.

    A trial with ``distributed.workers`` > 1 runs as that many processes (:mod:`trials.devices.distributed`):
    this one is rank 0 and starts the others with ``launcher`` (local processes by default; a
    search passes Ray actors). ``group_rank`` is how a peer process enters (see :func:`run_peer`).
    ``preflight(trial, model_config, device, runtime)`` runs once the data and the device are known, just
    before the model is built: a :class:`ConfigError` there fails the trial as a refused config (the
    harness's memory pre-flight, which needs the cost model this package may not import).
    """
    started = time.perf_counter()
    if check_on_epoch(on_epoch, "run_trial") is not None:
        callback = _watched(callback, GuardedCallback(on_epoch), started)
    raw = config.to_dict() if isinstance(config, TrialConfig) else dict(config)
    result = TrialResult(status=TrialStatus.FAILED, config=raw)
    try:
        trial = load_trial_config(config)
    except Exception as error:  # a config that cannot be read is a result, not a crash
        return _failed_to_build(result, error, started)
    if trial.distributed.workers == 1:
        return _run(trial, result, callback, progress, resume_state, None, started, preflight)
    if group_rank is not None:  # a peer: join rank 0's group, train, report nothing
        rank, rendezvous = group_rank
        try:
            group = open_group(rendezvous, rank)
        except Exception as error:
            return _failed_to_build(result, error, started)
        try:
            return _run(trial, result, None, False, resume_state, group, started, preflight)
        finally:
            close_group()
    return _run_lead(trial, result, callback, progress, resume_state, launcher, started, preflight)


def _watched(callback: EpochCallback | None, on_epoch: GuardedCallback, started: float) -> EpochCallback:
    """``callback`` with ``on_epoch`` told about each epoch first (rank 0 only: peers get no callback)."""

    def each_epoch(metrics, trainer) -> bool | None:
        elapsed = time.perf_counter() - started
        on_epoch(EpochProgress(None, metrics.epoch, trainer.total_epochs, metrics.train_loss, metrics.top1,
                               metrics.epoch_time, elapsed))  # fmt: skip
        return callback(metrics, trainer) if callback is not None else None

    return each_epoch


def run_peer(
    config: Mapping[str, Any], rank: int, rendezvous: Rendezvous, resume_state: bytes | None = None
) -> dict[str, Any]:
    """Rank ``rank`` (> 0) of a data-parallel trial: trains with the others, reports nothing.

    Returns the peer's own ``{"status", "error"}``; the trial's result is rank 0's.
    """
    state = unpack_state(resume_state)
    result = run_trial(config, progress=False, resume_state=state, group_rank=(rank, rendezvous))
    return {"status": result.status, "error": result.error}


def _run_lead(trial, result, callback, progress, resume_state, launcher, started, preflight) -> TrialResult:
    """Rank 0 of a data-parallel trial: open the rendezvous, start the peers, run as usual."""
    launcher = launcher if launcher is not None else LocalPeers(run_peer)
    state = resume_state() if callable(resume_state) else resume_state  # one copy, for every rank
    resume_state = None
    workers = trial.distributed.workers
    try:
        backend = resolve_backend(trial.distributed.backend, resolve_device(trial.device))
        store = open_store(launcher.host(), workers)
        rendezvous = Rendezvous(launcher.host(), store.port, workers, backend)
        launcher.start(trial.to_dict(), rendezvous, pack_state(state))
        group = open_group(rendezvous, 0, store=store)
    except Exception as error:
        launcher.stop()
        return _failed_to_build(result, error, started)
    try:
        result = _run(trial, result, callback, progress, state, group, started, preflight)
    finally:
        state = None
        close_group()
        if result.status == TrialStatus.FAILED:
            launcher.stop()  # a peer left waiting at a collective would wait for its timeout
        peers_failed = launcher.failures()
        launcher.stop()
    if peers_failed:
        result.status = TrialStatus.FAILED
        result.error = "; ".join([*([result.error] if result.error else []), *peers_failed])
    return result


def _failed_to_build(result: TrialResult, error: BaseException, started: float) -> TrialResult:
    result.error = _error_text(error)
    result.config_key = _config_key(error)
    result.worker_unusable = is_sticky_cuda_error(error)
    result.wall_time_s = time.perf_counter() - started
    return result


def _run(
    trial: TrialConfig,
    result: TrialResult,
    callback: EpochCallback | None,
    progress: bool | None,
    resume_state: ResumeState | None,
    group: Group | None,
    started: float,
    preflight: Preflight | None = None,
) -> TrialResult:
    """Build, measure (rank 0), train and evaluate (rank 0) one trial in this process."""
    lead = group is None or group.lead
    try:
        result.config = trial.to_dict()
        trainer = _build(trial, result.runtime, group, preflight)
        result.built_model = trainer.model.config.to_dict()
        result.config["model"] = dict(result.built_model)
    except Exception as error:  # a config that cannot be built is a result, not a crash
        return _failed_to_build(result, error, started)
    device = trainer.device
    try:
        if lead:
            result.cost = _measure(trial, trainer)
            trainer.cost = result.cost  # epoch callbacks may report it (the search does)
        if resume_state is not None:
            trainer.load_state_dict(resume_state() if callable(resume_state) else resume_state)
            resume_state = None  # applied: the loaded copy is garbage now (the caller passed a function)
        outcome = trainer.fit(callback=callback, progress=progress)
        result.epochs = list(outcome.history)
        result.final = {**final_metrics(outcome.history), **trial_facts(trainer)}
        result.stopped_early = outcome.stopped_early
        if outcome.diverged is not None:
            result.status = TrialStatus.DIVERGED
            result.diverged_at_step = outcome.diverged.step
            result.error = str(outcome.diverged)
        else:
            result.status = TrialStatus.COMPLETED
            if lead and not outcome.stopped_early:  # the test split is touched only by a trial that ran its budget
                result.final.update(test_metrics(trainer))
                result.test_predictions = test_predictions(trainer)
    except Exception as error:  # out of memory, a data error...: recorded, never raised
        result.status = TrialStatus.FAILED
        result.epochs = list(trainer.history)
        result.final = {**final_metrics(trainer.history), **trial_facts(trainer)}
        result.error = _error_text(error)
        result.config_key = _config_key(error)
        result.worker_unusable = is_sticky_cuda_error(error)
    result.notes = list(trainer.notes)
    result.runtime.update(trial_facts(trainer))
    if result.status == TrialStatus.FAILED:
        # Outside the ``except`` block: the traceback (and the frames holding activations) is gone;
        # dropping the trainer frees the model, its gradients and the optimiser state, so a reused
        # worker (or a packed neighbour) gets the memory back.
        del trainer
        if not result.worker_unusable:
            release_memory(device)
    result.wall_time_s = time.perf_counter() - started
    return result


def trial_facts(trainer) -> dict[str, float]:
    """How the trial ran, as numbers for its record: GPU memory cap, cuDNN autotuning, TF32, DataLoader
    processes, whether it really ran compiled (how many graphs, and how many of them were compiled
    after the first epoch), and the compile time."""
    facts = {k: float(v) for k, v in trainer.runtime.items() if isinstance(v, (int, float, bool))}
    facts.update(
        compiled=float(trainer.compiled),
        compiled_graphs=float(trainer.compiled_graphs),
        recompiles=float(trainer.compiled_forward.recompiles),
    )
    if trainer.compile_s is not None:
        facts["compile_s"] = trainer.compile_s
    return facts


def _limit_gpu_memory(trial: TrialConfig, device, runtime: dict[str, Any]) -> None:
    """Cap this process's share of the GPU (several trials packed on one GPU, each its own process).

    Before anything is allocated on the device; the cap leaves the process's memory outside the
    caching allocator (see :func:`trials.devices.gpu.memory_cap_fraction`). None: the whole GPU, which also
    undoes a smaller share an earlier trial of this process set.
    """
    if device.type != "cuda":
        return
    if trial.mps and (problem := mps.daemon_problem()):  # before the context: it would not join MPS
        raise EnvironmentProblem(problem)
    runtime.update(cap_process_memory(device, trial.gpu_memory_fraction))
    if trial.mps:  # before anything is allocated: the client reads it as it creates its context
        limit = mps.pinned_limit(trial.gpu_memory_fraction, runtime["gpu_total_bytes"])
        os.environ[mps.PINNED_LIMIT_ENV] = limit
        runtime["mps_pinned_limit_mib"] = int(limit.split("=")[1].removesuffix("M"))


def _build(trial: TrialConfig, runtime: dict[str, Any], group: Group | None = None, preflight: Preflight | None = None):
    runtime.update(prepare_allocator(trial.device))  # before anything initialises CUDA
    device = resolve_device(trial.device)
    runtime["device"] = str(device)
    try:
        _limit_gpu_memory(trial, device, runtime)
    except GpuShareError as error:
        raise ConfigError("gpu_memory_fraction", str(error).removeprefix("gpu_memory_fraction: ")) from None
    runtime.update(configure_backends(device))
    threads = trial_threads(trial, device.type)
    if threads is not None:  # before any op runs: a CPU result depends on it
        torch.set_num_threads(threads)
    runtime["threads"] = torch.get_num_threads()  # recorded (final_threads), exported, honoured by `trial`
    runtime["deterministic"] = torch.are_deterministic_algorithms_enabled()
    seed_everything(trial.seed)
    try:
        data = build_data(trial.data, device, cpus=trial.cpus, train_eval=trial.training.recalibrate_batchnorm)
    except ConfigError as error:
        raise error.under("data") from None
    runtime["data_workers"] = data.loader_processes  # the record's key, kept
    if data.decode is not None:  # image files: where their JPEGs are decoded (cuda: nvJPEG, or the loader processes)
        runtime["data_decode"] = data.decode
    if trial.cpus is not None:
        runtime["cpus"] = trial.cpus
    # The head, the input size and the input channels follow the dataset: the model config recorded is this one.
    shape = {"num_classes": data.num_classes, "image_size": data.image_size, "in_chans": data.channels}
    if preflight is not None:  # before anything the size of the model is allocated
        preflight(trial, resolve_config(trial.model, **shape), device, runtime)
    model = build_model(trial.model, **shape)
    if trial.init_from is not None:  # a fine-tune: the weights replaced, the same model (its cost unchanged)
        load_initial_weights(model, trial.init_from)
    runtime["world_size"] = 1 if group is None else group.world_size
    if group is not None and group.world_size > 1:  # before DDP and compile see the model: one conversion
        # BatchNorm over the global batch (trials.devices.sync_batchnorm), so N ranks take one worker's steps;
        # recorded with the count of layers (0: none to synchronise, CaiT).
        runtime["synced_batchnorms"] = synchronise_batchnorm(model, device)
    if group is not None and not group.lead:  # DDP starts every rank from rank 0's weights:
        seed_everything(trial.seed + 1_000_003 * group.rank)  # dropout and drop-path differ per rank
    dtype = resolve_dtype(trial.precision, device)
    trainer = Trainer(model, data, trial.training, device, dtype, group=group, cpus=trial.cpus)
    runtime.update(trainer.runtime)  # what the trainer decided as it was built (compile threads, cache, auto)
    trainer.runtime = runtime  # the same dict: facts decided from here on land in both
    return trainer


def _measure(trial: TrialConfig, trainer) -> CostMeasurement:
    """The trial's cost as it trains: its forward (compiled when it compiles), its per-device training
    batch (and batch 1), flagged ``throughput_shared`` when packed; the facts land in its runtime too."""
    m = trial.measure
    shared = _device_shared(trial, trainer.device)
    timed = m.throughput or m.latency
    # Measuring must not disturb the training RNG streams: same seed, same metrics.
    devices = [trainer.device] if trainer.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        cost = measure_cost(
            trainer.model,
            trainer.data.image_size,
            device=trainer.device,
            dtype=trainer.dtype,
            batch_size=_measure_batch(trial, trainer),
            warmup=m.warmup,
            repeats=m.repeats,
            flops=m.flops,
            throughput=m.throughput,
            latency=m.latency,
            forward=trainer.predict if trainer.compile_requested and timed else None,
            compile_note=_eager_reason(trial, trainer),
            shared=shared,
        )
    if cost.compiled and not trainer.compiled:  # the compiled forward fell back to eager (a compile error)
        cost = dataclasses.replace(cost, compiled=False, compile_note="torch.compile failed: timed eagerly")
    trainer.runtime.update(throughput_shared=shared, measured_compiled=cost.compiled)
    if cost.warmup is not None and timed:
        trainer.runtime["measure_warmup"] = cost.warmup
    if cost.compile_s is not None:
        trainer.runtime["measure_compile_s"] = cost.compile_s
    return cost


def _device_shared(trial: TrialConfig, device: torch.device) -> bool:
    """Whether other trials may run on this trial's GPU while it is measured: it holds a share of it."""
    share = trial.gpu_memory_fraction
    return device.type == "cuda" and share is not None and share < 1


def _measure_batch(trial: TrialConfig, trainer) -> int:
    """``measure.batch_size``, or else the batch one device trains on (the global batch split over ranks)."""
    if trial.measure.batch_size is not None:
        return trial.measure.batch_size
    return max(1, trial.data.batch_size // int(trainer.runtime.get("world_size", 1)))


def _eager_reason(trial: TrialConfig, trainer) -> str:
    """Why the cost is timed eagerly when the trial does not compile."""
    setting = trial.training.compile
    skipped = trainer.compile_skipped_because
    if skipped is not None:  # auto decided this architecture's compile costs more than it saves
        return skipped
    if setting == "auto":
        return f"training.compile: auto compiles on CUDA only; this trial runs on {trainer.device.type}"
    return "training.compile is off"
