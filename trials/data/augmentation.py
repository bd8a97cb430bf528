"""Augmentation: MixUp/CutMix on a batch, and the per-sample transforms of the loader path.

Both are torchvision's transforms v2, bound lazily (``trials.lazy``): loaded when first used. The tensor
path crops and flips on its device instead (:func:`trials.data.sources.crop_flip_batch`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from trials.lazy import lazy_import

from ..data_config import AugmentConfig
from .loading import Stats

v2 = lazy_import("torchvision.transforms.v2")  # torchvision: MixUp/CutMix and the loader path only

# Evaluation crop: resize the short side to size / 0.875, then centre-crop (the DeiT/timm default).
EVAL_CROP_RATIO = 0.875

MixFn = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


class BatchMix:
    """MixUp and/or CutMix on a batch: (images, int labels) -> (mixed images, soft targets (B, C)).

    torchvision's v2 transforms; with both alphas > 0, one of the two is chosen per batch.
    """

    def __init__(self, num_classes: int, mixup_alpha: float, cutmix_alpha: float):
        options = []
        if mixup_alpha > 0:
            options.append(v2.MixUp(alpha=mixup_alpha, num_classes=num_classes))
        if cutmix_alpha > 0:
            options.append(v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes))
        self.transform = options[0] if len(options) == 1 else v2.RandomChoice(options)

    def __call__(self, images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        return self.transform(images, labels)


def make_mix(augment: AugmentConfig, num_classes: int) -> MixFn | None:
    """The batch mixing function, or None when both alphas are 0."""
    if not augment.mixes:
        return None
    return BatchMix(num_classes, augment.mixup_alpha, augment.cutmix_alpha)


def train_transform(augment: AugmentConfig, image_size: int, native_size: int | None, stats: Stats) -> Callable:
    """Per-sample training transforms v2. ``native_size`` None: file images of any size (RandomResizedCrop)."""
    ops: list[Any] = [v2.ToImage()]
    if native_size is None:
        ops += [v2.RandomResizedCrop(image_size, antialias=True)] if augment.random_crop else _eval_resize(image_size)
    elif augment.random_crop:
        ops.append(v2.RandomCrop(native_size, padding=crop_padding(native_size)))
    if augment.hflip:
        ops.append(v2.RandomHorizontalFlip())
    if augment.randaugment is not None:
        num_ops, magnitude = augment.randaugment
        ops.append(v2.RandAugment(num_ops=num_ops, magnitude=magnitude))
    if native_size is not None and native_size != image_size:
        ops.append(v2.Resize((image_size, image_size), antialias=True))
    return v2.Compose([*ops, *_to_normalized(stats)])


def eval_transform(image_size: int, stats: Stats) -> Callable:
    """Per-sample evaluation transforms for file images: resize the short side, centre crop."""
    return v2.Compose([v2.ToImage(), *_eval_resize(image_size), *_to_normalized(stats)])


def _eval_resize(image_size: int) -> list[Any]:
    return [v2.Resize(round(image_size / EVAL_CROP_RATIO), antialias=True), v2.CenterCrop(image_size)]


def _to_normalized(stats: Stats) -> list[Any]:
    return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean=list(stats[0]), std=list(stats[1]))]


def crop_padding(native_size: int) -> int:
    """Zero padding of the random crop: 4 pixels at 32x32 (the CIFAR recipe), scaled with the size."""
    return max(1, native_size // 8)
