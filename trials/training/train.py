"""The training loop of a trial: AdamW, warmup + cosine, clipping, label smoothing, bf16 on CUDA
(fp16 with loss scaling on a GPU without native bf16).

Evaluates after every epoch and hands each epoch's metrics to a callback (the search reports
to Ray Tune through it; returning True stops the trial early). A non-finite loss or gradient
norm ends training as *diverged* at that step: never a crash, never a NaN metric.
The :class:`Trainer` state (model, optimiser, schedule, epoch, history, RNG) round-trips
through ``state_dict`` so a retried trial resumes from its last finished epoch.

:class:`Trainer` orchestrates; each job lives in its own module: the optimiser, schedule and
budget (:mod:`trials.training.optimiser`), the compiled forward with its fallback and compile facts
(:mod:`trials.compilation.compiled_forward`), divergence checks without a per-step host sync
(:mod:`trials.training.divergence`), a data-parallel rank's part (:mod:`trials.devices.rank`), evaluation
(:mod:`trials.training.evaluation`), BatchNorm recalibration (:mod:`trials.training.batchnorm`) and the checkpoint
(:mod:`trials.training.checkpoint`).
"""

from __future__ import annotations

import math
import random
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trials.compilation.compiled_forward import CompiledForward, CompilePlan, CompileTarget
from trials.config.data_config import DATA_STARVED_FRACTION, is_data_starved
from trials.config.trial_config import TrainingConfig
from trials.data import DataBundle
from trials.devices.distributed import EpochSignal, Group
from trials.devices.gpu import peak_memory
from trials.devices.gpu import resolve_device as resolve_device
from trials.devices.rank import Rank
from trials.lazy import lazy_import
from trials.measurement.timing import synchronize
from trials.training import batchnorm, checkpoint, evaluation
from trials.training.divergence import Diverged, StepChecks, check_interval, scaled_step_norm
from trials.training.optimiser import Budget, build_optimizer, build_scheduler, grad_scaler
from trials.training.optimiser import resolve_dtype as resolve_dtype

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


@dataclass
class TrainOutcome:
    history: list[EpochMetrics] = field(default_factory=list)
    stopped_early: bool = False
    diverged: Diverged | None = None


Batch = tuple[torch.Tensor, torch.Tensor]  # images, labels


@dataclass
class EpochRun:
    """One epoch's tally as its steps run: the loss sum (on the device), when the timed part
    started, seconds waiting for batches, images trained on, the sum of the steps' rates."""

    loss_sum: torch.Tensor
    start: float = 0.0
    wait: float = 0.0
    images: int = 0
    lr_sum: float = 0.0


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)


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
        # Data parallelism (trials.devices.distributed): this rank trains on its part of every batch;
        # rank 0 alone evaluates and reports. None: one process.
        self.group = group if group is not None and group.world_size > 1 else None
        self.parallel = Rank(self.group, device)  # DDP wrapping, loss shares, sums over ranks (trials.devices.rank)
        if self.group is not None:
            data.train.shard(self.group.rank, self.group.world_size)
        # Channels-last on CUDA (tensor cores want NHWC); the data path emits batches in this layout.
        self.channels_last = device.type == "cuda" if channels_last is None else channels_last
        memory_format = torch.channels_last if self.channels_last else torch.preserve_format
        self.model = model.to(device, memory_format=memory_format)
        self.budget = Budget.of(config, len(data.train))
        self.optimizer = build_optimizer(self.model, config, device)
        self.scaler = grad_scaler(device, dtype)
        self.check_every = check_interval(config.divergence_check_every, device)
        self.notes: list[str] = []  # what the trial should know about how it ran (a compile fallback, ...)
        self.runtime: dict[str, Any] = {}  # facts the runner decided (GPU memory cap, backends, loader processes)
        self.compile_s: float | None = None  # the first compiled step (compilation included), not in epoch 1's time
        self.compiled_forward = CompiledForward(self._compile_target(), self._compile_plan(cpus), self.notes)
        self.runtime.update(self.compiled_forward.facts)
        self.scheduler = build_scheduler(self.optimizer, config, self.budget)
        self.epoch = 0
        self.step = 0
        self.history: list[EpochMetrics] = []
        self.cost = None  # the trial's CostMeasurement, once measured

    def _compile_target(self) -> CompileTarget:
        return CompileTarget(
            model=self.model,
            device=self.device,
            dtype=self.dtype,
            channels_last=self.channels_last,
            image_size=self.data.image_size,
            batch_size=getattr(self.data.train, "batch_size", None),
            world_size=self.parallel.world_size,
            backend=self.config.compile_backend,
        )

    def _compile_plan(self, cpus: float | None) -> CompilePlan:
        config = self.config
        return CompilePlan(
            config.compile,
            cpus,
            self.total_steps,
            config.compile_budget_share,
            scope=config.compile_scope,
            cuda_graphs=config.cuda_graphs,
            artifacts_dir=config.compile_artifacts_dir,
        )

    # -- the budget ----------------------------------------------------------------------------
    @property
    def steps_per_epoch(self) -> int:
        return self.budget.steps_per_epoch

    @property
    def total_steps(self) -> int:
        return self.budget.total_steps

    @property
    def total_epochs(self) -> int:
        return self.budget.total_epochs

    @property
    def finished(self) -> bool:
        """Whether the budget (epochs or steps) is spent."""
        return self.epoch >= self.total_epochs or self.step >= self.total_steps

    # -- compilation (trials.compilation.compiled_forward) -------------------------------------------------
    @property
    def compile_requested(self) -> bool:
        """Whether this trial set out to compile (``training.compile``, or ``auto``'s decision)."""
        return self.compiled_forward.requested

    @property
    def compile_skipped_because(self) -> str | None:
        """Why ``compile: auto`` chose eager for this trial (None: it did not)."""
        return self.compiled_forward.skipped_because

    @property
    def compiled_graphs(self) -> int:
        """Graphs torch.compile produced for this trial so far (0 when it ran eagerly)."""
        return self.compiled_forward.graphs

    @property
    def compiled(self) -> bool:
        """Whether this trial really ran compiled: asked for, no fallback, and at least one graph compiled."""
        return self.compiled_forward.compiled

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """The model's output as the trial computes it: compiled when the trial compiles (eager after a
        compile fallback, as in training). The caller sets grad mode and autocast. The trial's cost
        is timed through this, so its throughput is the compiled model's, not an eager stand-in's."""
        return self.compiled_forward.run(lambda forward: forward(images))

    # -- checkpointing (trials.training.checkpoint) -----------------------------------------------------
    def _objects(self) -> checkpoint.TrainingObjects:
        return checkpoint.TrainingObjects(self.model, self.optimizer, self.scheduler, self.scaler)

    def state_dict(self) -> dict[str, Any]:
        progress = checkpoint.Progress(self.epoch, self.step, [m.to_dict() for m in self.history])
        return checkpoint.save_state(self._objects(), progress)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        progress = checkpoint.load_state(self._objects(), state)
        self.epoch, self.step = progress.epoch, progress.step
        self.history = [EpochMetrics(**m) for m in progress.history]

    # -- one step ------------------------------------------------------------------------------
    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32)

    def _prepare(self, images: torch.Tensor) -> torch.Tensor:
        """The model's memory layout; free when the data path already produced it (it does on CUDA)."""
        return images.contiguous(memory_format=torch.channels_last) if self.channels_last else images

    def _infer(self, images: torch.Tensor) -> torch.Tensor:
        """A forward without a loss, as the trial runs it: layout, autocast, compiled or eager.
        The caller sets grad mode and train/eval mode (evaluation, BatchNorm recalibration)."""
        x = self._prepare(images)
        with self._autocast():
            return self.compiled_forward.run(lambda forward: forward(x))

    def _forward_backward(
        self, forward, images: torch.Tensor, targets: torch.Tensor, share: float = 1.0
    ) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        forward = self.parallel.wrap(forward)
        with self._autocast():
            loss = F.cross_entropy(forward(images), targets, label_smoothing=self.config.label_smoothing)
        if share != 1.0:
            loss = loss * share
        self.scaler.scale(loss).backward()  # the loss itself when no scaler is needed
        return loss.detach()

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
        share = self.parallel.loss_share(images.shape[0], batch_rows)
        loss = self.compiled_forward.run(lambda forward: self._forward_backward(forward, images, targets, share))
        self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        grad_norm = nn.utils.clip_grad_norm_(
            self.model.parameters(), self.config.grad_clip if self.config.grad_clip else math.inf
        )
        return loss, self._scaled_step_norm(grad_norm)

    def _scaled_step_norm(self, grad_norm: torch.Tensor) -> torch.Tensor:
        """An fp16 overflow's gradient norm recorded as 0: :func:`trials.training.divergence.scaled_step_norm`."""
        return scaled_step_norm(self.scaler, grad_norm)

    def _optimiser_step(self) -> float:
        """Step the optimiser (skipped by an fp16 overflow), the scaler and the schedule; the rate used."""
        lr = self.optimizer.param_groups[0]["lr"]  # the rate this step used
        self.scaler.step(self.optimizer)  # optimizer.step(), skipped by an fp16 overflow
        self.scaler.update()
        self.scheduler.step()
        self.step += 1
        return lr

    # -- one epoch -----------------------------------------------------------------------------
    def train_epoch(self, progress: bool) -> tuple[float, float, float, int]:
        """One epoch (or what is left of the step budget): mean loss, train seconds, wait seconds, images.

        No host synchronisation per step: whether each step's loss and gradient norm are finite is
        recorded on the device, and checked every ``check_every`` steps and at the end of the epoch
        (one sync per check, :class:`trials.training.divergence.StepChecks`). A failed check raises
        :class:`Diverged` for the first bad step; the few steps computed past it belong to a trial
        that ends there anyway, and no checkpoint is taken mid-epoch.
        """
        self.model.train()
        set_epoch = getattr(self.data.train, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(self.epoch)
        steps_left = min(self.steps_per_epoch, self.total_steps - self.step)
        bar = _progress_bar(steps_left, f"epoch {self.epoch + 1}/{self.total_epochs}", progress)
        run = EpochRun(loss_sum=torch.zeros((), device=self.device))
        checks = StepChecks(steps_left, self.check_every, self.step, self.device, self.parallel.share_losses)
        batches = iter(self.data.train)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.compiled_forward.training_starts()  # what the cost measurement compiled is not eval's
        self._run_steps(batches, steps_left, run, checks, bar)
        checks.check(steps_left)
        loss_sum, images = self.parallel.epoch_totals(run.loss_sum, run.images)
        synchronize(self.device)
        elapsed = time.perf_counter() - run.start
        self._epoch_mean_lr = run.lr_sum / max(steps_left, 1)
        if bar is not None:
            bar.close()
        return float(loss_sum) / max(steps_left, 1), elapsed, run.wait, images

    def _run_steps(self, batches: Iterator[Batch], steps: int, run: EpochRun, checks: StepChecks, bar) -> None:
        """The epoch's ``steps`` steps, tallied in ``run`` and recorded in ``checks``.

        The first compiled step compiles forward and backward: timed apart (``compile_s``) and
        left out of the epoch's time and images, so epoch 1's images/s is a training rate.
        """
        time_first_step = self.compile_requested and self.compile_s is None and steps > 1
        run.start = time.perf_counter()
        for i in range(steps):
            t0 = time.perf_counter()
            images, labels = next(batches)
            run.wait += time.perf_counter() - t0
            loss_value, grad_norm = self.train_step(images, labels, self.data.train.rows(i))
            checks.record(i, loss_value, grad_norm)  # device-side records: no host sync
            run.lr_sum += self._optimiser_step()
            run.loss_sum += loss_value
            if time_first_step and i == 0:
                synchronize(self.device)
                self.compile_s = time.perf_counter() - run.start
                run.start, run.wait = time.perf_counter(), 0.0
            else:
                run.images += images.shape[0]
            if bar is not None:
                bar.update(1)

    # -- evaluation ----------------------------------------------------------------------------
    def recalibrate_batchnorm(self) -> None:
        """Recompute every BatchNorm's running statistics over the un-augmented training split
        (:func:`trials.training.batchnorm.recalibrate`); a model without BatchNorm (CaiT) is left as it is."""
        if self.data.train_eval is None:
            return
        batchnorm.recalibrate(self.model, self.data.train_eval, self._infer)

    def evaluate(self, source: Any = None, keep: evaluation.Kept | None = None) -> tuple[float, float, float]:
        """Mean cross-entropy (no smoothing), top-1 and top-5 accuracy (%) on ``source`` (the validation
        split); ``keep``: receives the pass's per-image top-1 indices and labels (:func:`evaluation.evaluate`)."""
        self.model.eval()
        batches = self.data.val if source is None else source
        return evaluation.evaluate(self._infer, batches, self.data.num_classes, self.device, keep)

    def _evaluate_epoch(self) -> tuple[float | None, float, float, float]:
        """The end of an epoch on rank 0: BatchNorm recalibrated and the training split's eval-mode
        loss when asked, then the validation split; a non-finite validation loss is divergence."""
        train_eval_loss = None
        if self.config.recalibrate_batchnorm and self.data.train_eval is not None:
            self.recalibrate_batchnorm()
            train_eval_loss = self.evaluate(self.data.train_eval)[0]
        eval_loss, top1, top5 = self.evaluate()
        if not math.isfinite(eval_loss):
            raise Diverged(self.step, "evaluation loss", eval_loss)
        return train_eval_loss, eval_loss, top1, top5

    # -- the loop ------------------------------------------------------------------------------
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
            if not self.parallel.leads:
                self.epoch += 1
                if self._follow_lead(outcome):
                    return outcome
                continue
            lr = self._epoch_mean_lr
            try:
                train_eval_loss, eval_loss, top1, top5 = self._evaluate_epoch()
            except Diverged as diverged:
                outcome.diverged = diverged
                self.parallel.agree(EpochSignal.DIVERGED)
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
            if self._end_epoch(metrics, callback):
                outcome.stopped_early = True
                return outcome
        return outcome

    def _end_epoch(self, metrics: EpochMetrics, callback: EpochCallback | None) -> bool:
        """Rank 0 after evaluating: keep the epoch and its facts, ask the callback, tell the peers.
        True: the callback stopped the trial."""
        self.history.append(metrics)
        self.runtime.update(self.compiled_forward.epoch_facts(metrics.train_images_per_s))
        self._note_if_starved(metrics)
        stop = callback is not None and bool(callback(metrics, self))
        self.parallel.agree(EpochSignal.STOP if stop else EpochSignal.CONTINUE)
        return stop

    def _note_if_starved(self, metrics: EpochMetrics) -> None:
        """The first data-starved epoch of a trial: one warning and a note in its record (the flag is per epoch)."""
        if not metrics.data_starved or any(m.data_starved for m in self.history[:-1]):
            return
        note = (
            f"epoch {metrics.epoch} was data-starved: {100 * metrics.data_wait_fraction:.0f}% of its time waiting "
            f"for batches (over {100 * DATA_STARVED_FRACTION:.0f}%, {self.data.loader_processes} DataLoader "
            "processes); give the trial more CPUs (search.resources.cpus) or set data.num_workers"
        )
        warnings.warn(note, RuntimeWarning, stacklevel=3)
        self.notes.append(note)

    def _follow_lead(self, outcome: TrainOutcome) -> bool:
        """A peer at the end of an epoch: do what rank 0 decided (True: the trial ends here)."""
        signal = self.parallel.agree(None)
        if signal is EpochSignal.STOP:
            outcome.stopped_early = True
        elif signal is EpochSignal.DIVERGED:
            outcome.diverged = Diverged(self.step, "evaluation loss on rank 0", math.nan)
        return signal is not EpochSignal.CONTINUE


def _progress_bar(total: int, description: str, enabled: bool):
    if not enabled:
        return None
    return tqdm_auto.tqdm(total=total, desc=description, leave=False, unit="step")
