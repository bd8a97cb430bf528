"""Loader rate: images/s per CPU core of the ``--scale imagenet`` trials' own input pipelines at 160 px.

The GPU-hours ``reproduce --plan`` prints at a cluster scale take, for each variant, the slower of the GPU
(the H100 training rate scaled by MACs) and the trial's DataLoader processes
(:func:`harness.reproduce.cluster_scale.rates`). This measures the second: one loader process's
images/s, i.e. one CPU core, for the pipelines the studies' trials build, taken from the studies
themselves (``cait-depth`` and ``coatnet-layouts`` planned at ``--scale imagenet`` on a generated
folder, their first grid point's trial config, ``trials.data.build_data``), not re-implemented here:

* ``cait train``: JPEG decode (PIL, as ``FileImages``), RandomResizedCrop to 160, flip, RandAugment (2, 9),
  uint8 to tensor, collated: DeiT's recipe, every CaiT study's;
* ``coatnet train``: JPEG decode, resize the short side to 183 and centre-crop 160 (the layout study trains
  without augmentation), collated;
* ``validation``: the evaluation transforms of both (the same resize and centre crop), in fixed order.

The loop runs in this process with one torch thread and no loader process (``num_workers: 0``), so it is
what one loader process does on one core, without the process switch. MixUp/CutMix (CaiT's 0.8 / 1.0) run
in the training process on the normalised batch, on the trial's device, not on a loader core: the
``mix (this CPU)`` column times ``DataBundle.mix`` on this CPU for a CPU trial's reading, and the plan does
not charge it to the loader.

The folder holds photo-like JPEGs written here with PIL at quality 90, 500x375 and 375x500 (ImageNet's
typical sizes): smooth colour fields, blurred shapes with edges, film-grain noise; about 90 KB each
(ImageNet-1k's training JPEGs average about 110 KB), so decoding costs about what it costs on real data.
Epochs of the three ways are interleaved (a busy neighbour hits all of them alike), after one warm-up epoch
each; the table gives the median and the range. Results go to ``benchmarks/results/loader_rate.json``.

    .venv/bin/python -m benchmarks.loader_rate [--images 320] [--repeats 7] [--quick]
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
import PIL
import torch
import torchvision
from PIL import Image, ImageDraw, ImageFilter

from benchmarks.hostinfo import cpu_model, load_average
from harness.output import render_table
from harness.reproduce import cluster_scale
from harness.reproduce.registry import plan
from search_space.sampling import build_trial_config, grid_points
from search_space.validation import load_spec
from trials.atomic import atomic_write
from trials.config.data_config import DataConfig
from trials.config.trial_config import load_trial_config
from trials.data import build_data
from trials.data.bundle import DataBundle
from trials.devices.cpus import usable_cpus

RESULTS = Path(__file__).parent / "results" / "loader_rate.json"
# The study whose trials each family's row measures (every study of a family shares its data recipe).
STUDIES = {"cait": ("cait-depth", ()), "coatnet": ("coatnet-layouts", ("generalisation",))}
BATCH = 32  # collation per image does not depend on it; the studies' 256 would leave one batch per epoch
SIZES = ((500, 375), (375, 500), (500, 375))  # landscape twice as often as portrait, as in ImageNet


def photo(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """A photo-like RGB image: a smooth colour field, blurred filled shapes (edges), film-grain noise.

    Constant or smooth images decode faster than photographs (fewer coefficients survive quantisation) and
    pure noise slower: this lands at about ImageNet's bytes per pixel at quality 90.
    """
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    field = np.zeros((height, width, 3), np.float32)
    for _ in range(3):
        fx, fy = rng.uniform(0.002, 0.02, 2)
        field += np.sin(fx * xx + fy * yy + rng.uniform(0, 2 * np.pi))[..., None] * rng.uniform(20, 50, 3)
    image = Image.fromarray((field + rng.uniform(60, 190, 3)).clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(8, 20))):
        x0, y0 = rng.uniform(-0.2, 1.0, 2) * (width, height)
        w, h = rng.uniform(0.05, 0.5, 2) * (width, height)
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x0 + w, y0 + h], fill=colour)
        else:
            corners = int(rng.integers(3, 7))
            draw.polygon([(float(x0 + rng.uniform(0, w)), float(y0 + rng.uniform(0, h))) for _ in range(corners)],
                         fill=colour)  # fmt: skip
    pixels = np.asarray(image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 2.0)))), np.float32)
    pixels = pixels + rng.normal(0, rng.uniform(12, 22), (height, width, 1)) + rng.normal(0, 6, (height, width, 3))
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8))


def write_photo_folder(root: Path, train: int, val: int, classes: int = 4, seed: int = 0) -> dict[str, Any]:
    """An ImageFolder (``train/``, ``val/``) of photo-like JPEGs at quality 90; its sizes and bytes."""
    rng = np.random.default_rng(seed)
    sizes = []
    for split, count in (("train", train), ("val", val)):
        for i in range(count):
            folder = root / split / f"class{i % classes}"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{i:05d}.jpg"
            photo(rng, *SIZES[i % len(SIZES)]).save(path, quality=90)
            sizes.append(path.stat().st_size)
    return {"train_jpegs": train, "val_jpegs": val, "jpeg_sizes": [list(s) for s in sorted(set(SIZES))],
            "jpeg_quality": 90, "mean_jpeg_kb": round(statistics.mean(sizes) / 1024, 1)}  # fmt: skip


def study_data(family: str, root: Path) -> DataConfig:
    """The data config a trial of ``family``'s cluster-scale study runs with (its first grid point), on ``root``."""
    study, protocols = STUDIES[family]
    (run,) = plan(study, cluster_scale.SCALE, 8, protocols, "imagefolder", str(root))
    parsed = load_spec(run.spec, check_paths=True)
    return load_trial_config(build_trial_config(parsed, grid_points(parsed)[0])).data


def augment_of(data: DataConfig) -> dict[str, Any]:
    """The recipe a row measured, as the plan's test compares it with the studies' current one."""
    augment = dataclasses.asdict(data.augment)
    augment["randaugment"] = list(augment["randaugment"]) if augment["randaugment"] else None
    return {"image_size": data.resolved_image_size, **augment}


class Way:
    """One pipeline: its epochs' images per CPU-second and per wall-clock second, and optionally its batch
    mix's images per CPU-second on this CPU.

    Per CPU-second (``time.process_time``: this process's one thread) is the rate the plan reads: on these
    shared machines a neighbour takes part of the core and the wall clock counts its share too, while a
    cluster trial's loader process has its allocated core to itself. The wall-clock rate is kept beside it.
    """

    def __init__(self, name: str, family: str, bundle: DataBundle, loader: Iterable[Any], data: DataConfig):
        self.name, self.family, self.bundle, self.loader, self.data = name, family, bundle, loader, data
        self.rates: list[float] = []
        self.wall_rates: list[float] = []
        self.mix_rates: list[float] = []

    def run_epoch(self, mix: Callable[[torch.Tensor, torch.Tensor], Any] | None) -> None:
        images, cpu, wall, mixing = 0, 0.0, 0.0, 0.0
        started, clock = time.process_time(), time.perf_counter()
        for batch, labels in self.loader:
            cpu += time.process_time() - started
            wall += time.perf_counter() - clock
            images += len(labels)
            if mix is not None:
                x = batch.float()  # normalised as the device would (a scale and a shift), then mixed
                began = time.process_time()
                mix(x, labels)
                mixing += time.process_time() - began
            started, clock = time.process_time(), time.perf_counter()
        self.rates.append(images / cpu)
        self.wall_rates.append(images / wall)
        if mix is not None:
            self.mix_rates.append(images / mixing)


def ways(root: Path) -> list[Way]:
    """The three pipelines, each from its study's own data config and ``build_data`` (CPU decode, no loader process)."""
    out = []
    for family in STUDIES:
        data = dataclasses.replace(study_data(family, root), batch_size=BATCH, eval_batch_size=BATCH, num_workers=0)
        bundle = build_data(data, "cpu", cpus=1)
        assert bundle.decode == "cpu" and bundle.loader_processes == 0, "the loop must decode here, in-process"
        out.append(Way(f"{family} train", family, bundle, bundle.train.loader, data))
        if family == "cait":
            out.append(Way("validation", family, bundle, bundle.val.loader, data))
    return out


def measure(root: Path, repeats: int) -> list[dict[str, Any]]:
    """Every way: a warm-up epoch, then ``repeats`` epochs interleaved across the ways."""
    pipelines = ways(root)
    for way in pipelines:  # warm-up: torchvision's lazy imports, the page cache
        way.run_epoch(None)
        way.rates.clear()
        way.wall_rates.clear()
    for _ in range(repeats):
        for way in pipelines:
            way.run_epoch(way.bundle.mix if way.name.endswith("train") else None)
    rows = []
    for way in pipelines:
        median = statistics.median(way.rates)
        rows.append({
            "pipeline": way.name,
            "family": way.family,
            "img/s per core": round(median, 1),
            "min": round(min(way.rates), 1),
            "max": round(max(way.rates), 1),
            "ms/img": round(1000 / median, 2),
            "wall img/s": round(statistics.median(way.wall_rates), 1),
            "mix (this CPU) img/s": round(statistics.median(way.mix_rates), 1) if way.mix_rates else None,
            "rates": [round(r, 1) for r in way.rates],
            "wall_rates": [round(r, 1) for r in way.wall_rates],
            "recipe": augment_of(way.data) if way.name.endswith("train") else {"image_size": way.bundle.image_size,
                                                                                 "eval": "resize + centre crop"},
        })  # fmt: skip
    return rows


def header(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "rate": "images per CPU-second of this process (time.process_time): one core's rate; wall img/s beside it",
        "torch_threads": 1,
        "loader_processes": 0,
        "load_average_at_start": load_average(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pillow": PIL.__version__,
        "python": platform.python_version(),
        "batch_size": BATCH,
        "repeats": args.repeats,
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=320, help="training JPEGs in the temporary folder")
    parser.add_argument("--repeats", type=int, default=7, help="timed epochs per pipeline, interleaved")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the JSON results file")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 64 JPEGs, 1 repeat, written only to --out")
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.repeats = 64, 1
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core: what one loader process gets (DataLoader sets 1 thread in each)
    try:
        with tempfile.TemporaryDirectory(prefix="archsearch-loader-rate-") as root:
            folder = write_photo_folder(Path(root), args.images, args.images // 2)
            info = {**header(args), **folder}
            print(" | ".join(f"{k} {v}" for k, v in info.items()), flush=True)
            rows = measure(Path(root), args.repeats)
    finally:
        torch.set_num_threads(threads)
    print(f"\nThe --scale imagenet trials' loader pipelines at 160 px, one core (1 torch thread, in-process): "
          f"images per CPU-second per epoch of {args.images} JPEGs (wall-clock beside it), median of {args.repeats} "
          "(interleaved), after one warm-up epoch; mix: MixUp/CutMix on this CPU (a GPU trial mixes on the GPU)")
    print(render_table([{k: v for k, v in row.items() if k not in ("rates", "wall_rates", "recipe")} for row in rows]))
    result = {**info, "load_average_at_end": load_average(), "rows": rows}
    if args.quick and args.out == RESULTS:  # a smoke run never replaces the committed rates the plan reads
        print("\n--quick: not written (give --out to keep it)", file=sys.stderr)
        return result
    atomic_write(args.out, json.dumps(result, indent=2) + "\n")
    print(f"\nwritten to {args.out}", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
