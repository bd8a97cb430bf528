"""Public tabular benchmarks converted to our table format (``benchmarks/tables/README.md``), so the search
methods are replayed on tables nobody here built or tuned to (issue 60, item 5).

Why a converter and not the raw file: ``benchmarks.search_quality`` reads one format; a public table brings its
own (NAS-Bench-Macro: a JSON object per architecture string). The conversion keeps every number it gives and
says which columns it had to model.

NAS-Bench-Macro (Su et al., "Prioritized Architecture Sampling with Monte-Carlo Tree Search", CVPR 2021;
https://github.com/xiusu/NAS-Bench-Macro, Apache-2.0, ``data/nas-bench-macro_cifar10.json``): 8 searchable
layers, each an identity, a MobileNetV2 block with kernel 3 and expansion 3, or one with kernel 5 and
expansion 6: 3^8 = 6,561 architecture strings, each trained on CIFAR-10 (three runs; their mean test accuracy
is ``top1``), with its FLOPs and parameters. Strings that place identities differently within a stage are one
network trained once, so several rows share a result; to a searcher they are different configurations, as
they are to a user of that space. The table gives one number per network, not a curve: it is a table of one
epoch, and it has no times, so ``epoch_s`` is modelled as proportional to FLOPs (:data:`MODELLED_FLOPS_PER_S`)
and the replay's simulated seconds are that model's, not a measurement.

    python -m benchmarks.public_tables nas-bench-macro PATH/nas-bench-macro_cifar10.json \\
        -o benchmarks/tables/nas-bench-macro-cifar10.csv.gz
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.table import TableError, load_table
from trials.atomic import atomic_write

LAYERS = 8  # NAS-Bench-Macro's searchable layers
BLOCKS = {"0": "identity", "1": "mb3_k3", "2": "mb6_k5"}  # the architecture string's digit -> the block
# One training epoch on CIFAR-10's 50,000 images costs about 3x the forward multiply-adds per image; at this
# sustained rate a network of NAS-Bench-Macro's median (~60 M multiply-adds) takes ~1 s: a model, stated as one.
MODELLED_FLOPS_PER_S = 1e13
CIFAR10_TRAIN_IMAGES = 50_000


def nas_bench_macro_rows(data: dict[str, Any]) -> pd.DataFrame:
    """One row per architecture string (a table of one epoch); the parameter columns ``layer1`` ... ``layer8``
    name each layer's block. Refuses a file that is not NAS-Bench-Macro's, naming the entry."""
    rows = []
    for arch, entry in sorted(data.items()):
        if len(arch) != LAYERS or set(arch) - set(BLOCKS):
            raise TableError(f"nas-bench-macro: {arch!r} is not a string of {LAYERS} digits 0-2")
        missing = [key for key in ("mean_acc", "flops", "params") if key not in entry]
        if missing:
            raise TableError(f"nas-bench-macro: {arch!r} has no {', '.join(missing)}")
        flops = int(entry["flops"])
        rows.append({
            "config_id": arch,
            "epoch": 1,
            "top1": round(float(entry["mean_acc"]), 4),
            "epoch_s": round(3 * flops * CIFAR10_TRAIN_IMAGES / MODELLED_FLOPS_PER_S, 4),
            "flops": flops,
            "params": int(entry["params"]),
            "throughput": None,
            **{f"layer{i + 1}": BLOCKS[digit] for i, digit in enumerate(arch)},
        })  # fmt: skip
    if len(rows) != len(BLOCKS) ** LAYERS:
        raise TableError(f"nas-bench-macro: {len(rows)} architectures, expected {len(BLOCKS) ** LAYERS}")
    return pd.DataFrame(rows)


CONVERTERS = {"nas-bench-macro": nas_bench_macro_rows}


def convert(kind: str, source: Path, output: Path) -> int:
    """Convert ``source`` and write ``output`` whole (a temporary name, renamed), only once the converted table
    loads and passes :func:`benchmarks.table.load_table`'s checks; returns the number of configurations."""
    frame = CONVERTERS[kind](json.loads(source.read_text()))
    buffer = io.BytesIO()
    gzipped = output.name.endswith(".gz")
    frame.to_csv(buffer, index=False, compression={"method": "gzip", "mtime": 0} if gzipped else None)  # reproducible
    with tempfile.TemporaryDirectory() as scratch:
        checked = Path(scratch) / output.name
        checked.write_bytes(buffer.getvalue())
        configurations = len(load_table(checked))
    atomic_write(output, buffer.getvalue())
    return configurations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.public_tables", description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=sorted(CONVERTERS))
    parser.add_argument("source", type=Path, help="the public benchmark's own file")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the table to write (.csv or .csv.gz)")
    args = parser.parse_args(argv)
    try:
        count = convert(args.kind, args.source, args.output)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.output}: {count} configurations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
