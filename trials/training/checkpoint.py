"""A trial's training state as one dict of tensors and numbers, and back: what a retried trial resumes from.

Why a module of its own: the state spans the weights, the optimiser, its schedule, the fp16 loss
scale and both RNGs; saving and restoring them in one place keeps the two sides in step (every key
saved is a key restored). The dict holds state dicts and plain values only, so rank 0's checkpoint
loads with ``torch.load(weights_only=True)`` (``harness.search.worker.trainable``) and travels to
the peers as bytes (:func:`trials.devices.distributed.pack_state`). A trial's ``init_from`` (model weights
alone, loaded strictly) is read here too: :func:`load_initial_weights`.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trials.configio import ConfigError


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


INIT_FROM = "init_from"  # the trial config's key: every error below names it


def load_initial_weights(model: nn.Module, path: str | Path) -> None:
    """``init_from``: start ``model`` from the weights in ``path`` (a state dict, as ``archsearch
    export --weights`` writes it) instead of its initialisation; the optimiser and the schedule are
    the trial's own and start fresh (a fine-tune, not a resume).

    Loaded onto the CPU with ``weights_only=True`` (tensors and plain values only: a weights file
    from elsewhere cannot run code) and strictly: every parameter and buffer of the model must be
    in the file with its shape, and nothing else. A ConfigError names ``init_from`` and the first
    parameter that does not fit.
    """
    file = Path(path).expanduser()
    if not file.exists():
        raise ConfigError(INIT_FROM, f"{path}: no such file (archsearch export STUDY N --weights W.pt writes one)")
    if not file.is_file():
        raise ConfigError(INIT_FROM, f"{path}: not a regular file; give the weights file itself")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:  # not a torch file, truncated, or objects weights_only refuses
        if isinstance(error, pickle.UnpicklingError):  # torch's own text is pages about weights_only
            reason = "not a file torch.save wrote, or it holds objects beyond tensors and plain values"
        else:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        message = f"{path}: not a weights file torch loads with weights_only=True ({reason})"
        raise ConfigError(INIT_FROM, message) from None
    if isinstance(state, Mapping) and isinstance(state.get("model"), Mapping) and "optimizer" in state:
        raise ConfigError(
            INIT_FROM,
            f"{path}: a whole training checkpoint, not model weights; "
            "archsearch export STUDY N --weights W.pt writes a trial's weights",
        )
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ConfigError(INIT_FROM, f"{path}: holds a {type(state).__name__}, not a model's state dict of tensors")
    mismatch = weights_mismatch(model.state_dict(), state)
    if mismatch is not None:
        raise ConfigError(INIT_FROM, f"{path} does not fit this model: {mismatch}")
    model.load_state_dict(state, strict=True)


def weights_mismatch(expected: Mapping[str, torch.Tensor], given: Mapping[str, torch.Tensor]) -> str | None:
    """The first parameter (or buffer) where ``given`` does not fit a model whose state dict is
    ``expected``, in one phrase (in the model's order, then the file's); None when it fits."""
    for name, tensor in expected.items():
        if name not in given:
            missing = sum(1 for key in expected if key not in given)
            return f"parameter {name!r} is not in the file ({missing} of the model's {len(expected)} are missing)"
        if tuple(given[name].shape) != tuple(tensor.shape):
            return (
                f"parameter {name!r} has shape {tuple(given[name].shape)} in the file, "
                f"{tuple(tensor.shape)} in the model"
            )
    for name in given:
        if name not in expected:
            extra = sum(1 for key in given if key not in expected)
            return f"the file has parameter {name!r}, which the model lacks ({extra} such)"
    return None
