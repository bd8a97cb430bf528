"""The memory pre-flight of a trial where it runs: ``archsearch trial`` and a search's workers.

:mod:`search_space.memory` estimates what training needs from the cost model; this module knows the
limit of the device the trial landed on (this machine's memory for the CPU, the GPU's memory, or its
share of it, for CUDA) and is handed to :func:`trials.runner.run_trial` as its ``preflight``: called
with the model config the data shaped, before the model is built. Over the limit, the trial is
refused as a config error naming the values (``trial``: exit 2; a search: the trial fails with that
one line, never an out-of-memory kill or an internal error after minutes of data loading).
"""

from __future__ import annotations

from typing import Any

from search_space.memory import (
    MemoryBudget,
    host_memory,
    inference_memory,
    model_values,
    refuse_if_over,
    trial_memory,
)
from trials.config.data_config import step_batch
from trials.config.trial_config import TrialConfig
from trials.lazy import lazy_import

torch = lazy_import("torch")
optimiser = lazy_import("trials.training.optimiser")


def bench_preflight(model, device, batch_size: int = 1) -> None:
    """``archsearch bench``: :class:`ConfigError` where the model's weights and one input batch cannot
    fit on ``device`` (a forward pass without gradients keeps few activations at once: only the weights
    and the batch are certain to be needed whole)."""
    budget = device_budget(None, device, {})
    refuse_if_over(inference_memory(model, batch_size), budget, f"{model_values(model)} at batch {batch_size:,}")


def device_budget(trial: TrialConfig | None, device, runtime: dict[str, Any]) -> MemoryBudget | None:
    """How much memory the trial may use on ``device``: the GPU's (the trial's share of it, when
    packed), or this machine's for the CPU."""
    if device.type != "cuda":
        return host_memory()
    total = runtime.get("gpu_total_bytes")
    if total is None:
        index = device.index if device.index is not None else torch.cuda.current_device()
        total = int(torch.cuda.get_device_properties(index).total_memory)
    share = trial.gpu_memory_fraction if trial is not None else None
    gb = f"{total / 1e9:.1f} GB"
    if share is not None and share < 1:
        return MemoryBudget(int(total * share), f"its {share:g} share of {device}'s {gb}")
    return MemoryBudget(int(total), f"{device}'s {gb}")


def memory_preflight(trial: TrialConfig, model, device, runtime: dict[str, Any]) -> None:
    """The ``preflight`` of :func:`trials.runner.run_trial`: :class:`ConfigError` where training
    ``model`` (shaped by the data) at the trial's batch cannot fit on ``device``."""
    dtype = optimiser.resolve_dtype(trial.precision, device)
    need = trial_memory(
        model,
        step_batch(trial.data.name, trial.data.batch_size, trial.data.train_size),
        trial.distributed.workers,
        device.type,
        half_precision=dtype in (torch.bfloat16, torch.float16),
    )
    refuse_if_over(need, device_budget(trial, device, runtime), model_values(model))
