"""Evaluation: mean cross-entropy and top-1/top-5 accuracy over a split, summed on the device.

Why a module of its own: a pass over a held-out split is its own job, run by the trainer after
every epoch (the validation split, and the training split in eval mode), and once at the end of a
trial (the test split, :func:`trials.runner.test_metrics`). The running sums stay on the device:
one host sync per pass, at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F

Infer = Callable[[torch.Tensor], torch.Tensor]  # a batch as the data path yields it -> logits
Scores = tuple[float, float, float]  # mean cross-entropy (no smoothing), top-1 %, top-5 %
# Filled by a pass asked to keep them: each batch's top-1 class indices and labels, on the device.
Kept = list[tuple[torch.Tensor, torch.Tensor]]


@torch.inference_mode()
def evaluate(
    infer: Infer,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    num_classes: int,
    device: torch.device,
    keep: Kept | None = None,
) -> Scores:
    """Mean cross-entropy (no smoothing), top-1 and top-5 accuracy (%) of ``infer`` over ``batches``.

    The caller puts the model in eval mode; ``infer`` runs it as the trial does (layout, autocast,
    compiled or eager). Top-5 is top-k with k the classes when there are fewer than five.
    ``keep``, where given, receives each batch's top-1 indices (the very ones top-1 counts) and
    labels, in the order of ``batches``: the per-image predictions of this same pass.
    """
    loss_sum = torch.zeros((), device=device, dtype=torch.float64)
    correct1 = torch.zeros((), device=device, dtype=torch.long)
    correct5 = torch.zeros((), device=device, dtype=torch.long)
    count = 0
    k = min(5, num_classes)
    for images, labels in batches:
        logits = infer(images).float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").double()
        top = logits.topk(k, dim=1).indices
        hits = top == labels[:, None]
        correct1 += hits[:, 0].sum()
        if keep is not None:
            keep.append((top[:, 0].clone(), labels.clone()))  # a reused input buffer cannot change them
        correct5 += hits.any(dim=1).sum()
        count += labels.shape[0]
    count = max(count, 1)
    return float(loss_sum) / count, 100.0 * float(correct1) / count, 100.0 * float(correct5) / count
