"""BatchNorm recalibration: running statistics recomputed over the un-augmented training split.

Why a module of its own: after training with MixUp/CutMix and RandAugment, a model's BatchNorm
running statistics describe augmented inputs; ``training.recalibrate_batchnorm`` recomputes them
over clean training images before each evaluation. It is a pass of its own (train mode, no
gradients, momentum as a plain average) that only CoAtNet needs (CaiT has no BatchNorm).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

# Every BatchNorm torch ships (its common base class is private).
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)

Infer = Callable[[torch.Tensor], torch.Tensor]  # a batch as the data path yields it -> the model's output


def batch_norms(model: nn.Module) -> list[nn.Module]:
    """The model's BatchNorm layers (none in CaiT)."""
    return [m for m in model.modules() if isinstance(m, BATCH_NORMS)]


def recalibrate(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], infer: Infer) -> None:
    """Recompute every BatchNorm's running statistics over ``batches`` through ``infer``.

    Statistics are reset and accumulated as a plain average over the pass (``momentum=None``)
    in train mode without gradients; the weights do not change. A model without BatchNorm
    (CaiT) is left as it is.
    """
    norms = batch_norms(model)
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    try:
        with torch.no_grad():
            for images, _ in batches:
                infer(images)
    finally:
        for m, momentum in zip(norms, momenta, strict=True):
            m.momentum = momentum
