"""Batch sources: the device-resident tensor path and the DataLoader path.

Both yield (float32 normalised NCHW images, int64 labels) on the trial's device, one pass per
epoch. :class:`TensorBatches` indexes an in-memory uint8 tensor and crops, flips and normalises
each batch on its device; :class:`LoaderBatches` runs per-sample transforms in DataLoader
workers, keyed by (index, sample seed) so augmentation does not depend on the workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from trials.lazy import lazy_import

from ..data_config import AugmentConfig
from .loading import Stats
from .seeding import make_epoch_plan

tv_tensors = lazy_import("torchvision.tv_tensors")  # torchvision: the loader path only
torchvision_folder = lazy_import("torchvision.datasets.folder")


def num_batches(num_samples: int, batch_size: int, drop_last: bool) -> int:
    """Batches per pass; a dropped last batch never leaves an epoch empty."""
    if drop_last and num_samples >= batch_size:
        return num_samples // batch_size
    return math.ceil(num_samples / batch_size)


class BatchSource:
    """Batches of (float32 normalised NCHW images, int64 labels) on the device; one pass = one epoch.

    Iteration is lazy, so a training loop can time ``next()`` to measure data-wait time.
    Each ``iter()`` uses the current epoch and then advances it, so successive passes are
    reshuffled even if the loop never calls :meth:`set_epoch`; calling it (e.g. after a
    resume) pins the next pass to that epoch's order.
    """

    def __init__(self, num_samples: int, batch_size: int, drop_last: bool, device: torch.device):
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.device = device
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return num_batches(self.num_samples, self.batch_size, self.drop_last)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        epoch = self.epoch
        self.epoch += 1
        return self._batches(epoch)

    def _batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        raise NotImplementedError

    def _slices(self) -> Iterator[slice]:
        for b in range(len(self)):
            yield slice(b * self.batch_size, min((b + 1) * self.batch_size, self.num_samples))


def crop_flip_batch(images: Tensor, offsets: Tensor, flips: Tensor, padding: int) -> Tensor:
    """Per-sample random crop (zero padding, as RandomCrop(padding=p)) and horizontal flip, in one gather.

    Hand-written on purpose: torchvision v2's RandomCrop and RandomHorizontalFlip draw ONE set
    of parameters per call, so applied to a batch tensor they give every sample the same crop
    and flip; per-sample transforms would need a DataLoader, which this path exists to avoid.
    ``images`` (B, C, H, W) any dtype; ``offsets`` (B, 2) in [0, 2p]; ``flips`` (B,) bool.
    """
    b, _, h, w = images.shape
    padded = F.pad(images, (padding, padding, padding, padding)) if padding else images
    offsets = offsets.to(images.device)
    rows = offsets[:, :1] + torch.arange(h, device=images.device)
    cols = offsets[:, 1:] + torch.arange(w, device=images.device)
    cols = torch.where(flips.to(images.device)[:, None], cols.flip(1), cols)
    batch = torch.arange(b, device=images.device)[:, None, None]
    # Advanced indices around a slice put the indexed dims first: (B, H, W, C).
    return padded[batch, :, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)


class Normalizer:
    """uint8 batch -> float32 normalised batch at the model's image size, on the batch's device.

    ``channels_last``: the output is NHWC in memory, the layout the model runs in on CUDA, made in
    the same pass as the dtype conversion (the crop/flip gather already yields NHWC), so the
    training step does not convert the batch again.
    """

    def __init__(self, stats: Stats, image_size: int, device: torch.device, channels_last: bool = False):
        mean, std = (torch.tensor(s, dtype=torch.float32, device=device).view(1, 3, 1, 1) for s in stats)
        self.scale = 1.0 / (255.0 * std)
        self.shift = -mean / std
        self.image_size = image_size
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format

    def __call__(self, images: Tensor) -> Tensor:
        x = images.to(torch.float32, memory_format=self.memory_format)
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            down = x.shape[-1] > self.image_size
            x = F.interpolate(x, size=(self.image_size,) * 2, mode="bilinear", align_corners=False, antialias=down)
            x = x.contiguous(memory_format=self.memory_format)
        return torch.addcmul(self.shift, x, self.scale)


class TensorBatches(BatchSource):
    """The fast path: batches indexed out of an in-memory uint8 tensor, augmented on its device."""

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        *,
        batch_size: int,
        normalize: Normalizer,
        device: torch.device,
        train: bool,
        augment: AugmentConfig,
        padding: int,
        seed: int,
    ):
        super().__init__(len(labels), batch_size, drop_last=train, device=device)
        self.images = images
        self.labels = labels
        self.normalize = normalize
        self.train = train
        self.padding = padding if train and augment.random_crop else 0
        self.hflip = train and augment.hflip
        self.seed = seed

    def _batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        plan = make_epoch_plan(self.num_samples, self.seed, epoch, self.train, 2 * self.padding)
        # One host-to-device copy of the epoch's draws, none per batch.
        order = plan.order.to(self.images.device)
        offsets = plan.offsets.to(self.device)
        flips = plan.flips.to(self.device) if self.hflip else torch.zeros_like(plan.flips, device=self.device)
        for part in self._slices():
            index = order[part]
            x, y = self.images[index], self.labels[index]
            if x.device != self.device:
                x, y = _to_device(x, self.device), _to_device(y, self.device)
            if self.padding or self.hflip:
                x = crop_flip_batch(x, offsets[part], flips[part], self.padding)
            yield self.normalize(x), y


def _to_device(x: Tensor, device: torch.device) -> Tensor:
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)


class LoaderBatches(BatchSource):
    """Batches from a DataLoader applying per-sample transforms, moved to the device."""

    def __init__(
        self,
        dataset: SampleDataset,
        *,
        batch_size: int,
        train: bool,
        device: torch.device,
        seed: int,
        workers: int,
        channels_last: bool = False,
    ):
        super().__init__(len(dataset), batch_size, drop_last=train, device=device)
        self.memory_format = torch.channels_last if channels_last else torch.preserve_format
        self.sampler = EpochBatchSampler(len(dataset), batch_size, train=train, seed=seed)
        self.workers = workers
        self.loader = DataLoader(
            dataset,
            batch_sampler=self.sampler,
            num_workers=workers,
            pin_memory=device.type == "cuda",
            persistent_workers=workers > 0,
        )

    def _batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        self.sampler.epoch = epoch
        non_blocking = self.device.type == "cuda"
        for x, y in self.loader:
            x = x.to(self.device, non_blocking=non_blocking, memory_format=self.memory_format)
            yield x, y.to(self.device, non_blocking=non_blocking)


class EpochBatchSampler:
    """Batches of ``(index, sample_seed)`` keys for :class:`SampleDataset`, fixed by (seed, epoch).

    The per-sample seed travels with the index, so a sample's augmentation does not depend on
    which worker process draws it, nor on how many workers there are.
    """

    def __init__(self, num_samples: int, batch_size: int, *, train: bool, seed: int):
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.train = train
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return num_batches(self.num_samples, self.batch_size, self.train)

    def __iter__(self) -> Iterator[list[tuple[int, int | None]]]:
        plan = make_epoch_plan(self.num_samples, self.seed, self.epoch, self.train, 0)
        order, seeds = plan.order.tolist(), plan.sample_seeds.tolist()
        for b in range(len(self)):
            part = slice(b * self.batch_size, min((b + 1) * self.batch_size, self.num_samples))
            yield [(i, s if self.train else None) for i, s in zip(order[part], seeds[part], strict=True)]


class SampleDataset(Dataset):
    """Map-style dataset of (transformed image, label) keyed by ``(index, sample_seed)``.

    ``load(i)`` returns a uint8 CHW tensor or a PIL image. The transform runs under a forked
    torch RNG seeded by ``sample_seed`` (transforms v2 draw from the global torch RNG), which
    makes augmentation reproducible without disturbing the caller's RNG state.
    """

    def __init__(self, load: Callable[[int], Any], labels: Sequence[int], transform: Callable[[Any], Tensor]):
        self.load = load
        self.labels = list(labels)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: tuple[int, int | None]) -> tuple[Tensor, int]:
        index, sample_seed = key
        image = self.load(index)
        if sample_seed is None:
            return self.transform(image), self.labels[index]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(sample_seed)
            return self.transform(image), self.labels[index]


class TensorImages:
    """Picklable ``load`` for :class:`SampleDataset` over a uint8 (N, C, H, W) tensor."""

    def __init__(self, images: Tensor):
        self.images = images

    def __call__(self, i: int) -> Tensor:
        return tv_tensors.Image(self.images[i])


class FileImages:
    """Picklable ``load`` for :class:`SampleDataset` over ``(path, label)`` samples (PIL, RGB)."""

    def __init__(self, paths: Sequence[str]):
        self.paths = list(paths)

    def __call__(self, i: int) -> Any:
        return torchvision_folder.default_loader(self.paths[i])
