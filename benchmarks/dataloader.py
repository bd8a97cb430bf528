"""DataLoader benchmark: images/s of an ImageFolder of JPEGs at 224 px, before and after uint8 shipping.

Three ways through the same DataLoader, same files, same sampler, same worker count, same cores,
interleaved in one process (on these shared machines the same run varies by +-25% between
processes: only ratios within one run compare):

* ``float32 on worker (before)``: what trials did until now; a worker decodes, crops and flips in
  uint8, then converts to float32 and normalises each sample, and ships float32 batches.
* ``uint8 on worker (now)``: the trial's DataLoader (``trials.data.build_data``) as a GPU trial
  gets it: uint8 batches, a quarter of the bytes; the GPU converts and normalises them (not timed
  here: there is no GPU, and that pass is one fused kernel per batch).
* ``uint8, normalised on this CPU``: the same, plus the batch normalisation on the consumer's CPU,
  as a CPU trial runs it (the float work moved from the workers to the training process).
* ``file bytes only (GPU decode)``: what a worker does when the trial's JPEGs are decoded on the
  GPU (``gpu_decode``, automatic on CUDA): read the file. The decode itself is on the GPU, which
  this machine lacks, so this row is the worker side's ceiling, not a training rate.

Each epoch's images/s is timed after one warm-up epoch (persistent workers started), repeated;
the table gives the median and the range, and the ratio of the medians against the before path
at the same worker count. Results go to ``benchmarks/results/dataloader.json``.

    .venv/bin/python -m benchmarks.dataloader [--images 256] [--workers 0,1,2] [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torchvision
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.transforms import v2

from benchmarks.hostinfo import cpu_model, load_average
from harness.output import render_table
from trials.config.data_config import AugmentConfig, DataConfig
from trials.data import build_data
from trials.data.augmentation import normalize_transform, train_transform
from trials.data.loading import IMAGENET_STATS, folder_splits
from trials.data.sources import EncodedDataset, EpochBatchSampler, FileImages, SampleDataset, collate_encoded
from trials.devices.cpus import usable_cpus

RESULTS = Path(__file__).parent / "results" / "dataloader.json"
BEFORE = "float32 on worker (before)"
NOW = "uint8 on worker (now)"
NOW_CPU = "uint8, normalised on this CPU"
BYTES = "file bytes only (GPU decode)"


def write_jpeg_folder(root: Path, images: int, side: int, classes: int = 4, seed: int = 0) -> list[Path]:
    """An ImageFolder (``train/`` and a small ``val/``) of ``images`` JPEGs, ``side`` px, photo-like.

    Smooth colour fields with texture and noise, quality 90: about the bytes per pixel of a photo,
    so decoding costs what it costs on real data (pure noise would compress badly and decode slowly).
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side
    written = []
    for split, count in (("train", images), ("val", max(classes, images // 8))):
        for i in range(count):
            folder = root / split / f"class{i % classes}"
            folder.mkdir(parents=True, exist_ok=True)
            a, b, c = rng.uniform(0, 6, 3)
            base = np.stack([np.sin(a * xx + b * yy + k) for k in (0.0, c, 2 * c)], axis=-1)
            pixels = 127.5 * (1 + 0.8 * base) + rng.normal(0, 12, (side, side, 3))
            path = folder / f"{i:05d}.jpg"
            Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(path, quality=90)
            written.append(path)
    return written


def legacy_loader(config: DataConfig, workers: int) -> DataLoader:
    """The loader path as it was: per-sample float32 conversion and normalisation on the worker.

    The same files, sampler, seeds and uint8 transforms as the trial's path, with the normalising
    transform appended per sample (exactly what ``train_transform`` ended with before), so the two
    paths differ only in where the float work happens and what dtype crosses the process boundary.
    """
    (paths, labels), _, _ = folder_splits(config)
    uint8_ops = train_transform(config.augment, config.resolved_image_size, None)
    ops = v2.Compose([uint8_ops, normalize_transform(IMAGENET_STATS)])
    dataset = SampleDataset(FileImages(paths), labels, ops)
    sampler = EpochBatchSampler(len(dataset), config.batch_size, train=True, seed=config.seed)
    return DataLoader(dataset, batch_sampler=sampler, num_workers=workers, persistent_workers=workers > 0)


def bytes_loader(config: DataConfig, workers: int) -> DataLoader:
    """The worker side of GPU decoding: each sample's file read into a uint8 tensor, nothing decoded."""
    (paths, labels), _, _ = folder_splits(config)
    dataset = EncodedDataset(paths, labels)
    sampler = EpochBatchSampler(len(dataset), config.batch_size, train=True, seed=config.seed)
    return DataLoader(
        dataset, batch_sampler=sampler, num_workers=workers, persistent_workers=workers > 0, collate_fn=collate_encoded
    )


def batch_bytes(batch: Any) -> int:
    """Bytes of the images that crossed from the workers in one batch."""
    images = batch[0]
    if isinstance(images, list):
        return sum(t.numel() * t.element_size() for t in images)
    return images.numel() * images.element_size()


def epoch_rate(batches: Iterable[Any], consume: Callable[[Any], Any]) -> tuple[float, int, int]:
    """(images/s, images, bytes of the first batch) of one pass over ``batches``."""
    start, images, first = time.perf_counter(), 0, 0
    for batch in batches:
        first = first or batch_bytes(batch)
        consume(batch)
        images += len(batch[1])
    return images / (time.perf_counter() - start), images, first


class Way:
    """One way through the loader: a name, its iterable of batches and what the consumer does with a batch."""

    def __init__(self, name: str, batches: Iterable[Any], consume: Callable[[Any], Any] = lambda batch: batch):
        self.name, self.batches, self.consume = name, batches, consume
        self.rates: list[float] = []
        self.batch_bytes = 0

    def run_epoch(self) -> None:
        rate, _, first = epoch_rate(self.batches, self.consume)
        self.rates.append(rate)
        self.batch_bytes = first


def measure(config: DataConfig, workers: int, repeats: int) -> list[dict[str, Any]]:
    """The three paths at ``workers`` workers: a warm-up epoch each, then ``repeats`` interleaved epochs."""
    bundle = build_data(dataclasses.replace(config, num_workers=workers), "cpu")
    now_loader = bundle.train.loader
    ways = [
        Way(BEFORE, legacy_loader(config, workers)),
        Way(NOW, now_loader),  # the trial's DataLoader: what crosses from the workers
        # The trial's own iterator: the same loader, normalised by the consumer (bytes counted on
        # the DataLoader's batches, which are what crossed the process boundary).
        Way(NOW_CPU, bundle.train),
        Way(BYTES, bytes_loader(config, workers)),
    ]
    for way in ways:  # warm-up: workers started, files in the page cache
        way.run_epoch()
        way.rates.clear()
    for _ in range(repeats):
        for way in ways:
            way.run_epoch()
    ways[2].batch_bytes = ways[1].batch_bytes
    before = statistics.median(ways[0].rates)
    return [
        {
            "path": way.name,
            "workers": workers,
            "median img/s": round(statistics.median(way.rates), 1),
            "min": round(min(way.rates), 1),
            "max": round(max(way.rates), 1),
            "vs before": f"{statistics.median(way.rates) / before:.2f}x",
            "KB/batch shipped": round(way.batch_bytes / 1024, 1),
            "rates": [round(r, 1) for r in way.rates],
        }
        for way in ways
    ]


def header(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "load_average_at_start": load_average(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "python": platform.python_version(),
        "jpegs": args.images,
        "jpeg_side": args.side,
        "image_size": args.image_size,
        "batch_size": args.batch_size,
        "augment": "RandomResizedCrop + flip" + (f" + RandAugment {args.randaugment}" if args.randaugment else ""),
        "repeats": args.repeats,
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256, help="training JPEGs in the temporary folder")
    parser.add_argument("--side", type=int, default=256, help="side of each JPEG in pixels")
    parser.add_argument("--image-size", type=int, default=224, help="the training image size")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", default="0,1,2", help="comma-separated DataLoader worker counts")
    parser.add_argument("--repeats", type=int, default=5, help="timed epochs per path, interleaved")
    parser.add_argument("--randaugment", type=int, nargs=2, default=None, metavar=("OPS", "MAGNITUDE"))
    parser.add_argument("--out", type=Path, default=RESULTS, help="the JSON results file")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 16 small JPEGs, 0 workers, 1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.side, args.image_size, args.batch_size, args.workers, args.repeats = 16, 48, 32, 4, "0", 1
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    info = header(args)
    print(" | ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    augment = AugmentConfig(randaugment=tuple(args.randaugment) if args.randaugment else None)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="archsearch-dataloader-") as root:
        write_jpeg_folder(Path(root), args.images, args.side)
        config = DataConfig(
            name="imagefolder", data_dir=root, image_size=args.image_size, batch_size=args.batch_size, augment=augment
        )
        for workers in (int(w) for w in args.workers.split(",")):
            rows += measure(config, workers, args.repeats)
            print(f"  {workers} workers measured", file=sys.stderr, flush=True)
    print(f"\nImageFolder of JPEGs ({args.side} px) at {args.image_size} px, batch {args.batch_size}: images/s "
          f"per epoch, median of {args.repeats} (interleaved), after one warm-up epoch")  # fmt: skip
    print(render_table([{k: v for k, v in row.items() if k != "rates"} for row in rows]))
    result = {**info, "load_average_at_end": load_average(), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten to {args.out}")
    return result


if __name__ == "__main__":
    main()
