"""``run_trial(config) -> TrialResult``: build, measure, train and evaluate one configuration.

Nothing raises out of :func:`run_trial`: a config that cannot be built ends as ``failed`` with
the message, a run whose loss stops being finite ends as ``diverged`` with the step. A search
records all three outcomes and goes on.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .configio import ConfigError
from .measure import CostMeasurement
from .train import EpochCallback, EpochMetrics
from .trial_config import TrialConfig, load_trial_config

TrialStatus = Literal["completed", "diverged", "failed"]


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
        **(
            {"train_peak_memory_mb": max(m.peak_memory_mb for m in history if m.peak_memory_mb is not None)}
            if any(m.peak_memory_mb is not None for m in history)
            else {}
        ),
    }


def _error_text(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text if isinstance(error, ConfigError) else f"{text}\n{''.join(traceback.format_tb(error.__traceback__))}"


def run_trial(
    config: TrialConfig | Mapping[str, Any],
    callback: EpochCallback | None = None,
    progress: bool | None = None,
    resume_state: dict[str, Any] | None = None,
) -> TrialResult:
    """Run one trial end to end. ``callback(metrics, trainer)`` runs after each epoch (True: stop).

    ``resume_state`` is a :meth:`Trainer.state_dict` from an earlier attempt of the same trial:
    training continues from its last finished epoch instead of starting over.
    """
    started = time.perf_counter()
    raw = config.to_dict() if isinstance(config, TrialConfig) else dict(config)
    result = TrialResult(status="failed", config=raw)
    try:
        trial = load_trial_config(config)
        result.config = trial.to_dict()
        trainer = _build(trial)
        result.config["model"] = trainer.model.config.to_dict()
    except Exception as error:  # a config that cannot be built is a result, not a crash
        result.error = _error_text(error)
        result.wall_time_s = time.perf_counter() - started
        return result
    try:
        result.cost = _measure(trial, trainer)
        trainer.cost = result.cost  # epoch callbacks may report it (the search does)
        if resume_state is not None:
            trainer.load_state_dict(resume_state)
        outcome = trainer.fit(callback=callback, progress=progress)
        result.epochs = list(outcome.history)
        result.final = {**final_metrics(outcome.history), "compiled": float(trainer.compiled)}
        result.stopped_early = outcome.stopped_early
        if outcome.diverged is not None:
            result.status = "diverged"
            result.diverged_at_step = outcome.diverged.step
            result.error = str(outcome.diverged)
        else:
            result.status = "completed"
    except Exception as error:  # out of memory, a data error...: recorded, never raised
        result.status = "failed"
        result.epochs = list(trainer.history)
        result.final = final_metrics(trainer.history)
        result.error = _error_text(error)
        _release_memory(trainer.device)  # a reused worker (or a packed neighbour) gets the memory back
    result.notes = list(trainer.notes)
    result.wall_time_s = time.perf_counter() - started
    return result


def _release_memory(device) -> None:
    if device.type != "cuda":
        return
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()


def _limit_gpu_memory(trial: TrialConfig, device) -> None:
    """Cap this process's share of the GPU (several trials packed on one GPU, each its own process)."""
    if device.type != "cuda":
        return
    import torch

    # None: the whole GPU (also undoes a smaller share an earlier trial of this process set).
    torch.cuda.set_per_process_memory_fraction(trial.gpu_memory_fraction or 1.0, device)


def _build(trial: TrialConfig):
    from .data import build_data
    from .models import build_model
    from .train import Trainer, resolve_device, resolve_dtype, seed_everything

    device = resolve_device(trial.device)
    _limit_gpu_memory(trial, device)
    seed_everything(trial.seed)
    try:
        data = build_data(trial.data, device)
    except ConfigError as error:
        raise error.under("data") from None
    # The head and the input size follow the dataset.
    model = build_model(trial.model, num_classes=data.num_classes, image_size=data.image_size)
    return Trainer(model, data, trial.training, device, resolve_dtype(trial.precision, device))


def _measure(trial: TrialConfig, trainer) -> CostMeasurement:
    import torch

    from .measure import measure_cost

    m = trial.measure
    # Measuring must not disturb the training RNG streams: same seed, same metrics.
    devices = [trainer.device] if trainer.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return measure_cost(
            trainer.model,
            trainer.data.image_size,
            device=trainer.device,
            dtype=trainer.dtype,
            batch_size=m.batch_size,
            warmup=m.warmup,
            repeats=m.repeats,
            flops=m.flops,
            throughput=m.throughput,
            latency=m.latency,
        )
