"""The memory pre-flight: does a trial's training fit where it will run, before anything is built?

The cost model knows a configuration's parameter count exactly and estimates the activations a
training step keeps (:mod:`search_space.cost_model`), so what training needs is known without
building the model: fp32 weights and gradients and AdamW's two moments (16 bytes per parameter),
plus the activations at the trial's batch (2 bytes per element under bf16/fp16 autocast, else 4).
``embed_dim: 99999`` once tried to allocate 120 GB and died as an internal error under a memory
cap; in a search's ``choice`` it passed every check and Ray was started for it.

The check refuses only what cannot fit: the estimate leaves out allocator slack and transient
buffers, so a configuration just under the limit may still run out; one over it never fits. Torch-free
(the standard library and /proc), as the rest of ``search_space``.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from trials.configio import ConfigError
from trials.models.config import CaiTConfig, CoAtNetConfig

from .cost_model import estimate_cost

BYTES_PER_PARAMETER_TRAINING = 16  # fp32 weights 4 + gradients 4 + AdamW's exp_avg and exp_avg_sq 8
BYTES_PER_PARAMETER_INFERENCE = 4  # fp32 weights


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


@dataclass(frozen=True)
class MemoryNeed:
    """What one process needs to train (or, ``training=False``, to run) a model at a batch."""

    params: int
    state_bytes: int  # weights (and, training, gradients and optimiser state)
    activation_bytes: int  # activations kept for backward (training), the input batch (inference)
    batch_size: int
    inference: bool = False

    @property
    def total(self) -> int:
        return self.state_bytes + self.activation_bytes

    def describe(self) -> str:
        if self.inference:
            return (
                f"about {_gb(self.total)} ({_gb(self.state_bytes)} for the weights of {self.params:,} parameters, "
                f"{_gb(self.activation_bytes)} for a batch of {self.batch_size:,} images and its largest layer output)"
            )
        return (
            f"about {_gb(self.total)} ({_gb(self.state_bytes)} for {self.params:,} parameters with their gradients "
            f"and AdamW state, {_gb(self.activation_bytes)} of activations at batch {self.batch_size})"
        )


def training_memory(model: CaiTConfig | CoAtNetConfig, batch_size: int, *, half_precision: bool) -> MemoryNeed:
    """Memory to train ``model`` at ``batch_size`` images per step in one process."""
    cost = estimate_cost(model)
    per_element = 2 if half_precision else 4
    activation_bytes = cost.activations * batch_size * per_element
    return MemoryNeed(cost.params, cost.params * BYTES_PER_PARAMETER_TRAINING, activation_bytes, batch_size)


def inference_memory(model: CaiTConfig | CoAtNetConfig, batch_size: int) -> MemoryNeed:
    """Memory certainly needed to run ``model`` on a batch (what ``bench`` needs before its first
    forward): the fp32 weights, the input images and the largest single layer output at that batch
    (every other transient output comes on top, so this is a lower bound: it never refuses what fits)."""
    cost = estimate_cost(model)
    per_image = model.in_chans * model.image_size * model.image_size + cost.peak_activation
    return MemoryNeed(cost.params, cost.params * BYTES_PER_PARAMETER_INFERENCE, batch_size * per_image * 4, batch_size,
                      inference=True)  # fmt: skip


@dataclass(frozen=True)
class MemoryBudget:
    """How much memory a trial may use, and where that limit comes from (said in a refusal)."""

    bytes: int
    where: str


def _cgroup_limit() -> int | None:
    """This process's cgroup memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``), if any."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 writes a huge number for "no limit"
            return int(text)
    return None


@cache
def host_memory() -> MemoryBudget | None:
    """This machine's memory as this process may use it: the smaller of the physical memory and
    the cgroup's limit (a container, a batch job's allocation). None where neither can be read."""
    physical = None
    with contextlib.suppress(ValueError, OSError, AttributeError):  # a platform without these names
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = _cgroup_limit()
    if limit is not None and (physical is None or limit < physical):
        return MemoryBudget(limit, f"this process's memory limit of {_gb(limit)} (its cgroup)")
    return MemoryBudget(physical, f"this machine's {_gb(physical)} of memory") if physical else None


def refuse_if_over(need: MemoryNeed, budget: MemoryBudget | None, what: str, key: str = "model") -> None:
    """:class:`ConfigError` naming ``key`` and ``what`` (the values that set the size) where ``need``
    cannot fit in ``budget``; nothing where no budget is known."""
    if budget is None or need.total <= budget.bytes:
        return
    raise ConfigError(
        key, f"{what} needs {need.describe()}, more than {budget.where}: it cannot fit; choose a smaller model or batch"
    )


def model_values(model: CaiTConfig | CoAtNetConfig) -> str:
    """The values that set a model's size, as a refusal names them (``a model with embed_dim=99999, depth=12, ...``)."""
    if isinstance(model, CaiTConfig):
        names = ("embed_dim", "depth", "ca_depth", "num_heads", "mlp_ratio", "patch_size", "image_size")
    else:
        names = ("layout", "depths", "dims", "image_size")
    values = []
    for name in names:
        value = getattr(model, name, None)
        if value is not None:
            shown = "".join(value) if name == "layout" and isinstance(value, (list, tuple)) else value
            values.append(f"{name}={list(shown) if isinstance(shown, tuple) else shown}")
    return "a model with " + ", ".join(values)


def trial_memory(
    model: CaiTConfig | CoAtNetConfig, batch_size: int, workers: int, device_type: str, *, half_precision: bool
) -> MemoryNeed:
    """What a (possibly data-parallel) trial needs of one memory: each rank trains its share of the
    global batch with a whole copy of the model and its optimiser state; every rank on the CPU runs
    on this machine, on GPUs each rank has its own device."""
    workers = max(1, workers)
    one = training_memory(model, max(1, math.ceil(batch_size / workers)), half_precision=half_precision)
    ranks = workers if device_type == "cpu" else 1
    return MemoryNeed(one.params, one.state_bytes * ranks, one.activation_bytes * ranks, batch_size)
