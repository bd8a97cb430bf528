"""The data bundle: ``build_data`` loads a dataset, picks each split's batch source, and sizes its loader processes.

In-memory datasets train on the tensor path unless RandAugment needs per-sample transforms;
their validation split always does. ImageFolder trees use the loader path for both splits: uint8
from the DataLoader processes, normalised on the device; on CUDA their JPEGs are decoded on the GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trials.config.data_config import DATA_CHANNELS, DataConfig
from trials.configio import ConfigError
from trials.data.augmentation import MixFn, crop_padding, eval_transform, make_mix, train_transform
from trials.data.loading import (
    IMAGENET_STATS,
    Split,
    Stats,
    folder_splits,
    in_memory_splits,
    test_split,
    warn_if_upscaled,
)
from trials.data.sources import (
    BatchSource,
    DeviceDecoder,
    EncodedDataset,
    FileImages,
    LoaderBatches,
    Normalizer,
    SampleDataset,
    TensorBatches,
    TensorImages,
)
from trials.devices.cpus import usable_cpus

# Without an allocation (a trial run by hand, outside Ray), the machine is not the trial's alone:
# at most this many DataLoader processes, as before. With one, the allocation is the bound.
UNALLOCATED_MAX_LOADER_PROCESSES = 8


@dataclass
class DataBundle:
    """What a trial trains and evaluates on.

    ``train``: reshuffled and augmented each epoch, incomplete last batch dropped.
    ``val``: fixed order, no augmentation, every sample: what every epoch is evaluated on (model
    selection). ``test``: like ``val``, for the datasets that keep a test split apart (evaluated
    once, at the end of a completed trial), else None. ``train_eval``: the training split in
    fixed order without augmentation (built on request: it is a second copy on the device), for
    the loss in eval mode and BatchNorm recalibration. ``mix``: MixUp/CutMix for a batch
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
    test: BatchSource | None = None
    test_size: int = 0
    train_eval: BatchSource | None = None
    decode: str | None = None  # where file images are decoded: "cuda" (nvJPEG) or "cpu"; None: in memory
    channels: int = DATA_CHANNELS  # every source gives RGB (grey digits repeated to three)

    def set_epoch(self, epoch: int) -> None:
        """Pin the next training pass to ``epoch``'s shuffle and augmentation (e.g. on resume)."""
        self.train.set_epoch(epoch)

    @property
    def loader_processes(self) -> int:
        """DataLoader processes of the training path (0: device-resident tensors or the main process)."""
        return getattr(self.train, "loader_processes", 0)


def auto_loader_processes(cpus: float | None = None, *, accelerator: bool = False) -> int:
    """DataLoader processes from the trial's CPUs: one core for the training process, the rest decode.

    ``cpus``: the trial's allocation (Ray's assigned CPUs, else ``search.resources.cpus``), bounded
    by the cores this process may use; every core beyond the first becomes a loader process, with no fixed
    cap, because a 224-px trial decodes at about 150-300 images/s per core and a GPU trains at
    thousands: a trial that asks for 16 CPUs should get 15 decoders. Without an allocation the
    machine is shared: at most :data:`UNALLOCATED_MAX_LOADER_PROCESSES`.

    One CPU: on the CPU the training step needs that core, so samples load in the training process
    (a loader process would only add a process switch). On an ``accelerator`` the training process mostly
    waits for the device, so one loader process decodes the next batch while the GPU runs this one, instead
    of the two taking turns.
    """
    if cpus is None:
        budget = min(usable_cpus(), UNALLOCATED_MAX_LOADER_PROCESSES + 1)
    else:
        budget = min(usable_cpus(), max(1, math.floor(cpus)))
    if budget == 1:
        return 1 if accelerator else 0
    return budget - 1


def loader_processes_for(config: DataConfig, cpus: float | None = None, *, accelerator: bool = False) -> int:
    """DataLoader processes for ``config``: ``num_workers`` if set, else automatic; never more than ``cpus``."""
    if config.num_workers is None:
        return auto_loader_processes(cpus, accelerator=accelerator)
    return config.num_workers if cpus is None else min(config.num_workers, max(1, math.floor(cpus)))


def build_data(
    config: DataConfig,
    device: torch.device | str = "cpu",
    *,
    cpus: float | None = None,
    channels_last: bool | None = None,
    train_eval: bool = False,
) -> DataBundle:
    """Load, split and batch the dataset of ``config`` for a model on ``device``.

    ``cpus``: the trial's CPU allocation, which bounds the DataLoader processes. ``channels_last``:
    the batches' memory layout (default: channels-last on CUDA, where the model runs in it).
    ``train_eval``: also the un-augmented training split (BatchNorm recalibration, eval-mode loss).
    """
    device = torch.device(device)
    layout = BatchLayout(device.type == "cuda" if channels_last is None else channels_last, cpus, train_eval)
    if config.in_memory:
        return _build_in_memory(config, device, layout)
    return _build_image_folder(config, device, layout)


@dataclass(frozen=True)
class BatchLayout:
    """How batches are produced for this trial: their memory layout and the worker budget."""

    channels_last: bool
    cpus: float | None
    train_eval: bool = False


def _build_in_memory(config: DataConfig, device: torch.device, layout: BatchLayout) -> DataBundle:
    train, val, num_classes, stats = in_memory_splits(config)
    test = test_split(config)
    native = train.images.shape[-1]
    image_size = config.resolved_image_size
    val_source = _tensor_source(val, config, device, stats, image_size, layout, train=False)
    test_source = None if test is None else _tensor_source(test, config, device, stats, image_size, layout, train=False)
    if config.uses_loader():
        transform = train_transform(config.augment, image_size, native)
        dataset = SampleDataset(TensorImages(train.images), train.labels.tolist(), transform)
        normalize = Normalizer(stats, image_size, device, channels_last=layout.channels_last)
        train_source: BatchSource = _loader_source(dataset, config, device, layout, normalize, train=True)
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
        test=test_source,
        test_size=0 if test is None else len(test.labels),
        train_eval=_tensor_source(train, config, device, stats, image_size, layout, train=False)
        if layout.train_eval
        else None,
    )


def _resident(config: DataConfig, device: torch.device) -> bool:
    """Whether in-memory data is held on ``device`` (automatic: yes on CUDA)."""
    if device.type == "cpu":
        return True
    return config.device_resident is not False


def _tensor_source(
    split: Split,
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
    dataset: SampleDataset | EncodedDataset,
    config: DataConfig,
    device: torch.device,
    layout: BatchLayout,
    normalize: Normalizer,
    *,
    train: bool,
    decoder: DeviceDecoder | None = None,
) -> LoaderBatches:
    batch_size = config.batch_size if train else config.resolved_eval_batch_size
    return LoaderBatches(
        dataset,
        batch_size=batch_size,
        train=train,
        device=device,
        seed=config.seed,
        loader_processes=loader_processes_for(config, layout.cpus, accelerator=device.type != "cpu"),
        normalize=normalize,
        decoder=decoder,
    )


def decodes_on_device(config: DataConfig, device: torch.device) -> bool:
    """Whether an image folder's JPEGs are decoded on ``device`` (``gpu_decode``; automatic: on CUDA).

    ``torchvision.io.decode_jpeg`` decodes on CUDA devices only (nvJPEG); asking for it elsewhere
    is a configuration error rather than a silent CPU decode.
    """
    if config.gpu_decode is None:
        return device.type == "cuda"
    if config.gpu_decode and device.type != "cuda":
        raise ConfigError("gpu_decode", f"decodes JPEGs on a CUDA device; this trial runs on {device.type}")
    return config.gpu_decode


def _build_image_folder(config: DataConfig, device: torch.device, layout: BatchLayout) -> DataBundle:
    (train_paths, train_labels), (val_paths, val_labels), num_classes = folder_splits(config)
    image_size = config.resolved_image_size
    if train_paths:
        warn_if_upscaled(train_paths[0], image_size)
    normalize = Normalizer(IMAGENET_STATS, image_size, device, channels_last=layout.channels_last)
    train_ops, val_ops = train_transform(config.augment, image_size, None), eval_transform(image_size)
    on_device = decodes_on_device(config, device)
    if on_device:  # loader processes read the files; decoding and the transforms run on the GPU
        train_set: SampleDataset | EncodedDataset = EncodedDataset(train_paths, train_labels)
        val_set: SampleDataset | EncodedDataset = EncodedDataset(val_paths, val_labels)
        train_decoder, val_decoder = DeviceDecoder(train_ops, device), DeviceDecoder(val_ops, device)
    else:
        train_set = SampleDataset(FileImages(train_paths), train_labels, train_ops)
        val_set = SampleDataset(FileImages(val_paths), val_labels, val_ops)
        train_decoder = val_decoder = None
    return DataBundle(
        train=_loader_source(train_set, config, device, layout, normalize, train=True, decoder=train_decoder),
        val=_loader_source(val_set, config, device, layout, normalize, train=False, decoder=val_decoder),
        num_classes=num_classes,
        image_size=image_size,
        train_size=len(train_labels),
        val_size=len(val_labels),
        mix=make_mix(config.augment, num_classes),
        mean=IMAGENET_STATS[0],
        std=IMAGENET_STATS[1],
        decode=device.type if on_device else "cpu",
    )
