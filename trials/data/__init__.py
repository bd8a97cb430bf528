"""Datasets for a trial: loading, splitting, augmentation and batching.

``build_data(DataConfig, device)`` returns a :class:`DataBundle` whose ``train`` and ``val``
are iterables of normalised float32 NCHW image batches and int64 labels, already on the
trial's device. Two batching paths, chosen automatically:

* **tensor path** (in-memory ``synthetic``/``cifar10``/``cifar100`` without RandAugment, the
  common case, and every in-memory validation split): the uint8 dataset sits on the device
  (the GPU when there is one), each batch is indexed, cropped/flipped per sample by one
  gather, converted and normalised there. No DataLoader and no loader processes, so the data path
  cannot starve a GPU on small images.
* **loader path** (RandAugment requested, or file-backed ``imagefolder``): a
  ``torch.utils.data.DataLoader`` with loader processes applying torchvision transforms v2
  per sample in uint8; the batch is converted and normalised on the device. On CUDA an image
  folder's JPEGs are decoded there too (nvJPEG): the loader processes only read the files.

Everything random is fixed by ``DataConfig.seed``: generation, the validation split, the
shuffle order and the augmentation parameters of each epoch (the epoch number is mixed into
the seed), independently of the number of loader processes and of the device. MixUp/CutMix are
applied by the training loop on a batch through ``DataBundle.mix`` (they draw from the
global torch RNG, which the training loop seeds). Label smoothing belongs to the loss.

torchvision is imported inside the functions that need it: importing it costs about two
seconds, which the configuration layer and the synthetic dataset do not need to pay.

Modules, each importing only those above it: :mod:`.seeding` (derived seeds, epoch plans),
:mod:`.loading` (raw splits of each dataset), :mod:`.sources` (the two batch paths),
:mod:`.augmentation` (MixUp/CutMix, per-sample transforms), :mod:`.bundle` (``build_data``).
The configuration itself is :mod:`trials.config.data_config`, which needs no torch.
"""

from trials.data.bundle import DataBundle, auto_loader_processes, build_data, loader_processes_for
from trials.data.loading import CIFAR10_STATS, split_indices
from trials.data.sources import LoaderBatches, Normalizer, TensorBatches, crop_flip_batch

__all__ = [
    "CIFAR10_STATS",
    "DataBundle",
    "LoaderBatches",
    "Normalizer",
    "TensorBatches",
    "auto_loader_processes",
    "build_data",
    "crop_flip_batch",
    "loader_processes_for",
    "split_indices",
]
