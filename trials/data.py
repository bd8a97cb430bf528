"""Datasets for a trial: configuration, loading, splitting, augmentation and batching.

``build_data(DataConfig, device)`` returns a :class:`DataBundle` whose ``train`` and ``val``
are iterables of normalised float32 NCHW image batches and int64 labels, already on the
trial's device. Two batching paths, chosen automatically:

* **tensor path** (in-memory ``synthetic``/``cifar10``/``cifar100`` without RandAugment, the
  common case, and every in-memory validation split): the uint8 dataset sits on the device
  (the GPU when there is one), each batch is indexed, cropped/flipped per sample by one
  gather, converted and normalised there. No DataLoader and no workers, so the data path
  cannot starve a GPU on small images.
* **loader path** (RandAugment requested, or file-backed ``imagefolder``): a
  ``torch.utils.data.DataLoader`` with worker processes applying torchvision transforms v2
  per sample.

Everything random is fixed by ``DataConfig.seed``: generation, the validation split, the
shuffle order and the augmentation parameters of each epoch (the epoch number is mixed into
the seed), independently of the number of workers and of the device. MixUp/CutMix are
applied by the training loop on a batch through ``DataBundle.mix`` (they draw from the
global torch RNG, which the training loop seeds). Label smoothing belongs to the loss.

torchvision is imported inside the functions that need it: importing it costs about two
seconds, which the configuration layer and the synthetic dataset do not need to pay.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from .configio import ConfigError
from .data_config import (  # noqa: F401  (re-exported: the configuration is part of this module's API)
    BUNDLED_DATASETS,
    CIFAR_DATASETS,
    CIFAR_NUM_CLASSES,
    DATASETS,
    DIGITS_VAL_FRACTION,
    IN_MEMORY_DATASETS,
    MAX_CLASSES,
    MAX_RANDAUGMENT_MAGNITUDE,
    NATIVE_IMAGE_SIZE,
    AugmentConfig,
    DataConfig,
)
from .synthetic import make_synthetic

# Published per-channel statistics of the training splits (mean, std), in [0, 1] units.
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
CIFAR100_STATS = ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

# Evaluation crop: resize the short side to size / 0.875, then centre-crop (the DeiT/timm default).
EVAL_CROP_RATIO = 0.875

Stats = tuple[tuple[float, float, float], tuple[float, float, float]]
MixFn = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


# ---------------------------------------------------------------------------------------------
# Seeds and epoch plans
# ---------------------------------------------------------------------------------------------


def derive_seed(seed: int, *keys: object) -> int:
    """An independent 63-bit seed for one purpose (``"split"``, ``("epoch", 3)``, ...).

    Hashing keeps the streams apart: changing the shuffle of epoch 3 never changes the split.
    """
    digest = hashlib.blake2b(repr((seed, *keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _generator(seed: int, *keys: object) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(seed, *keys))


def num_batches(num_samples: int, batch_size: int, drop_last: bool) -> int:
    """Batches per pass; a dropped last batch never leaves an epoch empty."""
    if drop_last and num_samples >= batch_size:
        return num_samples // batch_size
    return math.ceil(num_samples / batch_size)


@dataclass(frozen=True)
class EpochPlan:
    """One epoch's sample order and per-sample augmentation draws, on the CPU.

    Drawn on the CPU from a generator seeded by (seed, epoch), so the same seed gives the
    same batches on any device and with any number of workers.
    """

    order: Tensor  # int64 (N,) sample indices in visiting order
    offsets: Tensor  # int64 (N, 2) crop offsets (row, column) into the padded image, by position
    flips: Tensor  # bool (N,) horizontal flip, by position
    sample_seeds: Tensor  # int64 (N,) seeds for per-sample transforms on the loader path


def make_epoch_plan(num_samples: int, seed: int, epoch: int, shuffle: bool, max_offset: int) -> EpochPlan:
    gen = _generator(seed, "epoch", epoch)
    order = torch.randperm(num_samples, generator=gen) if shuffle else torch.arange(num_samples)
    return EpochPlan(
        order=order,
        offsets=torch.randint(0, max_offset + 1, (num_samples, 2), generator=gen),
        flips=torch.rand(num_samples, generator=gen) < 0.5,
        sample_seeds=torch.randint(0, 2**62, (num_samples,), generator=gen),
    )


# ---------------------------------------------------------------------------------------------
# Batch sources
# ---------------------------------------------------------------------------------------------


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
        from torchvision import tv_tensors

        return tv_tensors.Image(self.images[i])


class FileImages:
    """Picklable ``load`` for :class:`SampleDataset` over ``(path, label)`` samples (PIL, RGB)."""

    def __init__(self, paths: Sequence[str]):
        self.paths = list(paths)

    def __call__(self, i: int) -> Any:
        from torchvision.datasets.folder import default_loader

        return default_loader(self.paths[i])


# ---------------------------------------------------------------------------------------------
# MixUp / CutMix
# ---------------------------------------------------------------------------------------------


class BatchMix:
    """MixUp and/or CutMix on a batch: (images, int labels) -> (mixed images, soft targets (B, C)).

    torchvision's v2 transforms; with both alphas > 0, one of the two is chosen per batch.
    """

    def __init__(self, num_classes: int, mixup_alpha: float, cutmix_alpha: float):
        from torchvision.transforms import v2

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


# ---------------------------------------------------------------------------------------------
# Loading raw splits
# ---------------------------------------------------------------------------------------------


@dataclass
class _Split:
    """An in-memory split: uint8 images (N, 3, H, W) on the CPU and int64 labels (N,)."""

    images: Tensor
    labels: Tensor

    def subset(self, indices: Tensor) -> _Split:
        return _Split(self.images[indices], self.labels[indices])


def split_indices(num_samples: int, fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """(train indices, held-out indices), disjoint and sorted; fixed by ``seed`` alone."""
    held_out = max(1, round(num_samples * fraction))
    if held_out >= num_samples:
        raise ConfigError("val_fraction", f"{fraction} of {num_samples} samples leaves nothing to train on")
    perm = torch.randperm(num_samples, generator=_generator(seed, "split"))
    return perm[held_out:].sort().values, perm[:held_out].sort().values


def channel_stats(images: Tensor) -> Stats:
    """Per-channel mean and std of a uint8 (N, 3, H, W) tensor, in [0, 1] units, in bounded memory."""
    total = torch.zeros(3, dtype=torch.float64)
    squares = torch.zeros(3, dtype=torch.float64)
    for chunk in images.split(4096):
        x = chunk.to(torch.float32) / 255.0
        total += x.sum((0, 2, 3)).double()
        squares += (x * x).sum((0, 2, 3)).double()
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / count
    std = (squares / count - mean * mean).clamp_min(1e-12).sqrt()
    return tuple(mean.tolist()), tuple(std.tolist())  # type: ignore[return-value]


def _synthetic_splits(config: DataConfig) -> tuple[_Split, _Split]:
    size = config.resolved_image_size
    train = _Split(*make_synthetic(config.train_size, config.num_classes, derive_seed(config.seed, "train"), size))
    if config.val_fraction > 0:
        return _hold_out(train, config)
    val = _Split(*make_synthetic(config.val_size, config.num_classes, derive_seed(config.seed, "val"), size))
    return train, val


def _digits_splits(config: DataConfig) -> tuple[_Split, _Split]:
    """scikit-learn's 1,797 real handwritten digits (8x8, 17 grey levels), as 32x32 RGB uint8.

    Bundled with scikit-learn (the ``digits`` extra), so it needs no download: a small real
    dataset for CPU-scale studies.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ConfigError("name", "digits needs scikit-learn: pip install 'archsearch[digits]'") from None
    bunch = load_digits()
    pixels = torch.as_tensor(bunch.images, dtype=torch.float32)[:, None] * (255.0 / 16.0)
    size = NATIVE_IMAGE_SIZE["digits"]
    images = F.interpolate(pixels, size=(size, size), mode="bilinear", align_corners=False)
    images = images.clamp(0, 255).round().to(torch.uint8).expand(-1, 3, -1, -1).contiguous()
    everything = _Split(images, torch.as_tensor(bunch.target, dtype=torch.int64))
    fraction = config.val_fraction or DIGITS_VAL_FRACTION
    keep, held = split_indices(len(everything.labels), fraction, config.seed)
    return everything.subset(keep), everything.subset(held)


def _hold_out(train: _Split, config: DataConfig) -> tuple[_Split, _Split]:
    keep, held = split_indices(len(train.labels), config.val_fraction, config.seed)
    return train.subset(keep), train.subset(held)


def _cifar_class(name: str, verify: bool) -> type:
    """torchvision's CIFAR class; without ``verify`` a subclass that only checks the files exist.

    torchvision checks every file (and the metadata) against the md5 of the official archive,
    which a re-packed or subset copy cannot match; a missing md5 makes it check existence only.
    """
    from torchvision.datasets import CIFAR10, CIFAR100

    base = CIFAR10 if name == "cifar10" else CIFAR100
    if verify:
        return base
    attributes = {
        "train_list": [[filename, None] for filename, _ in base.train_list],
        "test_list": [[filename, None] for filename, _ in base.test_list],
        "meta": {**base.meta, "md5": None},
    }
    return type(f"Unverified{base.__name__}", (base,), attributes)


def _load_cifar_split(config: DataConfig, train: bool) -> _Split:
    cls = _cifar_class(config.name, config.verify)
    try:
        dataset = cls(root=config.data_dir, train=train, download=config.download)
    except RuntimeError as error:
        folder = Path(config.data_dir or "") / cls.base_folder
        hint = "set download: true to fetch it"
        if folder.is_dir() and config.verify:
            hint += ", or verify: false for a re-packed copy whose checksums differ from the official files"
        message = f"{config.name} not found or corrupted in {folder} ({error}); {hint}"
        raise ConfigError("data_dir", message) from error
    images = torch.from_numpy(dataset.data).permute(0, 3, 1, 2).contiguous()
    labels = torch.as_tensor(dataset.targets, dtype=torch.int64)
    num_classes = CIFAR_NUM_CLASSES[config.name]
    if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < num_classes:
        raise ConfigError("data_dir", f"{config.name} labels in {config.data_dir} are outside 0..{num_classes - 1}")
    return _Split(images, labels)


def _cifar_splits(config: DataConfig) -> tuple[_Split, _Split]:
    train = _load_cifar_split(config, train=True)
    if config.val_fraction > 0:
        return _hold_out(train, config)
    return train, _load_cifar_split(config, train=False)


def _image_folder(path: Path, role: str) -> Any:
    from torchvision.datasets import ImageFolder

    if not path.is_dir():
        raise ConfigError(
            "data_dir",
            f"imagefolder expects {path} with one sub-folder of images per class ({role}); {path} does not exist",
        )
    try:
        return ImageFolder(str(path))
    except (FileNotFoundError, RuntimeError) as error:
        raise ConfigError("data_dir", f"no usable images in {path}: {error}") from error


def _pick(items: list, indices: Tensor) -> list:
    return [items[i] for i in indices.tolist()]


def _folder_splits(config: DataConfig) -> tuple[tuple[list[str], list[int]], tuple[list[str], list[int]], int]:
    """(train paths, labels), (val paths, labels) and the number of classes of an ImageFolder tree."""
    root = Path(config.data_dir or "")
    train = _image_folder(root / "train", "the training split")
    paths, labels = [p for p, _ in train.samples], list(train.targets)
    if config.val_fraction > 0:
        keep, held = split_indices(len(paths), config.val_fraction, config.seed)
        return (_pick(paths, keep), _pick(labels, keep)), (_pick(paths, held), _pick(labels, held)), len(train.classes)
    val = _image_folder(root / "val", "the validation split; or set val_fraction > 0")
    if val.classes != train.classes:
        raise ConfigError("data_dir", f"class folders of {root / 'val'} differ from those of {root / 'train'}")
    return (paths, labels), ([p for p, _ in val.samples], list(val.targets)), len(train.classes)


# ---------------------------------------------------------------------------------------------
# Transforms (loader path)
# ---------------------------------------------------------------------------------------------


def train_transform(augment: AugmentConfig, image_size: int, native_size: int | None, stats: Stats) -> Callable:
    """Per-sample training transforms v2. ``native_size`` None: file images of any size (RandomResizedCrop)."""
    from torchvision.transforms import v2

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
    return v2.Compose([*ops, *_to_normalised(stats)])


def eval_transform(image_size: int, stats: Stats) -> Callable:
    """Per-sample evaluation transforms for file images: resize the short side, centre crop."""
    from torchvision.transforms import v2

    return v2.Compose([v2.ToImage(), *_eval_resize(image_size), *_to_normalised(stats)])


def _eval_resize(image_size: int) -> list[Any]:
    from torchvision.transforms import v2

    return [v2.Resize(round(image_size / EVAL_CROP_RATIO), antialias=True), v2.CenterCrop(image_size)]


def _to_normalised(stats: Stats) -> list[Any]:
    from torchvision.transforms import v2

    return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean=list(stats[0]), std=list(stats[1]))]


def crop_padding(native_size: int) -> int:
    """Zero padding of the random crop: 4 pixels at 32x32 (the CIFAR recipe), scaled with the size."""
    return max(1, native_size // 8)


# ---------------------------------------------------------------------------------------------
# The bundle
# ---------------------------------------------------------------------------------------------


@dataclass
class DataBundle:
    """What a trial trains and evaluates on.

    ``train``: reshuffled and augmented each epoch, incomplete last batch dropped.
    ``val``: fixed order, no augmentation, every sample. ``mix``: MixUp/CutMix for a batch
    (images, labels) -> (images, soft targets (B, num_classes)), or None. ``mean``/``std``:
    the normalisation applied (in [0, 1] units), to undo it for display.
    """

    train: BatchSource
    val: BatchSource
    num_classes: int
    image_size: int
    train_size: int
    val_size: int
    mix: MixFn | None
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)

    def set_epoch(self, epoch: int) -> None:
        """Pin the next training pass to ``epoch``'s shuffle and augmentation (e.g. on resume)."""
        self.train.set_epoch(epoch)

    def describe(self) -> dict[str, Any]:
        """Plain facts for logs and the results store."""
        return {
            "num_classes": self.num_classes,
            "image_size": self.image_size,
            "train_size": self.train_size,
            "val_size": self.val_size,
            "train_path": type(self.train).__name__,
            "val_path": type(self.val).__name__,
            "steps_per_epoch": len(self.train),
            "data_workers": getattr(self.train, "workers", 0),
        }


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, which containers and taskset narrow)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def auto_workers(cpus: float | None = None) -> int:
    """min(8, CPUs - 1), leaving one core to the main process; ``cpus``: the trial's allocation.

    A trial packed with ``resources.cpus: 1`` gets no worker processes (it loads in its main
    process) instead of eight that would fight its neighbours for the node's cores.
    """
    available = usable_cpus() if cpus is None else min(usable_cpus(), max(1, math.floor(cpus)))
    return max(0, min(8, available - 1))


def data_workers(config: DataConfig, cpus: float | None = None) -> int:
    """DataLoader workers for ``config``: ``num_workers`` if set, else automatic; never more than ``cpus``."""
    if config.num_workers is None:
        return auto_workers(cpus)
    return config.num_workers if cpus is None else min(config.num_workers, max(1, math.floor(cpus)))


def build_data(
    config: DataConfig,
    device: torch.device | str = "cpu",
    *,
    cpus: float | None = None,
    channels_last: bool | None = None,
) -> DataBundle:
    """Load, split and batch the dataset of ``config`` for a model on ``device``.

    ``cpus``: the trial's CPU allocation, which bounds the DataLoader workers. ``channels_last``:
    the batches' memory layout (default: channels-last on CUDA, where the model runs in it).
    """
    device = torch.device(device)
    layout = BatchLayout(device.type == "cuda" if channels_last is None else channels_last, cpus)
    if config.in_memory:
        return _build_in_memory(config, device, layout)
    return _build_image_folder(config, device, layout)


@dataclass(frozen=True)
class BatchLayout:
    """How batches are produced for this trial: their memory layout and the worker budget."""

    channels_last: bool
    cpus: float | None


def _build_in_memory(config: DataConfig, device: torch.device, layout: BatchLayout) -> DataBundle:
    if config.name == "synthetic":
        train, val = _synthetic_splits(config)
        num_classes, stats = config.num_classes, channel_stats(train.images)
    elif config.name == "digits":
        train, val = _digits_splits(config)
        num_classes, stats = 10, channel_stats(train.images)
    else:
        train, val = _cifar_splits(config)
        num_classes = CIFAR_NUM_CLASSES[config.name]
        stats = CIFAR10_STATS if config.name == "cifar10" else CIFAR100_STATS
    native = train.images.shape[-1]
    image_size = config.resolved_image_size
    val_source = _tensor_source(val, config, device, stats, image_size, layout, train=False)
    if config.uses_loader():
        transform = train_transform(config.augment, image_size, native, stats)
        dataset = SampleDataset(TensorImages(train.images), train.labels.tolist(), transform)
        train_source: BatchSource = _loader_source(dataset, config, device, layout, train=True)
    else:
        train_source = _tensor_source(train, config, device, stats, image_size, layout, train=True)
    return DataBundle(
        train=train_source,
        val=val_source,
        num_classes=num_classes,
        image_size=image_size,
        train_size=len(train.labels),
        val_size=len(val.labels),
        mix=make_mix(config.augment, num_classes),
        mean=stats[0],
        std=stats[1],
    )


def _resident(config: DataConfig, device: torch.device) -> bool:
    """Whether in-memory data is held on ``device`` (automatic: yes on CUDA)."""
    if device.type == "cpu":
        return True
    return config.device_resident is not False


def _tensor_source(
    split: _Split,
    config: DataConfig,
    device: torch.device,
    stats: Stats,
    image_size: int,
    layout: BatchLayout,
    *,
    train: bool,
) -> TensorBatches:
    storage = device if _resident(config, device) else torch.device("cpu")
    return TensorBatches(
        split.images.to(storage),
        split.labels.to(storage),
        batch_size=config.batch_size if train else config.resolved_eval_batch_size,
        normalize=Normalizer(stats, image_size, device, channels_last=layout.channels_last),
        device=device,
        train=train,
        augment=config.augment,
        padding=crop_padding(split.images.shape[-1]),
        seed=config.seed,
    )


def _loader_source(
    dataset: SampleDataset, config: DataConfig, device: torch.device, layout: BatchLayout, *, train: bool
) -> LoaderBatches:
    batch_size = config.batch_size if train else config.resolved_eval_batch_size
    return LoaderBatches(
        dataset,
        batch_size=batch_size,
        train=train,
        device=device,
        seed=config.seed,
        workers=data_workers(config, layout.cpus),
        channels_last=layout.channels_last,
    )


MAX_UPSCALE = 4.0  # beyond this, training mostly sees interpolation: say so


def warn_if_upscaled(first_image: str | Path, image_size: int) -> float:
    """Warn once when the files are much smaller than the training size (8x8 digits trained at 224)."""
    import warnings

    from PIL import Image

    with Image.open(first_image) as image:
        side = min(image.size)
    factor = image_size / max(side, 1)
    if factor > MAX_UPSCALE:
        warnings.warn(
            f"imagefolder images are {side}px on their short side and train at {image_size}px: upscaled "
            f"{factor:.0f}x; set data.image_size (or the model's image_size) closer to the images",
            UserWarning,
            stacklevel=2,
        )
    return factor


def _build_image_folder(config: DataConfig, device: torch.device, layout: BatchLayout) -> DataBundle:
    (train_paths, train_labels), (val_paths, val_labels), num_classes = _folder_splits(config)
    image_size = config.resolved_image_size
    if train_paths:
        warn_if_upscaled(train_paths[0], image_size)
    train_set = SampleDataset(
        FileImages(train_paths), train_labels, train_transform(config.augment, image_size, None, IMAGENET_STATS)
    )
    val_set = SampleDataset(FileImages(val_paths), val_labels, eval_transform(image_size, IMAGENET_STATS))
    return DataBundle(
        train=_loader_source(train_set, config, device, layout, train=True),
        val=_loader_source(val_set, config, device, layout, train=False),
        num_classes=num_classes,
        image_size=image_size,
        train_size=len(train_labels),
        val_size=len(val_labels),
        mix=make_mix(config.augment, num_classes),
        mean=IMAGENET_STATS[0],
        std=IMAGENET_STATS[1],
    )
