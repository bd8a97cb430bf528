"""A trial's training state as one dict of tensors and numbers, and back: what a retried trial resumes from.

Why a module of its own: the state spans the weights, the optimiser, its schedule, the fp16 loss
scale and both RNGs; saving and restoring them in one place keeps the two sides in step (every key
saved is a key restored). The dict holds state dicts and plain values only, so rank 0's checkpoint
loads with ``torch.load(weights_only=True)`` (``harness.search.worker.trainable``) and travels to
the peers as bytes (:func:`trials.distributed.pack_state`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class TrainingObjects:
    """What the loop steps, each with its own state dict."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler


@dataclass(frozen=True)
class Progress:
    """Where training stands: epochs and optimiser steps done, and each epoch's metrics as a dict."""

    epoch: int
    step: int
    history: list[dict[str, Any]]


def save_state(objects: TrainingObjects, progress: Progress) -> dict[str, Any]:
    """The state :func:`load_state` restores: the objects', the progress, the CPU and CUDA RNGs."""
    return {
        "model": objects.model.state_dict(),
        "optimizer": objects.optimizer.state_dict(),
        "scheduler": objects.scheduler.state_dict(),
        "epoch": progress.epoch,
        "step": progress.step,
        "history": progress.history,
        **_rng_state(),
        "scaler": objects.scaler.state_dict(),  # {} unless fp16: the loss scale reached
    }


def load_state(objects: TrainingObjects, state: Mapping[str, Any]) -> Progress:
    """Restore ``objects`` and the RNGs from :func:`save_state`'s dict; the progress it recorded."""
    objects.model.load_state_dict(state["model"])
    objects.optimizer.load_state_dict(state["optimizer"])
    objects.scheduler.load_state_dict(state["scheduler"])
    progress = Progress(state["epoch"], state["step"], list(state["history"]))
    _restore_rng(state)
    if state.get("scaler") and objects.scaler.is_enabled():
        objects.scaler.load_state_dict(state["scaler"])
    return progress


def _rng_state() -> dict[str, Any]:
    return {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def _restore_rng(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
