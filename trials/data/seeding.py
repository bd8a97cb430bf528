"""Seeds: independent streams derived from ``DataConfig.seed``, and each epoch's draws.

Everything random in the data (generation, the validation split, the shuffle order, the
augmentation parameters of each epoch) comes from a generator seeded here, so the same seed
gives the same batches on any device and with any number of loader processes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor


def derive_seed(seed: int, *keys: object) -> int:
    """An independent 63-bit seed for one purpose (``"split"``, ``("epoch", 3)``, ...).

    Hashing keeps the streams apart: changing the shuffle of epoch 3 never changes the split.
    """
    digest = hashlib.blake2b(repr((seed, *keys)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def seeded_generator(seed: int, *keys: object) -> torch.Generator:
    """A CPU generator seeded by :func:`derive_seed` (``seed``, ``*keys``)."""
    return torch.Generator().manual_seed(derive_seed(seed, *keys))


@dataclass(frozen=True)
class EpochPlan:
    """One epoch's sample order and per-sample augmentation draws, on the CPU.

    Drawn on the CPU from a generator seeded by (seed, epoch), so the same seed gives the
    same batches on any device and with any number of loader processes.
    """

    order: Tensor  # int64 (N,) sample indices in visiting order
    offsets: Tensor  # int64 (N, 2) crop offsets (row, column) into the padded image, by position
    flips: Tensor  # bool (N,) horizontal flip, by position
    sample_seeds: Tensor  # int64 (N,) seeds for per-sample transforms on the loader path


def make_epoch_plan(num_samples: int, seed: int, epoch: int, shuffle: bool, max_offset: int) -> EpochPlan:
    gen = seeded_generator(seed, "epoch", epoch)
    order = torch.randperm(num_samples, generator=gen) if shuffle else torch.arange(num_samples)
    return EpochPlan(
        order=order,
        offsets=torch.randint(0, max_offset + 1, (num_samples, 2), generator=gen),
        flips=torch.rand(num_samples, generator=gen) < 0.5,
        sample_seeds=torch.randint(0, 2**62, (num_samples,), generator=gen),
    )
