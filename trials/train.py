"""The training loop of a trial: AdamW, warmup + cosine, clipping, label smoothing, bf16 on CUDA
(fp16 with loss scaling on a GPU without native bf16).

Evaluates after every epoch and hands each epoch's metrics to a callback (the search reports
to Ray Tune through it; returning True stops the trial early). A non-finite loss or gradient
norm ends training as *diverged* at that step: never a crash, never a NaN metric.
The :class:`Trainer` state (model, optimiser, schedule, epoch, history, RNG) round-trips
through ``state_dict`` so a retried trial resumes from its last finished epoch.
"""

from __future__ import annotations

import math
import random
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trials.lazy import lazy_import

from . import compile_cache
from .compile_cache import CompileClock
from .configio import ConfigError
from .data import DataBundle
from .data_config import DATA_STARVED_FRACTION, is_data_starved
from .distributed import EpochSignal, Group
from .gpu import is_compile_error, peak_memory, release_memory
from .gpu import resolve_device as resolve_device
from .timing import synchronize
from .torch_internals import dynamo_utils
from .trial_config import TrainingConfig

tqdm_auto = lazy_import("tqdm.auto")  # the progress bar: only on a terminal


@dataclass(frozen=True)
class EpochMetrics:
    """What one epoch produced. ``step`` counts optimiser steps since the start of the trial."""

    epoch: int
    step: int
    train_loss: float
    eval_loss: float
    top1: float
    top5: float
    lr: float  # the mean learning rate over the epoch's steps (warmup moves it within an epoch)
    epoch_time: float
    train_images_per_s: float
    data_wait_fraction: float
    peak_memory_mb: float | None = None  # CUDA: the most memory allocated during the epoch
    peak_reserved_mb: float | None = None  # CUDA: the most memory the caching allocator held (what the cap bounds)
    train_eval_loss: float | None = None  # training split, eval mode, no augmentation (recalibrate_batchnorm)
    # data_wait_fraction > DATA_STARVED_FRACTION: the device idled for input. Derived, never passed:
    # an epoch read back from an older checkpoint gets it too.
    data_starved: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_starved", is_data_starved(self.data_wait_fraction))

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


EpochCallback = Callable[[EpochMetrics, "Trainer"], bool | None]

# Every BatchNorm torch ships (its common base class is private).
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


class Diverged(RuntimeError):
    """Training produced a non-finite loss or gradient norm."""

    def __init__(self, step: int, what: str, value: float):
        self.step = step
        super().__init__(f"{what} became {value} at step {step}")


@dataclass
class TrainOutcome:
    history: list[EpochMetrics] = field(default_factory=list)
    stopped_early: bool = False
    diverged: Diverged | None = None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)


class WarmupCosine:
    """LR multiplier: linear warmup from ~0 to 1, then cosine down to ``min_ratio`` at ``total``."""

    def __init__(self, warmup: int, total: int, min_ratio: float):
        self.warmup, self.total, self.min_ratio = warmup, max(total, 1), min_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


CUDA_CHECK_EVERY = 32  # steps between divergence checks on CUDA (each check is one host sync)

NO_DECAY_NAMES = ("pos_embed", "cls_token", "relative_bias", "gamma")


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on weight matrices and conv kernels only (not norms, biases, gains, tables)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or any(key in name for key in NO_DECAY_NAMES):
            no_decay.append(param)
        else:
            decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def resolve_dtype(precision: str, device: torch.device) -> torch.dtype:
    """The autocast dtype. ``auto``: on CUDA bf16 where the GPU has it natively (Ampere and later),
    else fp16, which trains under a gradient scaler (V100, T4: bf16 there is emulated and slow);
    fp32 elsewhere. ``bf16``/``fp16``/``fp32`` as named."""
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return torch.float32
    if precision in ("bf16", "fp16"):
        return torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16


class Trainer:
    """Trains one model on one dataset under one budget; resumable from ``state_dict``."""

    def __init__(
        self,
        model: nn.Module,
        data: DataBundle,
        config: TrainingConfig,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
        channels_last: bool | None = None,
        group: Group | None = None,
        cpus: float | None = None,
    ):
        self.device, self.dtype, self.config, self.data = device, dtype, config, data
        # Data parallelism (trials.distributed): this rank trains on its part of every batch;
        # rank 0 alone evaluates and reports. None: one process.
        self.group = group if group is not None and group.world_size > 1 else None
        self._data_parallel: dict[int, nn.Module] = {}  # DDP wrappers of the forward callables
        if self.group is not None:
            data.train.shard(self.group.rank, self.group.world_size)
        # Channels-last on CUDA (tensor cores want NHWC); the data path emits batches in this layout.
        self.channels_last = device.type == "cuda" if channels_last is None else channels_last
        memory_format = torch.channels_last if self.channels_last else torch.preserve_format
        self.model = model.to(device, memory_format=memory_format)
        self.steps_per_epoch = len(data.train)
        if config.steps is not None:
            self.total_steps = config.steps
            self.total_epochs = math.ceil(config.steps / self.steps_per_epoch)
        else:
            self.total_epochs = config.epochs
            self.total_steps = config.epochs * self.steps_per_epoch
        warmup = (
            config.warmup_steps
            if config.warmup_steps is not None
            else round(config.warmup_epochs * self.steps_per_epoch)
        )
        # Fused AdamW on CUDA (one kernel for the whole update); the foreach default elsewhere.
        fused = {"fused": True} if device.type == "cuda" else {}
        self.optimizer = torch.optim.AdamW(
            parameter_groups(self.model, config.weight_decay), lr=config.lr, betas=config.betas, **fused
        )
        # fp16 gradients underflow without loss scaling; disabled (every call a no-op) for bf16 and fp32.
        # Fused AdamW takes the scaler's inf flag on the device: no host sync per step on CUDA.
        self.scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
        self.check_every = config.divergence_check_every or (1 if device.type == "cpu" else CUDA_CHECK_EVERY)
        self.notes: list[str] = []  # what the trial should know about how it ran (a compile fallback, ...)
        self.compile_skipped_because: str | None = None  # why compile: auto chose eager for this trial
        self.runtime: dict[str, Any] = {}  # facts the runner decided (GPU memory cap, backends, data workers)
        self.compile_s: float | None = None  # the first compiled step (compilation included), not in epoch 1's time
        self.compile_clock = CompileClock()  # every compile of this trial: training and no-grad graphs apart
        self._no_grad_compile_before_training: float | None = None  # the cost measurement's share, left out
        self._cache_counts_at_start: dict[str, int] = {}
        self._compile_recorded = False  # this node's compile ledger has this trial's measurement
        self._compile_cache_dir: str | None = None  # set as the trial is set up to compile
        self.compile_requested = self._compile_wanted(config.compile, cpus)
        self._use_compiled = self.compile_requested
        self._graphs_at_start = 0
        self._forward: Callable[[torch.Tensor], torch.Tensor] = self.model
        if self.compile_requested:
            self._forward = self._compile(config.compile_backend)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, WarmupCosine(min(warmup, self.total_steps), self.total_steps, config.min_lr / config.lr)
        )
        self.epoch = 0
        self.step = 0
        self.history: list[EpochMetrics] = []
        self.cost = None  # the trial's CostMeasurement, once measured

    @property
    def finished(self) -> bool:
        """Whether the budget (epochs or steps) is spent."""
        return self.epoch >= self.total_epochs or self.step >= self.total_steps

    # -- checkpointing -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "epoch": self.epoch,
            "step": self.step,
            "history": [m.to_dict() for m in self.history],
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "scaler": self.scaler.state_dict(),  # {} unless fp16: the loss scale reached
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.step = state["epoch"], state["step"]
        self.history = [EpochMetrics(**m) for m in state["history"]]
        torch.set_rng_state(state["torch_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        if state.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["scaler"])

    # -- compilation ---------------------------------------------------------------------------
    def _compile_wanted(self, setting: bool | str, cpus: float | None) -> bool:
        """Whether this trial compiles. When it may, Inductor is first set up for it (compile threads
        from ``cpus``, the node's cache directory: :func:`trials.compile_cache.configure_compiler`);
        ``auto`` then applies :func:`trials.compile_cache.decide_auto` to what this node measured of
        the architecture, and a skip is said in :attr:`notes` and the runtime facts."""
        if setting is False or (setting == "auto" and self.device.type not in compile_cache.AUTO_DEVICE_TYPES):
            return False
        facts = compile_cache.configure_compiler(cpus)
        self._compile_cache_dir = facts["compile_cache_dir"]
        self.runtime.update(facts)
        if setting != "auto":
            return True
        known = self._compile_ledger().read(self._architecture_key())
        decision = compile_cache.decide_auto(
            self.device.type, known, self.total_steps, self.config.compile_budget_share
        )
        self.runtime.update(decision.facts())
        if not decision.compile:
            self.notes.append(decision.reason)
            self.compile_skipped_because = decision.reason
        return decision.compile

    def _compile_ledger(self) -> compile_cache.CompileLedger:
        return compile_cache.CompileLedger(self._compile_cache_dir or compile_cache.cache_dir())

    def _architecture_key(self) -> str:
        """What makes another trial compile the same graphs and step at the same speed on this node."""
        model_config = getattr(self.model, "config", None)
        device = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else self.device.type
        return compile_cache.architecture_key(
            model=model_config.to_dict() if hasattr(model_config, "to_dict") else repr(self.model),
            image_size=self.data.image_size,
            batch_size=getattr(self.data.train, "batch_size", None),
            world_size=self.group.world_size if self.group is not None else 1,
            dtype=str(self.dtype),
            channels_last=self.channels_last,
            device=device,
            backend=self.config.compile_backend,
            torch=torch.__version__,
        )

    def _compile(self, backend: str) -> Callable[[torch.Tensor], torch.Tensor]:
        """torch.compile the model, after clearing what earlier trials of this process compiled.

        Dynamo keeps at most 8 compiled variants per code object (``recompile_limit``), and every
        model of one class shares its ``forward``'s: in a reused Ray actor the cache fills after
        about four trials, and later trials silently run eagerly. Resetting per trial keeps each
        trial compiled; :attr:`compiled_graphs` counts what this trial really compiled.
        """
        torch.compiler.reset()  # Dynamo's in-memory state only: Inductor's on-disk caches stay
        self.compile_clock.install()  # after the reset, which drops compile callbacks
        self._graphs_at_start = dynamo_utils.counters["stats"]["unique_graphs"]
        self._cache_counts_at_start = compile_cache.cache_counts()
        try:
            return torch.compile(self.model, backend=backend)
        except Exception as error:  # an unknown backend name is a config error, named as such
            raise ConfigError("training.compile_backend", f"{backend!r}: {str(error).splitlines()[0]}") from None

    @property
    def compiled_graphs(self) -> int:
        """Graphs torch.compile produced for this trial so far (0 when it ran eagerly)."""
        if not self.compile_requested:
            return 0
        return int(dynamo_utils.counters["stats"]["unique_graphs"] - self._graphs_at_start)

    @property
    def compiled(self) -> bool:
        """Whether this trial really ran compiled: asked for, no fallback, and at least one graph compiled."""
        return self._use_compiled and self.compiled_graphs > 0

    def _record_compile_facts(self, metrics: EpochMetrics) -> None:
        """After an epoch of a compiling trial: its compile facts so far, into :attr:`runtime`.

        ``eval_compile_s``: the graphs compiled without gradients since training began (evaluation,
        BatchNorm recalibration; the compiled training step's own time is ``compile_s``);
        ``compile_total_s``: every compile of the trial, the cost measurement's included; the cache
        hits and misses of this trial. The first epoch that ran compiled also leaves this node's
        measurement of the architecture in the compile ledger, for ``compile: auto`` to read.
        """
        if not self.compile_requested:
            return
        clock = self.compile_clock
        counts = compile_cache.cache_counts()
        counts = {name: value - self._cache_counts_at_start.get(name, 0) for name, value in counts.items()}
        before = self._no_grad_compile_before_training or 0.0
        self.runtime.update(eval_compile_s=clock.seconds["no_grad"] - before, compile_total_s=clock.total, **counts)
        batch = getattr(self.data.train, "batch_size", None)
        if self._compile_recorded or not self.compiled or not batch or metrics.train_images_per_s <= 0:
            return
        step_s = batch / metrics.train_images_per_s
        record = compile_cache.CompileRecord(clock.total, step_s, cold=counts["fxgraph_cache_misses"] > 0)
        self._compile_ledger().write(self._architecture_key(), record)
        self._compile_recorded = True

    def _compile_failed(self, reason: str) -> None:
        """torch.compile could not compile this model: run it eagerly, say so once, keep the note."""
        note = f"torch.compile failed ({reason}); the trial ran eagerly"
        warnings.warn(note, RuntimeWarning, stacklevel=3)
        self.notes.append(note)
        self._use_compiled = False
        self._forward = self.model
        release_memory(self.device)  # the failed attempt's buffers, before the eager retry allocates

    def _with_fallback(self, run: Callable[[Callable[[torch.Tensor], torch.Tensor]], Any]) -> Any:
        """``run(forward)`` through the compiled model; on a compile error, once more eagerly.

        Only compile errors fall back (forward, or the backward AOTAutograd compiles lazily at the
        first ``backward()``); an out-of-memory propagates as what it is. The eager retry happens
        after the ``except`` block, once the failed attempt's traceback, and with it its
        activations, are gone. A compiled call that failed updated nothing, so nothing runs twice.
        """
        if self._use_compiled:
            reason = None
            try:
                return run(self._forward)
            except Exception as error:
                if not is_compile_error(error):
                    raise
                reason = _compile_failure_reason(error)
            self._compile_failed(reason)
        return run(self.model)

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """The model's output as the trial computes it: compiled when the trial compiles (eager after a
        compile fallback, as in training). The caller sets grad mode and autocast. The trial's cost
        is timed through this, so its throughput is the compiled model's, not an eager stand-in's."""
        return self._with_fallback(lambda forward: forward(images))

    # -- the loop ------------------------------------------------------------------------------
    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32)

    def _prepare(self, images: torch.Tensor) -> torch.Tensor:
        """The model's memory layout; free when the data path already produced it (it does on CUDA)."""
        return images.contiguous(memory_format=torch.channels_last) if self.channels_last else images

    def _forward_backward(
        self, forward, images: torch.Tensor, targets: torch.Tensor, share: float = 1.0
    ) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        if self.group is not None:
            forward = self._ddp(forward)
        with self._autocast():
            loss = F.cross_entropy(forward(images), targets, label_smoothing=self.config.label_smoothing)
        if share != 1.0:
            loss = loss * share
        self.scaler.scale(loss).backward()  # the loss itself when no scaler is needed
        return loss.detach()

    def _ddp(self, forward: nn.Module) -> nn.Module:
        """``forward`` (the compiled or the eager model) under DDP, made once per callable.

        Built at the first step on every rank together (DDP broadcasts rank 0's weights as it is
        made); a compile fallback on one rank happens on all, since every rank compiles the same
        graph. Buffers (BatchNorm statistics) are broadcast from rank 0 at every forward.
        """
        key = id(forward)
        if key not in self._data_parallel:
            ids = [self.device.index if self.device.index is not None else 0] if self.device.type == "cuda" else None
            self._data_parallel[key] = nn.parallel.DistributedDataParallel(forward, device_ids=ids)
        return self._data_parallel[key]

    def train_step(
        self, images: torch.Tensor, labels: torch.Tensor, batch_rows: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimiser step without a host sync: the loss and the gradient norm, both on the device.

        ``batch_rows``: images in the whole (global) batch when this rank trains on part of it;
        its mean loss is weighted by its share times the world size, so the gradient DDP averages
        is the global batch's (the ranks' parts may differ in size by one image).
        """
        images = self._prepare(images)
        images, targets = self.data.mix(images, labels) if self.data.mix is not None else (images, labels)
        share = 1.0
        if self.group is not None and batch_rows:
            share = images.shape[0] * self.group.world_size / batch_rows
        loss = self._with_fallback(lambda forward: self._forward_backward(forward, images, targets, share))
        self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        grad_norm = nn.utils.clip_grad_norm_(
            self.model.parameters(), self.config.grad_clip if self.config.grad_clip else math.inf
        )
        return loss, self._scaled_step_norm(grad_norm)

    def _scaled_step_norm(self, grad_norm: torch.Tensor) -> torch.Tensor:
        """Under fp16 loss scaling, a non-finite gradient norm is an overflow the scaler handles (it
        skips the step and lowers the scale), not divergence: recorded as 0. The loss still decides."""
        if not self.scaler.is_enabled():
            return grad_norm
        return torch.where(torch.isfinite(grad_norm), grad_norm, torch.zeros_like(grad_norm))

    def train_epoch(self, progress: bool) -> tuple[float, float, float, int]:
        """One epoch (or what is left of the step budget): mean loss, train seconds, wait seconds, images.

        No host synchronisation per step: whether each step's loss and gradient norm are finite is
        recorded on the device, and checked every ``check_every`` steps and at the end of the epoch
        (one sync per check). A failed check finds the first bad step from the recorded flags and
        raises :class:`Diverged` for it, exactly as a per-step check would; the few steps computed
        past it belong to a trial that ends there anyway, and no checkpoint is taken mid-epoch.
        """
        self.model.train()
        set_epoch = getattr(self.data.train, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(self.epoch)
        steps_left = min(self.steps_per_epoch, self.total_steps - self.step)
        bar = _progress_bar(steps_left, f"epoch {self.epoch + 1}/{self.total_epochs}", progress)
        loss_sum = torch.zeros((), device=self.device)
        losses = torch.zeros(steps_left, device=self.device)
        norms = torch.zeros(steps_left, device=self.device)
        first_step, checked, lr_sum = self.step, 0, 0.0
        images_seen, wait, batches = 0, 0.0, iter(self.data.train)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        # The first compiled step compiles forward and backward: timed apart (``compile_s``) and
        # left out of the epoch's time and images, so epoch 1's images/s is a training rate.
        time_first_step = self.compile_requested and self.compile_s is None and steps_left > 1
        if self._no_grad_compile_before_training is None:  # what the cost measurement compiled is not eval's
            self._no_grad_compile_before_training = self.compile_clock.seconds["no_grad"]
        start = time.perf_counter()
        for i in range(steps_left):
            t0 = time.perf_counter()
            images, labels = next(batches)
            wait += time.perf_counter() - t0
            loss_value, grad_norm = self.train_step(images, labels, self.data.train.rows(i))
            losses[i] = loss_value  # device-side records: no host sync
            norms[i] = grad_norm
            if (i + 1) % self.check_every == 0:
                self._share_losses(losses, checked, i + 1)
                self._check_finite(losses, norms, checked, i + 1, first_step)
                checked = i + 1
            lr_sum += self.optimizer.param_groups[0]["lr"]  # the rate this step used
            self.scaler.step(self.optimizer)  # optimizer.step(), skipped by an fp16 overflow
            self.scaler.update()
            self.scheduler.step()
            self.step += 1
            loss_sum += loss_value
            if time_first_step and i == 0:
                synchronize(self.device)
                self.compile_s = time.perf_counter() - start
                start, wait = time.perf_counter(), 0.0
            else:
                images_seen += images.shape[0]
            if bar is not None:
                bar.update(1)
        self._share_losses(losses, checked, steps_left)
        self._check_finite(losses, norms, checked, steps_left, first_step)
        if self.group is not None:  # the global batch's mean loss, and every rank's images
            totals = torch.stack([loss_sum.double(), torch.full_like(loss_sum, images_seen, dtype=torch.float64)])
            self.group.all_sum(totals)
            loss_sum, images_seen = totals[0] / self.group.world_size, int(totals[1].item())
        synchronize(self.device)
        elapsed = time.perf_counter() - start
        self._epoch_mean_lr = lr_sum / max(steps_left, 1)
        if bar is not None:
            bar.close()
        return float(loss_sum) / max(steps_left, 1), elapsed, wait, images_seen

    def _share_losses(self, losses: torch.Tensor, begin: int, end: int) -> None:
        """Data-parallel: steps ``[begin, end)``'s losses summed over the ranks, in place.

        Every rank then sees the same non-finite loss at the same step and ends as diverged there
        together (gradient norms are equal on every rank already: DDP averaged the gradients).
        """
        if self.group is None or end <= begin:
            return
        losses[begin:end] = self.group.all_sum(losses[begin:end].clone())

    @staticmethod
    def _check_finite(losses: torch.Tensor, norms: torch.Tensor, begin: int, end: int, first_step: int) -> None:
        """Raise :class:`Diverged` for the first step in ``[begin, end)`` whose loss or gradient norm is not finite."""
        if end <= begin:
            return
        finite = torch.isfinite(losses[begin:end]) & torch.isfinite(norms[begin:end])
        if bool(finite.all()):  # the one host sync of this check
            return
        index = begin + int((~finite).nonzero()[0])
        loss, norm = float(losses[index]), float(norms[index])
        what, value = ("loss", loss) if not math.isfinite(loss) else ("gradient norm", norm)
        raise Diverged(first_step + index + 1, what, value)

    def recalibrate_batchnorm(self) -> None:
        """Recompute every BatchNorm's running statistics over the un-augmented training split.

        Statistics are reset and accumulated as a plain average over the pass (``momentum=None``)
        in train mode without gradients; the weights do not change. A model without BatchNorm
        (CaiT) is left as it is.
        """
        norms = [m for m in self.model.modules() if isinstance(m, BATCH_NORMS)]
        if not norms or self.data.train_eval is None:
            return
        momenta = [m.momentum for m in norms]
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
        self.model.train()
        try:
            with torch.no_grad():
                for images, _ in self.data.train_eval:
                    x = self._prepare(images)
                    with self._autocast():
                        self._with_fallback(lambda forward, x=x: forward(x))
        finally:
            for m, momentum in zip(norms, momenta, strict=True):
                m.momentum = momentum

    @torch.inference_mode()
    def evaluate(self, source: Any = None) -> tuple[float, float, float]:
        """Mean cross-entropy (no smoothing), top-1 and top-5 accuracy (%) on ``source`` (the validation split)."""
        self.model.eval()
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        correct1 = torch.zeros((), device=self.device, dtype=torch.long)
        correct5 = torch.zeros((), device=self.device, dtype=torch.long)
        count = 0
        k = min(5, self.data.num_classes)
        for images, labels in self.data.val if source is None else source:
            x = self._prepare(images)
            with self._autocast():
                logits = self._with_fallback(lambda forward, x=x: forward(x)).float()
            loss_sum += F.cross_entropy(logits, labels, reduction="sum").double()
            top = logits.topk(k, dim=1).indices
            hits = top == labels[:, None]
            correct1 += hits[:, 0].sum()
            correct5 += hits.any(dim=1).sum()
            count += labels.shape[0]
        count = max(count, 1)
        return float(loss_sum) / count, 100.0 * float(correct1) / count, 100.0 * float(correct5) / count

    def fit(self, callback: EpochCallback | None = None, progress: bool | None = None) -> TrainOutcome:
        """Train from the current epoch to the end of the budget (or until the callback says stop)."""
        if progress is None:
            progress = sys.stderr.isatty()
        outcome = TrainOutcome(history=self.history)
        while not self.finished:
            try:
                train_loss, seconds, wait, images = self.train_epoch(progress)
            except Diverged as diverged:  # the same step on every rank (the losses were shared)
                outcome.diverged = diverged
                return outcome
            if self.group is not None and not self.group.lead:
                self.epoch += 1
                if self._follow_lead(outcome):
                    return outcome
                continue
            lr = self._epoch_mean_lr
            try:
                train_eval_loss = None
                if self.config.recalibrate_batchnorm and self.data.train_eval is not None:
                    self.recalibrate_batchnorm()
                    train_eval_loss = self.evaluate(self.data.train_eval)[0]
                eval_loss, top1, top5 = self.evaluate()
                if not math.isfinite(eval_loss):
                    raise Diverged(self.step, "evaluation loss", eval_loss)
            except Diverged as diverged:
                outcome.diverged = diverged
                if self.group is not None:
                    self.group.agree(EpochSignal.DIVERGED, self.device)
                return outcome
            self.epoch += 1
            peak_allocated, peak_reserved = peak_memory(self.device)
            metrics = EpochMetrics(
                epoch=self.epoch,
                step=self.step,
                train_loss=train_loss,
                eval_loss=eval_loss,
                top1=top1,
                top5=top5,
                lr=lr,
                epoch_time=seconds,
                train_images_per_s=images / seconds if seconds > 0 else 0.0,
                data_wait_fraction=wait / seconds if seconds > 0 else 0.0,
                peak_memory_mb=peak_allocated,
                peak_reserved_mb=peak_reserved,
                train_eval_loss=train_eval_loss,
            )
            self.history.append(metrics)
            self._record_compile_facts(metrics)
            self._note_if_starved(metrics)
            stop = callback is not None and bool(callback(metrics, self))
            if self.group is not None:
                self.group.agree(EpochSignal.STOP if stop else EpochSignal.CONTINUE, self.device)
            if stop:
                outcome.stopped_early = True
                return outcome
        return outcome

    def _note_if_starved(self, metrics: EpochMetrics) -> None:
        """The first data-starved epoch of a trial: one warning and a note in its record (the flag is per epoch)."""
        if not metrics.data_starved or any(m.data_starved for m in self.history[:-1]):
            return
        note = (
            f"epoch {metrics.epoch} was data-starved: {100 * metrics.data_wait_fraction:.0f}% of its time waiting "
            f"for batches (over {100 * DATA_STARVED_FRACTION:.0f}%, {self.data.workers} data workers); "
            "give the trial more CPUs (search.resources.cpus) or set data.num_workers"
        )
        warnings.warn(note, RuntimeWarning, stacklevel=2)
        self.notes.append(note)

    def _follow_lead(self, outcome: TrainOutcome) -> bool:
        """A peer at the end of an epoch: do what rank 0 decided (True: the trial ends here)."""
        signal = self.group.agree(None, self.device)
        if signal is EpochSignal.STOP:
            outcome.stopped_early = True
        elif signal is EpochSignal.DIVERGED:
            outcome.diverged = Diverged(self.step, "evaluation loss on rank 0", math.nan)
        return signal is not EpochSignal.CONTINUE


def _compile_failure_reason(error: BaseException) -> str:
    """``Type: first line`` of a compile error, short enough for a note."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()] or [""]
    return f"{type(error).__name__}: {' '.join(lines[:2])[:200]}".rstrip(": ")


def _progress_bar(total: int, description: str, enabled: bool):
    if not enabled:
        return None
    return tqdm_auto.tqdm(total=total, desc=description, leave=False, unit="step")
