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
    CaiT's talking heads three ways: explicit with autocast's fp32 softmax, explicit with the
    softmax in bf16 (``softmax_in_input_dtype``), and fused (``talking_heads_impl: fused``: the
    pre-softmax mix folded into the queries, one SDPA call; H times the attention multiply-adds,
    no N x N tensor). ``talking_heads_impl`` defaults to ``explicit`` until these rows (and part
    (t)'s) show the fused path faster on a GPU; MFU counts the explicit path's FLOPs for every
    row (the architecture's cost), so a faster implementation shows as a higher MFU.
    MFU = 2 x model multiply-adds x 3 (forward + backward) x images/s / peak, twice: against the
    bf16 matmul rate measured here (an 8192^3 matmul: what this GPU really does) and against the
    datasheet's dense bf16 peak (H100 SXM: 989 TFLOP/s; the figure used is named in the header).
(b) one 32x32 trial (``coatnet_tiny32``, ``cait_tiny32``; CIFAR-sized synthetic data held on the
    device) through archsearch's own Trainer: images/s, data-wait share, step time, eager vs compiled.
(c) trials per hour with 1, 2, 4 and 8 such trials packed on the GPU (separate processes, each
    capped at its share of the memory, as ``search.resources.gpus: 1/N`` does).
(d) inference throughput fp32 and bf16 vs timm, and batch-1 latency, channels-last on CUDA as a
    trial measures it (``trials.measurement.measure``).
(t) talking-heads attention alone (``cait_s24``'s width and heads) at several sequence lengths:
    forward + backward ms and peak memory, explicit (fp32 / bf16 softmax) vs fused. Not in the
    default parts; the decision run for ``talking_heads_impl`` is ``--parts ta``.

It prints one table per part and writes everything as JSON.

    python -m benchmarks.gpu [--batch-size 128] [--json gpu.json]     # on a GPU machine
    python -m benchmarks.gpu --device cpu --quick                      # a smoke run anywhere
    python -m benchmarks.gpu --parts ta --compile-modes eager,regional # talking heads: fused or not
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
from trials.atomic import atomic_write
from trials.devices.gpu import configure_backends, datasheet_peak, mfu
from trials.measurement.measure import inference_fn, inference_layout, random_images
from trials.measurement.timing import synchronize, time_once
from trials.models import build_model, resolve_config
from trials.models.regions import compile_regions

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


COMPILE_MODES = ("eager", "regional", "whole")  # part (a)'s variants of our models, in order of value


def _compiled_forward(model: torch.nn.Module, how: str) -> torch.nn.Module:
    """``model`` run as ``how`` says: eager, per-block compiled (what a trial runs), or whole-graph."""
    if how == "regional":
        compile_regions(model)
        return model
    if how == "whole":
        return torch.compile(model, dynamic=False)
    return model


# CaiT's talking-heads variants in parts (a) and (t): (talking_heads_impl, autocast's fp32 softmax)
TALKING_HEADS_ROWS = (("explicit", False), ("explicit", True), ("fused", False))


def _set_softmax_upcast(model: torch.nn.Module, upcast: bool) -> None:
    for module in model.modules():
        if hasattr(module, "softmax_in_input_dtype"):
            module.softmax_in_input_dtype = not upcast


def part_a(args, device: torch.device, peak: float, datasheet: tuple[str, float] | None, emit) -> list[dict[str, Any]]:
    """Training throughput and MFU at 224, ours (eager, regional and whole-graph compiled; CaiT's
    talking heads also with autocast's fp32 softmax, and fused) vs timm eager. Each row goes to ``emit`` the
    moment it is measured, so a part cut off by a time limit keeps what it had.

    Long because it is one benchmark part's measurement protocol (warm-up, timed loops, rows) written out in the
    order it runs on the device.
    """
    rows: list[dict[str, Any]] = []
    size, batch = args.image_size, args.batch_size
    images = torch.randn(batch, 3, size, size, device=device)
    if device.type == "cuda":
        images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    memory_format = torch.channels_last if device.type == "cuda" else torch.preserve_format
    plan: list[tuple[str, Any, str, str, Any, bool]] = []  # every eager row first, then each compile mode

    def ours(name: str, how: str, with_upcast: bool) -> None:
        """Our model's rows for one compile mode: one, or CaiT's talking-heads variants."""
        config = resolve_config(name).replace(image_size=size)
        if not getattr(config, "talking_heads", False):
            plan.append((name, config, "archsearch", how, lambda c=config: build_model(c), False))
            return
        for impl, upcast in TALKING_HEADS_ROWS:
            if upcast and not with_upcast:
                continue
            variant = config.replace(talking_heads_impl=impl)
            plan.append((name, variant, "archsearch", how, lambda c=variant: build_model(c), upcast))

    for ours_name, timm_name in PAIRS:
        config = resolve_config(ours_name).replace(image_size=size)
        plan.append((timm_name, config, "timm", "eager", lambda n=timm_name: _timm(n, size), False))
        ours(ours_name, "eager", with_upcast=True)
    for how in args.compile_modes if args.compile else ():
        if how != "eager":
            for ours_name, _ in PAIRS:
                ours(ours_name, how, with_upcast=False)
    eager_rates: dict[str, float] = {}
    timm_rates = {}  # ours -> timm's eager rate
    timm_of = dict((t, o) for o, t in PAIRS)
    for name, config, side, how, make, upcast in plan:
        macs = estimate_cost(config).flops
        row: dict[str, Any] = {"model": name, "side": side, "compile": how}
        impl = getattr(config, "talking_heads_impl", "explicit") if side == "archsearch" else "explicit"
        if side == "archsearch" and getattr(config, "talking_heads", False):
            row["talking heads"] = impl
            row["softmax"] = "fp32 (autocast)" if upcast else ("in SDPA" if impl == "fused" else "input dtype")
        model = make()
        if model is None:
            emit({**row, "note": "timm not installed"}, rows)
            continue
        model = model.to(device, memory_format=memory_format).train()
        _set_softmax_upcast(model, upcast)
        started = time.perf_counter()
        try:
            forward = _compiled_forward(model, how)
            step = train_step(forward, images, labels, dtype, device)
            step()  # the first step compiles (forward and backward)
            synchronize(device)
            first_step_s = time.perf_counter() - started
            rate, step_s = _rate(step, device, batch, args.warmup, args.repeats)
        except Exception as error:  # a compile failure is a row, not the end of the benchmark
            emit({**row, "note": f"{type(error).__name__}: {error}"[:120]}, rows)
            continue
        row.update({
            "batch": batch,
            "dtype": str(dtype).removeprefix("torch."),
            "train img/s": rate,
            "step ms": step_s * 1e3,
            "first step s": first_step_s,
            "GMACs/img": macs / 1e9,
            "MFU % (measured peak)": mfu(macs, rate, peak),
            "MFU % (datasheet)": mfu(macs, rate, datasheet[1]) if datasheet else None,
        })  # fmt: skip
        if side == "timm":
            timm_rates[timm_of[name]] = rate
        elif name in timm_rates:
            row["vs timm eager"] = rate / timm_rates[name]
        if side == "archsearch" and how == "eager" and not upcast and impl == "explicit":
            eager_rates[name] = rate
        elif side == "archsearch" and name in eager_rates:
            row["vs our eager"] = rate / eager_rates[name]
        emit(row, rows)
        del model, forward, step
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if how != "eager":
            torch.compiler.reset()
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
    formula (trials.devices.gpu.memory_cap_fraction); alone or on a CPU, the config as it was."""
    if device.type == "cuda" and n > 1:
        return {**config, "gpu_memory_fraction": 1 / n}
    return dict(config)


def _packed_wall(config: dict[str, Any], n: int, env: dict[str, str] | None) -> tuple[float, list[dict[str, Any]]]:
    started = time.perf_counter()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _PACKED_CHILD, json.dumps(config)],
            cwd=ROOT,  # `python -c` puts the working directory first on sys.path
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        for _ in range(n)
    ]
    outcomes = []
    for child in children:
        lines = child.communicate()[0].strip().splitlines()
        outcomes.append(json.loads(lines[-1]) if lines else {"status": "crashed", "seconds": float("nan")})
    return time.perf_counter() - started, outcomes


def _mps(command: str) -> str | None:
    """Start (``-d``) or stop (``quit``) the CUDA MPS control daemon; None if it worked, else why not."""
    try:
        if command == "start":
            done = subprocess.run(["nvidia-cuda-mps-control", "-d"], capture_output=True, text=True, timeout=20)
        else:
            done = subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", capture_output=True, text=True,
                                  timeout=20)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        return f"{type(error).__name__}: {error}"[:100]
    return None if done.returncode == 0 else (done.stderr or done.stdout or f"exit {done.returncode}").strip()[:100]


def part_c(args, device: torch.device, emit) -> list[dict[str, Any]]:
    """Trials per hour with N packed 32x32 trials on one device (separate processes), without and
    (``--mps``, CUDA only) with the MPS daemon, whose clients' kernels can run concurrently."""
    rows: list[dict[str, Any]] = []
    modes = [False] + ([True] if args.mps and device.type == "cuda" else [])
    base = None
    for mps in modes:
        if mps and (why := _mps("start")):
            emit({"mps": True, "note": f"MPS daemon did not start: {why}"}, rows)
            break
        try:
            for n in args.packing:
                config = _small_trial_config("coatnet_tiny32", str(device), False, args.small_train_size,
                                             args.small_epochs)  # fmt: skip
                wall, outcomes = _packed_wall(packed_trial_config(config, device, n), n, None)
                done = sum(o["status"] == "completed" for o in outcomes)
                per_hour = 3600 * done / wall
                base = base or per_hour
                emit({
                    "mps": mps,
                    "packed trials": n,
                    "completed": done,
                    "wall s": wall,
                    "trials/hour": per_hour,
                    "vs 1 alone": per_hour / base if base else None,
                    "median trial s": statistics.median(o["seconds"] for o in outcomes),
                }, rows)  # fmt: skip
        finally:
            if mps:
                _mps("quit")
    return rows


_WARM_CHILD = """
import json, sys, time, torch
from benchmarks.steps import train_step
from trials.models import build_model, resolve_config
from trials.models.regions import compile_regions
from trials.measurement.timing import synchronize
mode, path, name, size, batch, device = sys.argv[1:7]
size, batch, device = int(size), int(batch), torch.device(device)
started = time.perf_counter()
if mode == "warm":
    with open(path, "rb") as f:
        torch.compiler.load_cache_artifacts(f.read())
loaded = time.perf_counter() - started
model = build_model(resolve_config(name).replace(image_size=size)).to(device).train()
images = torch.randn(batch, 3, size, size, device=device)
labels = torch.randint(0, 10, (batch,), device=device)
dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
t = time.perf_counter()
compile_regions(model)
step = train_step(model, images, labels, dtype, device)
step()
synchronize(device)
first = time.perf_counter() - t
t = time.perf_counter()
step()
synchronize(device)
second = time.perf_counter() - t
if mode == "cold":
    artifacts = torch.compiler.save_cache_artifacts()
    with open(path, "wb") as f:
        f.write(artifacts[0] if artifacts else b"")
print(json.dumps({"first step s": first, "second step s": second, "load s": loaded}))
"""


def part_w(args, device: torch.device, emit) -> list[dict[str, Any]]:
    """Compile cold vs warm from cache artifacts, each in a fresh process with an empty Inductor cache
    directory of its own: what a trial on another node pays once the architecture's first compile
    shared its artifacts (``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts``)."""
    import tempfile

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "artifacts.bin")
        for mode in ("cold", "warm"):
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / f"inductor-{mode}")}
            argv = [mode, path, args.warm_model, str(args.warm_image_size), str(args.warm_batch), str(device)]
            done = subprocess.run([sys.executable, "-c", _WARM_CHILD, *argv], cwd=ROOT, env=env,
                                  capture_output=True, text=True)  # fmt: skip
            row: dict[str, Any] = {"model": args.warm_model, "compile": "regional", "cache": mode}
            lines = done.stdout.strip().splitlines()
            if done.returncode or not lines:
                emit({**row, "note": (done.stderr.strip().splitlines() or ["?"])[-1][:120]}, rows)
                break
            row.update(json.loads(lines[-1]))
            if mode == "warm" and rows and "first step s" in rows[0]:
                row["vs cold"] = row["first step s"] / rows[0]["first step s"]
            row["artifacts MB"] = Path(path).stat().st_size / 2**20 if Path(path).exists() else None
            emit(row, rows)
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


def _attention_step(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor, dtype: torch.dtype,
                    device: torch.device):  # fmt: skip
    """One forward + backward of ``module`` on ``x`` under ``dtype`` autocast, gradients reset first."""

    def step() -> None:
        module.zero_grad(set_to_none=True)
        x.grad = None
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            out = module(x)
        out.backward(grad)

    return step


def part_t(args, device: torch.device, emit) -> list[dict[str, Any]]:
    """Talking-heads attention alone: forward + backward of one ``SelfAttention`` at ``cait_s24``'s
    width and heads, explicit (fp32 and bf16 softmax) vs fused, at sequence lengths from 224 (196
    patches) to 512 (1024) images; median ms and, on CUDA, peak memory over the inputs' own. The
    fused path trades N x N traffic for H times the attention matmuls, so the crossover is in N."""
    from trials.models.cait import SelfAttention

    rows: list[dict[str, Any]] = []
    config = resolve_config(args.warm_model if args.quick else "cait_s24")
    dim, heads = config.embed_dim, config.num_heads
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    lengths = (16, 64) if args.quick else (196, 576, 1024)
    batch = max(1, args.batch_size // 2)
    for tokens in lengths:
        x = torch.randn(batch, tokens, dim, device=device, requires_grad=True)
        grad = torch.randn(batch, tokens, dim, device=device)
        baseline = None
        for impl, upcast in TALKING_HEADS_ROWS:
            torch.manual_seed(0)
            attention = SelfAttention(dim, heads, config.qkv_bias, talking_heads=True, impl=impl).to(device)
            attention.softmax_in_input_dtype = not upcast
            row: dict[str, Any] = {"tokens": tokens, "batch": batch, "dim": dim, "heads": heads, "impl": impl}
            row["softmax"] = "fp32 (autocast)" if upcast else ("in SDPA" if impl == "fused" else "input dtype")
            step = _attention_step(attention, x, grad, dtype, device)

            try:
                if device.type == "cuda":
                    synchronize(device)
                    torch.cuda.reset_peak_memory_stats(device)
                    resident = torch.cuda.memory_allocated(device)
                _, seconds = _rate(step, device, batch, args.warmup, args.repeats)
            except Exception as error:  # e.g. out of memory at the longest sequence: a row, not the end
                emit({**row, "note": f"{type(error).__name__}: {error}"[:120]}, rows)
                continue
            row["fwd+bwd ms"] = seconds * 1e3
            if device.type == "cuda":
                row["peak MB"] = (torch.cuda.max_memory_allocated(device) - resident) / 2**20
            if baseline is None:
                baseline = seconds
            row["vs explicit bf16 softmax" if dtype != torch.float32 else "vs explicit"] = baseline / seconds
            emit(row, rows)
            del attention, step
        del x, grad
        if device.type == "cuda":
            torch.cuda.empty_cache()
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
    parser.add_argument("--compile-modes", default=",".join(COMPILE_MODES), help="part (a)'s variants")
    parser.add_argument("--mps", action="store_true", help="part (c) again under the CUDA MPS daemon")
    parser.add_argument("--warm-model", default="cait_s24", help="part (w)'s model")
    parser.add_argument("--warm-image-size", type=int, default=224)
    parser.add_argument("--warm-batch", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run (e.g. on a CPU)")
    parser.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None, help="compiled rows too (default: on CUDA)"
    )
    parser.add_argument("--json", dest="json_out", default="gpu-benchmark.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_size, args.image_size, args.warmup, args.repeats = 2, 64, 1, 2
        args.small_train_size, args.small_epochs, args.packing = 512, 2, "1,2"
        args.warm_model, args.warm_image_size, args.warm_batch = "cait_tiny32", 32, 2
    args.compile_modes = [m for m in str(args.compile_modes).split(",") if m]
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
    sink = RowSink(Path(args.json_out), results)
    sink.save()
    parts = {
        "a": ("(a) training at 224: ours vs timm, MFU", lambda emit: part_a(args, device, peak, datasheet, emit)),
        "b": ("(b) one 32x32 trial: images/s, data wait, step time", lambda emit: part_b(args, device)),
        "c": ("(c) packed 32x32 trials per GPU", lambda emit: part_c(args, device, emit)),
        "d": ("(d) inference fp32/bf16 and batch-1 latency: ours vs timm", lambda emit: part_d(args, device)),
        "w": ("(w) regional compile: cold vs warm from cache artifacts", lambda emit: part_w(args, device, emit)),
        "t": ("(t) talking heads alone: explicit vs fused, fwd+bwd", lambda emit: part_t(args, device, emit)),
    }
    for key in args.parts:
        title, run = parts[key]
        print(f"\n{title}", flush=True)
        rows = run(sink.emitter(key))
        sink.part(key, rows)
        print(_table(rows), flush=True)
    print(f"\nwrote {args.json_out}")


class RowSink:
    """The benchmark's JSON, rewritten (temporary file, then rename) after every row, so a run cut
    off by a time limit keeps every row it measured."""

    def __init__(self, path: Path, results: dict[str, Any]):
        self.path, self.results = path, results

    def save(self) -> None:
        atomic_write(self.path, json.dumps(self.results, indent=2, default=str))

    def emitter(self, key: str):
        def emit(row: dict[str, Any], rows: list[dict[str, Any]]) -> None:
            rows.append(row)
            print("  row: " + json.dumps(row, default=str), flush=True)
            self.part(key, rows)

        return emit

    def part(self, key: str, rows: list[dict[str, Any]]) -> None:
        self.results[key] = list(rows)
        self.save()


if __name__ == "__main__":
    main()
