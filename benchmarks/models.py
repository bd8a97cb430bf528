"""Ours vs timm: inference and training-step throughput of the same architectures, same input, same run.

The two implementations are timed interleaved (ours, timm, ours, timm, ...) in one process,
because these machines drift by +-25% between processes; we report per-side medians and the
median of the per-round ratios (ours / timm; > 1 means ours is faster).

    .venv/bin/python -m benchmarks.models            # quick: batch 2, 3 rounds (well under a minute on 2 cores)
    .venv/bin/python -m benchmarks.models --full     # batch 8, 7 rounds: the numbers to quote
    .venv/bin/python -m benchmarks.models --device cuda --dtype bf16 --batch-size 64

Each model and mode prints a progress line with the time it took and an estimate of what is left.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from benchmarks.steps import infer_step, train_step
from harness.output import render_table
from trials.measurement.timing import time_once
from trials.models import build_model

PAIRS = [("cait_xxs24", "cait_xxs24_224"), ("coatnet_0", "coatnet_0_224")]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _step_fn(model: torch.nn.Module, images: torch.Tensor, mode: str, dtype: torch.dtype, device: torch.device):
    if mode == "infer":
        return infer_step(model, images, dtype, device)
    labels = torch.randint(0, 1000, (images.shape[0],), device=device)
    return train_step(model, images, labels, dtype, device)


def compare(ours_name: str, timm_name: str, args: argparse.Namespace) -> list[dict]:
    import timm

    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    memory_format = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    torch.manual_seed(0)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    images = images.contiguous(memory_format=memory_format)
    rows = []
    for mode in args.modes:
        ours = build_model(ours_name, image_size=args.image_size).to(device, memory_format=memory_format)
        theirs = timm.create_model(timm_name, img_size=args.image_size).to(device, memory_format=memory_format)
        fns = {
            "ours": _step_fn(ours, images, mode, dtype, device),
            "timm": _step_fn(theirs, images, mode, dtype, device),
        }
        for _ in range(args.warmup):
            for fn in fns.values():
                fn()
        seconds: dict[str, list[float]] = {"ours": [], "timm": []}
        for _ in range(args.repeats):
            for side, fn in fns.items():
                seconds[side].append(time_once(fn, device))
        ratios = [t / o for o, t in zip(seconds["ours"], seconds["timm"], strict=True)]
        rate = {side: args.batch_size / statistics.median(s) for side, s in seconds.items()}
        rows.append(
            {
                "model": ours_name,
                "mode": mode,
                "ours_img_s": round(rate["ours"], 2),
                "timm_img_s": round(rate["timm"], 2),
                "ratio": round(statistics.median(ratios), 3),
                "ratio_min": round(min(ratios), 3),
                "ratio_max": round(max(ratios), 3),
            }
        )
        del ours, theirs, fns
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--full", action="store_true", help="batch 8, 2 warm-up and 7 timed rounds (default: quick)")
    parser.add_argument("--batch-size", type=int, default=None, help="default 2 (8 with --full)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--warmup", type=int, default=None, help="default 1 (2 with --full)")
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (7 with --full)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--modes", nargs="+", choices=["infer", "train"], default=["infer", "train"])
    parser.add_argument("--models", nargs="+", default=[p[0] for p in PAIRS], help="subset of: cait_xxs24 coatnet_0")
    args = parser.parse_args()
    for name, quick, full in (("batch_size", 2, 8), ("warmup", 1, 2), ("repeats", 3, 7)):
        if getattr(args, name) is None:
            setattr(args, name, full if args.full else quick)
    if args.threads:
        torch.set_num_threads(args.threads)
    import timm

    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    print(
        f"device={args.device} ({device_name}), threads={torch.get_num_threads()}, dtype={args.dtype}, "
        f"batch={args.batch_size}, image={args.image_size}, repeats={args.repeats} interleaved, "
        f"torch {torch.__version__}, timm {timm.__version__}"
    )
    rows = []
    chosen = [(ours, theirs) for ours, theirs in PAIRS if ours in args.models]
    started = time.perf_counter()
    for index, (ours_name, timm_name) in enumerate(chosen, start=1):
        rows += compare(ours_name, timm_name, args)
        elapsed = time.perf_counter() - started
        left = elapsed / index * (len(chosen) - index)
        print(f"[{index}/{len(chosen)}] {ours_name}: {elapsed:.0f} s so far, about {left:.0f} s left", flush=True)
    print(render_table(rows))
    print("ratio = timm time / our time per interleaved round (median, min, max); > 1: ours is faster")


if __name__ == "__main__":
    main()
