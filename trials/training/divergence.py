"""Divergence found without a host sync per step: each step's loss and gradient norm stay on the device.

Why a module of its own: a per-step ``float(loss)`` would stall the GPU at every step. Instead
:class:`StepChecks` records every step's loss and gradient norm in device tensors and checks them
every ``check_every`` steps and at the end of the epoch (one host sync per check); a failed check
finds the first bad step from the records and raises :class:`Diverged` for it, exactly as a per-step
check would. The bookkeeping (what is checked, where the epoch's steps start, data-parallel ranks
summing their losses first) is apart from the loop that trains.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

CUDA_CHECK_EVERY = 32  # steps between divergence checks on CUDA (each check is one host sync)

# Data-parallel ranks sum steps [begin, end)'s losses in place before a check (None: one process).
ShareLosses = Callable[[torch.Tensor, int, int], None]


class Diverged(RuntimeError):
    """Training produced a non-finite loss or gradient norm."""

    def __init__(self, step: int, what: str, value: float):
        self.step = step
        super().__init__(f"{what} became {value} at step {step}")


def check_interval(setting: int | None, device: torch.device) -> int:
    """``training.divergence_check_every``, else every step on the CPU (a sync costs nothing there)
    and every :data:`CUDA_CHECK_EVERY` steps on an accelerator."""
    return setting or (1 if device.type == "cpu" else CUDA_CHECK_EVERY)


def scaled_step_norm(scaler: torch.amp.GradScaler, grad_norm: torch.Tensor) -> torch.Tensor:
    """Under fp16 loss scaling, a non-finite gradient norm is an overflow the scaler handles (it
    skips the step and lowers the scale), not divergence: recorded as 0. The loss still decides."""
    if not scaler.is_enabled():
        return grad_norm
    return torch.where(torch.isfinite(grad_norm), grad_norm, torch.zeros_like(grad_norm))


def check_finite(losses: torch.Tensor, norms: torch.Tensor, begin: int, end: int, first_step: int) -> None:
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


class StepChecks:
    """One epoch's device-side records of each step's loss and gradient norm, checked every ``every`` steps.

    ``first_step``: optimiser steps taken before this epoch (a :class:`Diverged` names the trial's
    step). ``share``: data-parallel ranks sum the losses before each check, so every rank sees the
    same non-finite loss at the same step and ends there together.
    """

    def __init__(self, steps: int, every: int, first_step: int, device: torch.device, share: ShareLosses | None = None):
        self.losses = torch.zeros(steps, device=device)
        self.norms = torch.zeros(steps, device=device)
        self.every, self.first_step, self.share = every, first_step, share
        self.checked = 0  # steps [0, checked) are known finite

    def record(self, index: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Keep step ``index``'s loss and gradient norm (no host sync); check when one is due."""
        self.losses[index] = loss
        self.norms[index] = grad_norm
        if (index + 1) % self.every == 0:
            self.check(index + 1)

    def check(self, end: int) -> None:
        """Check the steps recorded since the last check, up to ``end`` (one host sync)."""
        if self.share is not None:
            self.share(self.losses, self.checked, end)
        check_finite(self.losses, self.norms, self.checked, end, self.first_step)
        self.checked = end
