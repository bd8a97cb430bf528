"""Measurement benchmark: FLOP counts side by side, and a trial's data + training throughput.

1. FLOPs (GMACs, one multiply-add = one FLOP) of the same architectures counted five ways:
   the paper's table; ours (fvcore + our SDPA/baddbmm handles); our closed-form cost model;
   fvcore on timm's model out of the box (SDPA counted as zero); fvcore on timm with our handles;
   torch's FlopCounterMode on our model (halved to multiply-adds).
2. Training throughput of short trials on the synthetic dataset, with the share of time the
   loop waited for data, for the in-memory tensor path and the DataLoader path (RandAugment).

    .venv/bin/python -m benchmarks.measure [--skip-flops] [--skip-train] [--device cuda --dtype bf16]
"""

from __future__ import annotations

import argparse
import warnings

import torch

from harness.output import render_table
from trials.measurement.flops import baddbmm_flop_handle, count_flops, sdpa_flop_handle
from trials.models import build_model, resolve_config
from trials.models.paper_figures import PAPER_FIGURES

FLOP_CASES = [  # (ours, timm); the paper's GFLOPs come from trials.models.paper_figures
    ("cait_xxs24", "cait_xxs24_224"),
    ("cait_s24", "cait_s24_224"),
    ("deit_s", "deit_small_patch16_224"),
    ("coatnet_0", "coatnet_0_224"),
    ("coatnet_1", "coatnet_1_224"),
]


def fvcore_timm(name: str, with_handles: bool) -> float:
    import timm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fvcore.nn import FlopCountAnalysis

        model = timm.create_model(name).eval()
        analysis = FlopCountAnalysis(model, torch.randn(1, 3, 224, 224))
        analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
        if with_handles:
            analysis.set_op_handle(
                "aten::scaled_dot_product_attention", sdpa_flop_handle, "aten::baddbmm", baddbmm_flop_handle
            )
        with torch.no_grad():
            return analysis.total() / 1e9


def flop_counter_mode(model: torch.nn.Module) -> float:
    """torch's own counter: 2 FLOPs per multiply-add, matmul/conv only; SDPA is 0 on CPU."""
    from torch.utils.flop_counter import FlopCounterMode

    model.requires_grad_(False)  # FlopCounterMode fails under no_grad on these models otherwise
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.randn(1, 3, 224, 224))
    return counter.get_total_flops() / 2 / 1e9


def flop_table() -> list[dict]:
    from search_space.cost_model import estimate_flops

    rows = []
    for ours_name, timm_name in FLOP_CASES:
        paper = PAPER_FIGURES[ours_name].gflops
        model = build_model(ours_name).eval()
        ours = count_flops(model, torch.randn(1, 3, 224, 224)).total / 1e9
        rows.append(
            {
                "model": ours_name,
                "paper": paper,
                "ours_fvcore": round(ours, 3),
                "cost_model": round(estimate_flops(resolve_config(ours_name)) / 1e9, 3),
                "timm_fvcore": round(fvcore_timm(timm_name, with_handles=False), 3),
                "timm_fvcore_sdpa": round(fvcore_timm(timm_name, with_handles=True), 3),
                "ours_FlopCounterMode": round(flop_counter_mode(model), 3),
                "ours_vs_paper": f"{(ours / paper - 1) * 100:+.1f}%",
            }
        )
    return rows


def train_table(device: str, precision: str, steps: int) -> list[dict]:
    from trials.runner import run_trial

    cases = [
        ("cait_tiny32", "tensor path", {}),
        ("coatnet_tiny32", "tensor path", {}),
        ("cait_tiny32", "DataLoader + RandAugment", {"randaugment": [2, 9]}),
        ("coatnet_tiny32", "DataLoader + RandAugment", {"randaugment": [2, 9]}),
    ]
    rows = []
    for preset, path, augment in cases:
        config = {
            "model": preset,
            "data": {
                "name": "synthetic",
                "train_size": 64 * steps,
                "val_size": 256,
                "batch_size": 64,
                "augment": augment,
            },
            "training": {"epochs": 2},
            "measure": {"flops": False, "latency": False, "batch_size": 64, "repeats": 3},
            "device": device,
            "precision": precision,
        }
        result = run_trial(config, progress=False)
        if result.status != "completed":
            raise SystemExit(f"{preset}: {result.status}: {result.error}")
        epoch = result.epochs[-1]  # the second epoch: warm caches and allocator
        rows.append(
            {
                "model": preset,
                "data path": path,
                "train_img_s": round(epoch.train_images_per_s, 1),
                "data_wait_%": round(100 * epoch.data_wait_fraction, 1),
                "infer_img_s": round(result.cost.throughput, 1),
                "device": result.cost.device,
                "dtype": result.cost.dtype,
            }
        )
    return rows


def synthetic_table(repeats: int = 3) -> list[dict]:
    """Generating the built-in synthetic dataset (it was a timed test; timing belongs here): median of repeats."""
    import statistics
    import time

    from trials.data.synthetic import make_synthetic

    rows = []
    for n in (1_000, 10_000):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            make_synthetic(n, 10, seed=0)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        rows.append({"images": n, "median s": round(median, 3), "images/s": round(n / median)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-flops", action="store_true")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    parser.add_argument("--steps", type=int, default=20, help="training steps per epoch (batch 64)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    if not args.skip_flops:
        print("\nFLOPs at 224x224 (GMACs)")
        print(render_table(flop_table()))
    print("\nSynthetic dataset generation (32x32, 10 classes)")
    print(render_table(synthetic_table()))
    if not args.skip_train:
        print("\nTrial training throughput on synthetic (second epoch), with the share of time waiting for data")
        print(render_table(train_table(args.device, args.precision, args.steps)))


if __name__ == "__main__":
    main()
