"""Batch sources: the device-resident tensor path and the DataLoader path.

Both yield (float32 normalised NCHW images, int64 labels) on the trial's device, one pass per
epoch. :class:`TensorBatches` indexes an in-memory uint8 tensor and crops, flips and normalises
each batch on its device; :class:`LoaderBatches` runs per-sample transforms in DataLoader
processes, keyed by (index, sample seed) so augmentation does not depend on those processes.

Loader processes ship uint8 and every float operation happens on the device (:class:`Normalizer`): at
224 px a float32 sample is 602 KB against uint8's 150 KB through shared and pinned memory, and
the conversion is one fused pass there instead of a per-sample pass on a loader process's CPU. On
CUDA, JPEG files are not even decoded by the loader processes: they read the file's bytes and the batch is
decoded with nvJPEG and transformed on the GPU (:class:`DeviceDecoder`); other formats are
decoded on the loader process's CPU as before.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from trials.config.data_config import AugmentConfig
from trials.data.loading import Stats
from trials.data.seeding import make_epoch_plan
from trials.devices.gpu import cuda_index
from trials.lazy import lazy_import

tv_tensors = lazy_import("torchvision.tv_tensors")  # torchvision: the loader path only
torchvision_folder = lazy_import("torchvision.datasets.folder")
torchvision_io = lazy_import("torchvision.io")  # JPEG decoding on the device (nvJPEG)
v2_functional = lazy_import("torchvision.transforms.v2.functional")

JPEG_MAGIC = (0xFF, 0xD8, 0xFF)  # every JPEG file starts with SOI followed by a marker


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
        self.share = (0, 1)  # (rank, world size): this process's contiguous part of every batch

    def shard(self, rank: int, world_size: int) -> None:
        """Yield only rank ``rank``'s contiguous part of each (global) batch, of ``world_size`` parts.

        Every rank draws the same epoch plan, so the parts of one step are disjoint and together
        exactly the batch one process would train on (data parallelism that keeps the optimiser
        steps of a single process)."""
        self.share = (rank, world_size)

    def rows(self, index: int) -> int:
        """Images in the ``index``-th global batch of a pass (all ranks together)."""
        return min(self.batch_size, self.num_samples - index * self.batch_size)

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
            yield share_of(b * self.batch_size, min((b + 1) * self.batch_size, self.num_samples), *self.share)


def share_of(start: int, stop: int, rank: int, world_size: int) -> slice:
    """Rank ``rank``'s contiguous part of ``[start, stop)``; parts differ in size by one at most."""
    n = stop - start
    return slice(start + n * rank // world_size, start + n * (rank + 1) // world_size)


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
        mean, std = (torch.tensor(s, dtype=torch.float32).view(1, 3, 1, 1).to(device) for s in stats)
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
            if not is_on(x, self.device):
                x, y = _to_device(x, self.device), _to_device(y, self.device)
            if self.padding or self.hflip:
                x = crop_flip_batch(x, offsets[part], flips[part], self.padding)
            yield self.normalize(x), y


def is_on(x: Tensor, device: torch.device) -> bool:
    """Whether ``x`` already lives on ``device``; ``cuda`` (no index) means the current GPU.

    ``torch.device("cuda:0") != torch.device("cuda")``, so comparing devices with ``!=`` sent a
    device-resident dataset built for ``"cuda"`` through the host copy, where pinning a CUDA tensor
    raises (seen on an H200)."""
    if x.device.type != device.type:
        return False
    return device.type != "cuda" or x.device.index == cuda_index(device)


def _to_device(x: Tensor, device: torch.device) -> Tensor:
    """Copy a batch to ``device``: from the host through pinned memory without blocking; a tensor on
    another GPU directly (only dense CPU tensors can be pinned)."""
    if device.type == "cuda" and x.device.type == "cpu":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device, non_blocking=device.type == "cuda")


class LoaderBatches(BatchSource):
    """Batches from a DataLoader of uint8 samples, normalised on the device.

    Loader processes ship uint8 batches (pinned on CUDA, copied without blocking); ``normalize``
    converts, normalises and lays them out on the device in one pass. With ``decoder`` they ship
    encoded files instead (:class:`EncodedDataset`) and ``decoder`` decodes and transforms each
    batch on the device.
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int,
        train: bool,
        device: torch.device,
        seed: int,
        loader_processes: int,
        normalize: Normalizer,
        decoder: DeviceDecoder | None = None,
    ):
        super().__init__(len(dataset), batch_size, drop_last=train, device=device)
        self.normalize = normalize
        self.decoder = decoder
        self.sampler = EpochBatchSampler(len(dataset), batch_size, train=train, seed=seed)
        self.loader_processes = loader_processes
        self.loader = DataLoader(
            dataset,
            batch_sampler=self.sampler,
            num_workers=loader_processes,
            # Encoded bytes go to the decoder from pageable memory; decoded uint8 batches are pinned.
            pin_memory=device.type == "cuda" and decoder is None,
            persistent_workers=loader_processes > 0,
            collate_fn=collate_encoded if decoder is not None else None,
        )

    def shard(self, rank: int, world_size: int) -> None:
        super().shard(rank, world_size)
        self.sampler.share = self.share  # the sampler draws each batch's keys: it takes this rank's part

    def _batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        self.sampler.epoch = epoch
        non_blocking = self.device.type == "cuda"
        for batch in self.loader:
            images = self._images(batch, non_blocking)
            yield self.normalize(images), batch[1].to(self.device, non_blocking=non_blocking)

    def _images(self, batch: Sequence[Any], non_blocking: bool) -> Tensor:
        """The batch's uint8 images on the device: copied from the loader processes' batch, or decoded there."""
        if self.decoder is not None:
            payloads, _, seeds = batch
            return self.decoder(payloads, seeds)
        return batch[0].to(self.device, non_blocking=non_blocking)


class EpochBatchSampler:
    """Batches of ``(index, sample_seed)`` keys for :class:`SampleDataset`, fixed by (seed, epoch).

    The per-sample seed travels with the index, so a sample's augmentation does not depend on
    which loader process draws it, nor on how many there are.
    """

    def __init__(self, num_samples: int, batch_size: int, *, train: bool, seed: int):
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.train = train
        self.seed = seed
        self.epoch = 0
        self.share = (0, 1)  # (rank, world size), as BatchSource.shard sets it

    def __len__(self) -> int:
        return num_batches(self.num_samples, self.batch_size, self.train)

    def __iter__(self) -> Iterator[list[tuple[int, int | None]]]:
        plan = make_epoch_plan(self.num_samples, self.seed, self.epoch, self.train, 0)
        order, seeds = plan.order.tolist(), plan.sample_seeds.tolist()
        for b in range(len(self)):
            part = share_of(b * self.batch_size, min((b + 1) * self.batch_size, self.num_samples), *self.share)
            yield [(i, s if self.train else None) for i, s in zip(order[part], seeds[part], strict=True)]


@contextlib.contextmanager
def seeded_cpu_rng(seed: int) -> Iterator[None]:
    """Run the block with the global CPU generator seeded by ``seed``; restore it afterwards.

    transforms v2 draw their parameters from the global CPU generator. Only that one is seeded:
    ``torch.manual_seed`` would also reseed (and, outside ``fork_rng``'s devices, not restore) the
    CUDA generators that dropout and stochastic depth use, when samples are transformed in the
    training process (no loader processes, or on the device after a GPU decode).
    """
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield


def transform_sample(transform: Callable[[Any], Tensor], image: Any, sample_seed: int | None) -> Tensor:
    """``transform(image)`` with its random draws fixed by ``sample_seed`` (None: no draws, evaluation)."""
    if sample_seed is None:
        return transform(image)
    with seeded_cpu_rng(sample_seed):
        return transform(image)


class SampleDataset(Dataset):
    """Map-style dataset of (transformed uint8 image, label) keyed by ``(index, sample_seed)``.

    ``load(i)`` returns a uint8 CHW tensor or a PIL image; ``transform`` keeps it uint8 (the
    device normalises). The transform runs under the CPU generator seeded by ``sample_seed``
    (:func:`seeded_cpu_rng`), which makes augmentation reproducible without disturbing the
    caller's RNG state.
    """

    def __init__(self, load: Callable[[int], Any], labels: Sequence[int], transform: Callable[[Any], Tensor]):
        self.load = load
        self.labels = list(labels)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: tuple[int, int | None]) -> tuple[Tensor, int]:
        index, sample_seed = key
        return transform_sample(self.transform, self.load(index), sample_seed), self.labels[index]


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


# -- decoding on the device --------------------------------------------------------------------------


def is_jpeg(data: Tensor) -> bool:
    """Whether a file's bytes (a 1-D uint8 tensor) are a JPEG, by its first three bytes, whatever its name."""
    return data.ndim == 1 and data.numel() >= 3 and tuple(data[:3].tolist()) == JPEG_MAGIC


def read_bytes(path: str) -> Tensor:
    """A file's bytes as a 1-D uint8 tensor in ordinary memory.

    Not ``torchvision.io.read_file``: it maps the file, and a mapped storage cannot cross from a
    worker to the training process (sharing it fails with a bad file descriptor).
    """
    with open(path, "rb") as handle:
        return torch.frombuffer(bytearray(handle.read()), dtype=torch.uint8)


def read_payload(path: str) -> Tensor:
    """What a worker ships for the device to decode: a JPEG's bytes (1-D), anything else decoded (3-D).

    Formats nvJPEG cannot read (PNG, WebP, BMP, ...) take the CPU path here: decoded on the
    worker (PIL, RGB, as :class:`FileImages`) to a uint8 CHW tensor, transformed on the device.
    """
    data = read_bytes(path)
    if is_jpeg(data):
        return data
    return v2_functional.pil_to_tensor(torchvision_folder.default_loader(path))


class EncodedDataset(Dataset):
    """Map-style dataset of ``(payload, label, sample_seed)`` keyed by ``(index, sample_seed)``.

    Nothing random happens on the worker: the seed travels with the payload to the device, where
    :class:`DeviceDecoder` applies the per-sample transform under it, the same draws a
    :class:`SampleDataset` worker would make.
    """

    def __init__(self, paths: Sequence[str], labels: Sequence[int]):
        self.paths = list(paths)
        self.labels = list(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: tuple[int, int | None]) -> tuple[Tensor, int, int | None]:
        index, sample_seed = key
        return read_payload(self.paths[index]), self.labels[index], sample_seed


def collate_encoded(items: Sequence[tuple[Tensor, int, int | None]]) -> tuple[list[Tensor], Tensor, list[int | None]]:
    """Payloads differ in length (and decoded ones in size): a list, not a stacked tensor."""
    payloads, labels, seeds = zip(*items, strict=True)
    return list(payloads), torch.tensor(labels, dtype=torch.int64), list(seeds)


class DeviceDecoder:
    """Payloads from :class:`EncodedDataset` -> a uint8 (B, 3, S, S) batch on ``device``.

    The batch's JPEGs are decoded together by ``torchvision.io.decode_jpeg(..., device=device)``
    (nvJPEG), so the CPU never touches their pixels; a JPEG the GPU decoder rejects (CMYK, say)
    is decoded on the CPU instead. Then each image gets ``transform`` (uint8, e.g. random resized
    crop, flip, RandAugment) on the device under its sample seed, and the images are stacked.
    """

    def __init__(self, transform: Callable[[Any], Tensor], device: torch.device):
        self.transform = transform
        self.device = device

    def __call__(self, payloads: Sequence[Tensor], seeds: Sequence[int | None]) -> Tensor:
        images = self.decode(payloads)
        pairs = zip(images, seeds, strict=True)
        return torch.stack([transform_sample(self.transform, image, seed) for image, seed in pairs])

    def decode(self, payloads: Sequence[Tensor]) -> list[Tensor]:
        """Each payload as a uint8 (3, H, W) image on the device, in order."""
        jpegs = [i for i, payload in enumerate(payloads) if payload.ndim == 1]
        images = [payload if payload.ndim == 3 else None for payload in payloads]
        for i, image in zip(jpegs, self._decode_jpegs([payloads[i] for i in jpegs]), strict=True):
            images[i] = image
        return [image.to(self.device) for image in images]  # decoded on a worker: copied here

    def _decode_jpegs(self, data: list[Tensor]) -> list[Tensor]:
        if not data:
            return []
        rgb = torchvision_io.ImageReadMode.RGB
        with quiet_decoder_deprecation():
            try:
                return list(torchvision_io.decode_jpeg(data, mode=rgb, device=self.device))
            except RuntimeError:  # one file the device cannot decode: each on its own, the CPU for the rest
                return [self._decode_one(item, rgb) for item in data]

    def _decode_one(self, data: Tensor, mode: Any) -> Tensor:
        try:
            return torchvision_io.decode_jpeg(data, mode=mode, device=self.device)
        except RuntimeError:
            return torchvision_io.decode_jpeg(data, mode=mode)


@contextlib.contextmanager
def quiet_decoder_deprecation() -> Iterator[None]:
    """torchvision 0.29 warns on every decode that TorchCodec supersedes its decoders; TorchCodec is
    not a dependency, and a warning per batch tells a user nothing they can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*decoding and encoding capabilities", category=DeprecationWarning)
        yield
