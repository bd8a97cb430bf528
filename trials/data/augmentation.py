"""Augmentation: MixUp/CutMix on a batch, and the per-sample transforms of the loader path.

Both are torchvision's transforms v2, bound lazily (``trials.lazy``): loaded when first used. The tensor
path crops and flips on its device instead (:func:`trials.data.sources.crop_flip_batch`).

The per-sample transforms stay in uint8 from decode to the last resize: a DataLoader process ships
uint8 CHW images (a quarter of float32's bytes through shared and pinned memory, and no float pass
on the loader process's CPU), and the dtype conversion and normalisation run on the trial's device
(:class:`trials.data.sources.Normalizer`). The same transforms also run on the device, one sample
at a time, after a GPU JPEG decode (:class:`trials.data.sources.DeviceDecoder`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from trials.config.data_config import AugmentConfig
from trials.data.loading import Stats
from trials.lazy import lazy_import

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


def train_transform(augment: AugmentConfig, image_size: int, native_size: int | None) -> Callable:
    """Per-sample training transforms v2, uint8 in and out (normalised later, on the device).

    ``native_size`` None: file images of any size (RandomResizedCrop). The result is a uint8
    (3, image_size, image_size) image; flips and crops of uint8 are byte copies, so they stay here
    with RandAugment, whose ops are drawn per sample.
    """
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
    return v2.Compose(ops)


def eval_transform(image_size: int) -> Callable:
    """Per-sample evaluation transforms for file images, uint8 in and out: resize the short side, centre crop."""
    return v2.Compose([v2.ToImage(), *_eval_resize(image_size)])


def _eval_resize(image_size: int) -> list[Any]:
    return [v2.Resize(round(image_size / EVAL_CROP_RATIO), antialias=True), v2.CenterCrop(image_size)]


def normalize_transform(stats: Stats) -> Callable:
    """uint8 image -> float32 normalised, per sample: what loader processes ran before they shipped uint8.

    Training no longer uses it (the device normalises whole batches); it stays as the reference the
    tests and ``benchmarks/dataloader.py`` compare the device normalisation against.
    """
    return v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean=list(stats[0]), std=list(stats[1]))])


def crop_padding(native_size: int) -> int:
    """Zero padding of the random crop: 4 pixels at 32x32 (the CIFAR recipe), scaled with the size."""
    return max(1, native_size // 8)
