"""The training loop of a trial: AdamW, warmup + cosine, clipping, label smoothing, bf16 on CUDA.

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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .data import DataBundle
from .trial_config import TrainingConfig


@dataclass(frozen=True)
class EpochMetrics:
    """What one epoch produced. ``step`` counts optimiser steps since the start of the trial."""

    epoch: int
    step: int
    train_loss: float
    eval_loss: float
    top1: float
    top5: float
    lr: float
    epoch_time: float
    train_images_per_s: float
    data_wait_fraction: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


EpochCallback = Callable[[EpochMetrics, "Trainer"], bool | None]


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
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy ships with torch in practice
        pass


class WarmupCosine:
    """LR multiplier: linear warmup from ~0 to 1, then cosine down to ``min_ratio`` at ``total``."""

    def __init__(self, warmup: int, total: int, min_ratio: float):
        self.warmup, self.total, self.min_ratio = warmup, max(total, 1), min_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


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


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(precision: str, device: torch.device) -> torch.dtype:
    """``auto``: bf16 autocast on CUDA (tensor cores), fp32 elsewhere."""
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return torch.float32


class Trainer:
    """Trains one model on one dataset under one budget; resumable from ``state_dict``."""

    def __init__(
        self,
        model: nn.Module,
        data: DataBundle,
        config: TrainingConfig,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
    ):
        self.device, self.dtype, self.config, self.data = device, dtype, config, data
        self.channels_last = device.type == "cuda"
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
        self.optimizer = torch.optim.AdamW(
            parameter_groups(self.model, config.weight_decay), lr=config.lr, betas=config.betas
        )
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

    # -- the loop ------------------------------------------------------------------------------
    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.dtype, enabled=self.dtype != torch.float32)

    def _prepare(self, images: torch.Tensor) -> torch.Tensor:
        return images.contiguous(memory_format=torch.channels_last) if self.channels_last else images

    def train_epoch(self, progress: bool) -> tuple[float, float, float, int]:
        """One epoch (or what is left of the step budget): mean loss, train seconds, wait seconds, images."""
        self.model.train()
        set_epoch = getattr(self.data.train, "set_epoch", None)
        if set_epoch is not None:
            set_epoch(self.epoch)
        steps_left = min(self.steps_per_epoch, self.total_steps - self.step)
        bar = _progress_bar(steps_left, f"epoch {self.epoch + 1}/{self.total_epochs}", progress)
        loss_sum = torch.zeros((), device=self.device)
        images_seen, wait, batches = 0, 0.0, iter(self.data.train)
        start = time.perf_counter()
        for _ in range(steps_left):
            t0 = time.perf_counter()
            images, labels = next(batches)
            wait += time.perf_counter() - t0
            images = self._prepare(images)
            images, targets = self.data.mix(images, labels) if self.data.mix is not None else (images, labels)
            with self._autocast():
                loss = F.cross_entropy(self.model(images), targets, label_smoothing=self.config.label_smoothing)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(
                self.model.parameters(), self.config.grad_clip if self.config.grad_clip else math.inf
            )
            loss_value = loss.detach()
            # One host sync per step: needed to stop at the first non-finite step, not an epoch later.
            if not bool(torch.isfinite(loss_value) & torch.isfinite(grad_norm)):
                what, value = ("loss", loss_value) if not torch.isfinite(loss_value) else ("gradient norm", grad_norm)
                raise Diverged(self.step + 1, what, float(value))
            self.optimizer.step()
            self.scheduler.step()
            self.step += 1
            loss_sum += loss_value
            images_seen += images.shape[0]
            if bar is not None:
                bar.update(1)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - start
        if bar is not None:
            bar.close()
        return float(loss_sum) / max(steps_left, 1), elapsed, wait, images_seen

    @torch.inference_mode()
    def evaluate(self) -> tuple[float, float, float]:
        """Mean cross-entropy (no smoothing), top-1 and top-5 accuracy (%) on the validation split."""
        self.model.eval()
        loss_sum = torch.zeros((), device=self.device, dtype=torch.float64)
        correct1 = torch.zeros((), device=self.device, dtype=torch.long)
        correct5 = torch.zeros((), device=self.device, dtype=torch.long)
        count = 0
        k = min(5, self.data.num_classes)
        for images, labels in self.data.val:
            with self._autocast():
                logits = self.model(self._prepare(images)).float()
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
            lr = self.optimizer.param_groups[0]["lr"]
            try:
                train_loss, seconds, wait, images = self.train_epoch(progress)
                eval_loss, top1, top5 = self.evaluate()
                if not math.isfinite(eval_loss):
                    raise Diverged(self.step, "evaluation loss", eval_loss)
            except Diverged as diverged:
                outcome.diverged = diverged
                return outcome
            self.epoch += 1
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
            )
            self.history.append(metrics)
            if callback is not None and callback(metrics, self):
                outcome.stopped_early = True
                return outcome
        return outcome


def _progress_bar(total: int, description: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, leave=False, unit="step")
