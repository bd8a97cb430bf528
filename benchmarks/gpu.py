"""GPU benchmark: our training step and models against timm's, small trials, and packed trials per GPU.

Self-contained on purpose: it runs with torch alone (plus timm for the side-by-side rows, skipped
with a note where timm is missing) on a GPU machine that has no Optuna, Ray, SQLAlchemy or
pydantic. FLOPs come from archsearch's closed-form cost model (``search_space.cost_model``,
standard library only), which matches fvcore's count exactly; timm's models are priced by the
same cost model through their archsearch twins (the same architecture for CaiT; timm's CoAtNet
downsamples with a costlier stride-2 depthwise conv, 5-9% more FLOPs, so its MFU is understated
by that much). One process, side by side:

(a) bf16 training images/s and MFU at 224 of ``cait_s24`` and ``coatnet_0`` next to timm's
    ``cait_s24_224`` and ``coatnet_0_224`` (same batch, same precision, eager and compiled).
    MFU = 2 x model multiply-adds x 3 (forward + backward) x images/s / peak, twice: against the
    bf16 matmul rate measured here (an 8192^3 matmul: what this GPU really does) and against the
    datasheet's dense bf16 peak (H100 SXM: 989 TFLOP/s; the figure used is named in the header).
(b) one 32x32 trial (``coatnet_tiny32``, ``cait_tiny32``; CIFAR-sized synthetic data held on the
    device) through archsearch's own Trainer: images/s, data-wait share, step time, eager vs compiled.
(c) trials per hour with 1, 2, 4 and 8 such trials packed on the GPU (separate processes, each
    capped at its share of the memory, as ``search.resources.gpus: 1/N`` does).
(d) inference throughput fp32 and bf16 vs timm, and batch-1 latency, channels-last on CUDA as a
    trial measures it (``trials.measure``).

It prints one table per part and writes everything as JSON.

    python -m benchmarks.gpu [--batch-size 128] [--json gpu.json]     # on a GPU machine
    python -m benchmarks.gpu --device cpu --quick                      # a smoke run anywhere
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.steps import train_step
from search_space.cost_model import estimate_cost
from trials.gpu import configure_backends, datasheet_peak, mfu
from trials.measure import inference_fn, inference_layout, random_images
from trials.models import build_model, resolve_config
from trials.timing import synchronize, time_once

ROOT = Path(__file__).resolve().parents[1]

PAIRS = [("cait_s24", "cait_s24_224"), ("coatnet_0", "coatnet_0_224")]
SMALL = ["coatnet_tiny32", "cait_tiny32"]


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def matmul_rate(device: torch.device, size: int, repeats: int = 10) -> float:
    """Measured bf16 (CUDA) or fp32 (CPU) matmul FLOP/s (2 per multiply-add): the MFU denominator."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    synchronize(device)
    seconds = statistics.median(time_once(lambda: a @ b, device) for _ in range(repeats))
    return 2 * size**3 / seconds


def _timm(name: str, image_size: int):
    try:
        import timm
    except ImportError:
        return None
    return timm.create_model(name, pretrained=False, num_classes=1000, img_size=image_size)


def _rate(fn, device: torch.device, batch: int, warmup: int, repeats: int) -> tuple[float, float]:
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = [time_once(fn, device) for _ in range(repeats)]
    return batch / statistics.median(times), statistics.median(times)


def part_a(args, device: torch.device, peak: float, datasheet: tuple[str, float] | None) -> list[dict[str, Any]]:
    """Training throughput and MFU at 224, ours vs timm, eager and compiled."""
    rows = []
    size, batch = args.image_size, args.batch_size
    images = torch.randn(batch, 3, size, size, device=device)
    if device.type == "cuda":
        images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    for ours_name, timm_name in PAIRS:
        config = resolve_config(ours_name).replace(image_size=size)
        macs = estimate_cost(config).flops
        candidates = [("archsearch", lambda c=config: build_model(c))]
        candidates.append(("timm", lambda n=timm_name: _timm(n, size)))
        for side, make in candidates:
            for compiled in (False, True) if args.compile else (False,):
                model = make()
                if model is None:
                    rows.append({"model": timm_name, "side": side, "note": "timm not installed"})
                    break
                memory_format = torch.channels_last if device.type == "cuda" else torch.preserve_format
                model = model.to(device, memory_format=memory_format).train()
                forward = torch.compile(model) if compiled else model
                try:
                    rate, step = _rate(train_step(forward, images, labels, dtype, device), device, batch,
                                       args.warmup, args.repeats)  # fmt: skip
                except Exception as error:  # a compile failure is a row, not the end of the benchmark
                    rows.append({"model": ours_name if side == "archsearch" else timm_name, "side": side,
                                 "compiled": compiled, "note": f"{type(error).__name__}: {error}"[:80]})  # fmt: skip
                    continue
                rows.append(
                    {
                        "model": ours_name if side == "archsearch" else timm_name,
                        "side": side,
                        "compiled": compiled,
                        "batch": batch,
                        "dtype": str(dtype).removeprefix("torch."),
                        "train img/s": rate,
                        "step ms": step * 1e3,
                        "GMACs/img": macs / 1e9,
                        "MFU % (measured peak)": mfu(macs, rate, peak),
                        "MFU % (datasheet)": mfu(macs, rate, datasheet[1]) if datasheet else None,
                    }
                )
                del model, forward
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    for ours_name, timm_name in PAIRS:  # ratios, same compile setting
        for compiled in (False, True):
            ours = next((r for r in rows if r["model"] == ours_name and r.get("compiled") is compiled), None)
            theirs = next((r for r in rows if r["model"] == timm_name and r.get("compiled") is compiled), None)
            if ours and theirs and "train img/s" in ours and "train img/s" in theirs:
                ours["vs timm"] = ours["train img/s"] / theirs["train img/s"]
    return rows


def _small_trial_config(name: str, device: str, compile_: bool, train_size: int, epochs: int) -> dict[str, Any]:
    return {
        "model": name,
        "data": {"name": "synthetic", "num_classes": 10, "train_size": train_size, "val_size": 1000, "batch_size": 256},
        "training": {"epochs": epochs, "lr": 2e-3, "compile": compile_, "warmup_epochs": 0},
        "measure": {"flops": False, "throughput": False, "latency": False},
        "device": device,
    }


def part_b(args, device: torch.device) -> list[dict[str, Any]]:
    """One 32x32 trial through the Trainer: images/s, data-wait share, step time; eager vs compiled."""
    from trials.runner import run_trial

    rows = []
    for name in SMALL:
        for compiled in (False, True) if args.compile else (False,):
            config = _small_trial_config(name, str(device), compiled, args.small_train_size, args.small_epochs)
            result = run_trial(config)
            if result.status != "completed":
                rows.append({"model": name, "compiled": compiled, "note": (result.error or "")[:80]})
                continue
            last = result.epochs[-1]  # after the first (warm-up / compile) epoch
            steps = last.step - (result.epochs[-2].step if len(result.epochs) > 1 else 0)
            rows.append(
                {
                    "model": name,
                    "compiled": bool(result.final.get("compiled")),
                    "train img/s": last.train_images_per_s,
                    "data wait %": 100 * last.data_wait_fraction,
                    "step ms": 1e3 * last.epoch_time / max(steps, 1),
                    "top1": last.top1,
                    "peak MB": last.peak_memory_mb,
                    "reserved MB": last.peak_reserved_mb,
                    "compile s": result.final.get("compile_s"),
                    "note": "; ".join(result.notes) or None,
                }
            )
    return rows


_PACKED_CHILD = """
import json, sys, time
from trials.runner import run_trial
config = json.loads(sys.argv[1])
t = time.perf_counter()
result = run_trial(config)
print(json.dumps({"status": result.status, "seconds": time.perf_counter() - t, "error": result.error}))
"""


def packed_trial_config(config: dict[str, Any], device: torch.device, n: int) -> dict[str, Any]:
    """One of ``n`` trials packed on ``device``: on CUDA with n > 1 it gets the share a search gives a
    packed trial (``resources.gpus: 1/n``), which run_trial turns into the allocator cap with the one
    formula (trials.gpu.memory_cap_fraction); alone or on a CPU, the config as it was."""
    if device.type == "cuda" and n > 1:
        return {**config, "gpu_memory_fraction": 1 / n}
    return dict(config)


def part_c(args, device: torch.device) -> list[dict[str, Any]]:
    """Trials per hour with N packed 32x32 trials on one device (separate processes)."""
    rows = []
    base = None
    for n in args.packing:
        config = _small_trial_config("coatnet_tiny32", str(device), False, args.small_train_size, args.small_epochs)
        config = packed_trial_config(config, device, n)
        started = time.perf_counter()
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _PACKED_CHILD, json.dumps(config)],
                cwd=ROOT,  # `python -c` puts the working directory first on sys.path
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for _ in range(n)
        ]
        outcomes = [json.loads(child.communicate()[0].strip().splitlines()[-1]) for child in children]
        wall = time.perf_counter() - started
        done = sum(o["status"] == "completed" for o in outcomes)
        per_hour = 3600 * done / wall
        base = base or per_hour
        rows.append(
            {
                "packed trials": n,
                "completed": done,
                "wall s": wall,
                "trials/hour": per_hour,
                "vs 1": per_hour / base if base else None,
                "median trial s": statistics.median(o["seconds"] for o in outcomes),
            }
        )
    return rows


def part_d(args, device: torch.device) -> list[dict[str, Any]]:
    """Inference throughput (fp32, bf16) and batch-1 latency, ours vs timm."""
    rows = []
    size = args.image_size
    dtypes = [torch.float32] + ([torch.bfloat16] if device.type == "cuda" else [])
    for ours_name, timm_name in PAIRS:
        for side, make in (("archsearch", lambda n=ours_name: build_model(resolve_config(n).replace(image_size=size))),
                           ("timm", lambda n=timm_name: _timm(n, size))):  # fmt: skip
            model = make()
            if model is None:
                rows.append({"model": timm_name, "side": side, "note": "timm not installed"})
                continue
            # The layout and the timed call a trial's own measurement uses (channels-last on CUDA).
            model = model.to(device, memory_format=inference_layout(device)).eval()
            for dtype in dtypes:
                infer = inference_fn(model, random_images(args.batch_size, size, device), dtype, device)
                single = inference_fn(model, random_images(1, size, device), dtype, device)
                rate, _ = _rate(infer, device, args.batch_size, args.warmup, args.repeats)
                _, latency = _rate(single, device, 1, args.warmup, args.repeats)
                rows.append(
                    {
                        "model": ours_name if side == "archsearch" else timm_name,
                        "side": side,
                        "dtype": str(dtype).removeprefix("torch."),
                        "infer img/s": rate,
                        "batch-1 latency ms": latency * 1e3,
                    }
                )
            del model
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--small-train-size", type=int, default=50_000)
    parser.add_argument("--small-epochs", type=int, default=2)
    parser.add_argument("--packing", default="1,2,4,8")
    parser.add_argument("--parts", default="abcd")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run (e.g. on a CPU)")
    parser.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None, help="compiled rows too (default: on CUDA)"
    )
    parser.add_argument("--json", dest="json_out", default="gpu-benchmark.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_size, args.image_size, args.warmup, args.repeats = 2, 64, 1, 2
        args.small_train_size, args.small_epochs, args.packing = 512, 2, "1,2"
    args.packing = [int(n) for n in str(args.packing).split(",") if n]
    device = torch.device(args.device)
    if args.compile is None:
        args.compile = device.type == "cuda"  # inductor on a small CPU takes minutes per model
    backends = configure_backends(device)  # the same cuDNN autotuning and TF32 settings as a trial
    peak = matmul_rate(device, 8192 if device.type == "cuda" and not args.quick else 1024)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    datasheet = datasheet_peak(name) if device.type == "cuda" else None
    header = {
        "device": name,
        "torch": torch.__version__,
        "matmul TFLOP/s (measured)": peak / 1e12,
        "datasheet peak": f"{datasheet[0]} {datasheet[1] / 1e12:g} TFLOP/s" if datasheet else "unknown for this device",
        **backends,
        "python": platform.python_version(),
        "host cpus": os.cpu_count(),
    }
    print(" | ".join(f"{k}: {_cell(v)}" for k, v in header.items()), flush=True)
    results: dict[str, Any] = {"header": header}
    parts = {
        "a": ("(a) training at 224: ours vs timm, MFU", lambda: part_a(args, device, peak, datasheet)),
        "b": ("(b) one 32x32 trial: images/s, data wait, step time", lambda: part_b(args, device)),
        "c": ("(c) packed 32x32 trials per GPU", lambda: part_c(args, device)),
        "d": ("(d) inference fp32/bf16 and batch-1 latency: ours vs timm", lambda: part_d(args, device)),
    }
    for key in args.parts:
        title, run = parts[key]
        rows = run()
        results[key] = rows
        print(f"\n{title}\n{_table(rows)}", flush=True)
    Path(args.json_out).write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwrote {args.json_out}")


if __name__ == "__main__":
    main()
