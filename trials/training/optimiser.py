"""What moves the weights: the budget in steps, AdamW with its decay groups, warmup + cosine, the fp16 scaler.

Why a module of its own: these are set once as a trial is built, from its ``training`` config and
its data, and then only stepped by the loop; here they are plain functions of the config, testable
without a training loop (the schedule's shape, which parameters decay, which dtype a GPU gets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trials.config.trial_config import TrainingConfig

NO_DECAY_NAMES = ("pos_embed", "cls_token", "relative_bias", "gamma")


@dataclass(frozen=True)
class Budget:
    """The trial's length: ``training.epochs`` or ``training.steps``, and its warmup, in optimiser steps."""

    steps_per_epoch: int
    total_steps: int
    total_epochs: int
    warmup_steps: int

    @classmethod
    def of(cls, config: TrainingConfig, steps_per_epoch: int) -> Budget:
        if config.steps is not None:
            total_steps, total_epochs = config.steps, math.ceil(config.steps / steps_per_epoch)
        else:
            total_steps, total_epochs = config.epochs * steps_per_epoch, config.epochs
        warmup = (
            config.warmup_steps if config.warmup_steps is not None else round(config.warmup_epochs * steps_per_epoch)
        )
        return cls(steps_per_epoch, total_steps, total_epochs, warmup)


class WarmupCosine:
    """LR multiplier: linear warmup from ~0 to 1, then cosine down to ``min_ratio`` at ``total``."""

    def __init__(self, warmup: int, total: int, min_ratio: float):
        self.warmup, self.total, self.min_ratio = warmup, max(total, 1), min_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


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


def build_optimizer(model: nn.Module, config: TrainingConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over :func:`parameter_groups`; fused on CUDA (one kernel for the whole update), the
    foreach default elsewhere. Fused AdamW takes the scaler's inf flag on the device: no host sync."""
    fused = {"fused": True} if device.type == "cuda" else {}
    return torch.optim.AdamW(parameter_groups(model, config.weight_decay), lr=config.lr, betas=config.betas, **fused)


def build_scheduler(
    optimizer: torch.optim.Optimizer, config: TrainingConfig, budget: Budget
) -> torch.optim.lr_scheduler.LambdaLR:
    """Warmup then cosine to ``min_lr`` over the budget's steps (the warmup never longer than the budget)."""
    total = budget.total_steps
    schedule = WarmupCosine(min(budget.warmup_steps, total), total, config.min_lr / config.lr)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def grad_scaler(device: torch.device, dtype: torch.dtype) -> torch.amp.GradScaler:
    """fp16 gradients underflow without loss scaling; disabled (every call a no-op) for bf16 and fp32."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


def resolve_dtype(precision: str, device: torch.device) -> torch.dtype:
    """The autocast dtype. ``auto``: on CUDA bf16 where the GPU has it natively (Ampere and later),
    else fp16, which trains under a gradient scaler (V100, T4: bf16 there is emulated and slow);
    fp32 elsewhere. ``bf16``/``fp16``/``fp32`` as named."""
    if precision == "fp32" or (precision == "auto" and device.type != "cuda"):
        return torch.float32
    if precision in ("bf16", "fp16"):
        return torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
