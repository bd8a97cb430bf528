"""Cost of a model: parameters, FLOPs (fvcore), inference throughput, batch-1 latency, peak memory.

Timing follows the usual rules for device work: warm up, synchronise (CUDA events on a GPU),
repeat, report the median and the spread. Every measurement records the device name, dtype,
batch size, torch version, the clock, the warm-up, whether the timed model was the compiled one
(and why not) and whether the device was shared with other trials (packed): a number without
them cannot be compared.

A trial times the forward it trains with (compiled when it compiles: an eager batch-1 latency
mostly measures Python's launch speed), at its training batch size and at batch 1, after
:data:`CUDA_WARMUP` untimed calls on a GPU (:data:`CPU_WARMUP` on a CPU, where one call takes long).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from trials.measurement.flops import count_flops
from trials.measurement.machine_load import LoadWindow, load_fields
from trials.measurement.timing import synchronize, time_repeated, timer_name

# Untimed calls before the timed ones. On a GPU each call takes milliseconds and the first ones pay
# for cuDNN/cuBLAS autotuning, the caching allocator's first blocks and the clocks ramping up: ten.
# On a CPU one call of a training batch can take a second and nothing needs tuning: two.
CUDA_WARMUP = 10
CPU_WARMUP = 2


@dataclass(frozen=True)
class CostMeasurement:
    params: int
    flops: int | None  # multiply-adds for one image (papers' and fvcore's convention)
    flops_source: str | None  # "fvcore", or None when fvcore is not installed
    throughput: float | None  # images/s, inference at ``batch_size``, median of repeats
    throughput_min: float | None
    throughput_max: float | None
    latency_ms: float | None  # batch 1, median
    latency_ms_min: float | None
    latency_ms_max: float | None
    peak_memory_bytes: int | None  # CUDA allocator peak during the throughput runs; None on CPU
    batch_size: int
    image_size: int
    dtype: str
    device: str
    torch_version: str
    warmup: int | None = None  # untimed calls before the timed ones (after the compiling call, if any)
    repeats: int | None = None
    timer: str | None = None  # "cuda_events" or "perf_counter"
    compiled: bool = False  # the timed forward was torch.compile's
    compile_note: str | None = None  # why the timed forward was not compiled (None when it was)
    compile_s: float | None = None  # the untimed first calls that compiled (one per batch size), seconds
    # The device was shared with other trials while this was measured (a packed trial: a share of a
    # GPU); such a throughput is a lower bound, ``archsearch verify`` re-measures it alone.
    throughput_shared: bool = False
    # Other processes' use of this process's CPUs while the throughput was timed (machine_load): how many of
    # its ``load_cores`` cores they kept busy, and the threads the timing ran on; None where not read.
    load_others_cores: float | None = None
    load_cores: int | None = None
    load_threads: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def default_warmup(device: torch.device) -> int:
    """Warm-up calls for ``device``: :data:`CUDA_WARMUP` on a GPU, :data:`CPU_WARMUP` elsewhere."""
    return CUDA_WARMUP if torch.device(device).type == "cuda" else CPU_WARMUP


def inference_layout(device: torch.device) -> torch.memory_format:
    """The memory layout a trial runs its model in: channels-last on CUDA (``Trainer.channels_last``:
    tensor cores want NHWC), as it is elsewhere. Measurement and the GPU benchmark use the same."""
    return torch.channels_last if torch.device(device).type == "cuda" else torch.preserve_format


def random_images(n: int, image_size: int, device: torch.device, channels: int = 3) -> torch.Tensor:
    """A batch of random images on ``device`` in the layout a trial's batches have there."""
    images = torch.randn(n, channels, image_size, image_size, device=device)
    layout = inference_layout(device)
    return images.contiguous(memory_format=layout) if layout == torch.channels_last else images


def device_name(device: torch.device) -> str:
    """A human-readable device name: the GPU model, or the CPU with the thread count used."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine() or "cpu"
    return f"cpu ({cpu}, {torch.get_num_threads()} threads)"


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def model_channels(model: nn.Module) -> int:
    """The input channels ``model`` was built for (its config's ``in_chans``; 3 for a model without one)."""
    return int(getattr(getattr(model, "config", None), "in_chans", 3))


def count_flops_or_none(model: nn.Module, image_size: int, device: torch.device) -> int | None:
    """fvcore FLOPs of one image, or None where fvcore is not installed (e.g. a bare GPU node)."""
    try:
        images = torch.randn(1, model_channels(model), image_size, image_size, device=device)
        return count_flops(model, images).total
    except ImportError:
        return None


def inference_fn(
    model: Callable[[torch.Tensor], Any], batch: torch.Tensor, dtype: torch.dtype, device: torch.device
) -> Callable[[], None]:
    """One timed inference call as a trial measures it (inference mode, autocast below fp32);
    ``archsearch verify`` re-times the front with the same call. ``model`` is the module or the
    forward the trial runs (its compiled one)."""
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)

    def forward() -> None:
        with torch.inference_mode(), autocast:
            model(batch)

    return forward


def first_call_seconds(fn: Callable[[], None], device: torch.device) -> float:
    """Seconds of the first call of a compiled forward, which compiles (torch.compile compiles at the
    first call per shape): timed on its own so that compiling never lands in a throughput."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def measure_cost(
    model: nn.Module,
    image_size: int,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    batch_size: int = 64,
    warmup: int | None = None,
    repeats: int = 5,
    flops: bool = True,
    throughput: bool = True,
    latency: bool = True,
    forward: Callable[[torch.Tensor], Any] | None = None,
    compile_note: str | None = "not compiled",
    shared: bool = False,
) -> CostMeasurement:
    """Measure ``model`` (moved to ``device``; left in eval mode) on random ``image_size`` inputs.

    ``forward``: what to time instead of the module itself, i.e. the trial's compiled forward; its
    first call per batch size compiles, and is timed apart (``compile_s``), before the warm-up.
    ``compiled``/``compile_note`` of the result say what was timed; a caller whose forward may fall
    back to eager corrects them afterwards. ``warmup`` None: :func:`default_warmup`. ``shared``:
    the device had other trials on it (``throughput_shared``); others' use of its CPUs: ``load_*`` (machine_load).
    """
    device = torch.device(device)
    warmup = default_warmup(device) if warmup is None else warmup
    model = model.to(device, memory_format=inference_layout(device)).eval()
    params = sum(p.numel() for p in model.parameters())
    flop_count = count_flops_or_none(model, image_size, device) if flops else None
    timed = model if forward is None else forward
    compile_s = 0.0 if forward is not None else None

    def run(n: int) -> Callable[[], None]:
        nonlocal compile_s
        call = inference_fn(timed, random_images(n, image_size, device, model_channels(model)), dtype, device)
        if compile_s is not None:
            compile_s += first_call_seconds(call, device)
        return call

    rate = rate_min = rate_max = None
    peak = load = None
    if throughput:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        timing, load = _timed_watched(run(batch_size), device, warmup, repeats)  # compiled before the window
        rate = timing.rate(batch_size)
        fastest, slowest = timing.spread
        rate_min, rate_max = batch_size / slowest, batch_size / fastest
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device)
    lat = lat_min = lat_max = None
    if latency:
        timing = time_repeated(run(1), device, warmup, repeats)
        lat = timing.median * 1e3
        lat_min, lat_max = (s * 1e3 for s in timing.spread)
    return CostMeasurement(
        params=params,
        flops=flop_count,
        flops_source="fvcore" if flop_count is not None else None,
        throughput=rate,
        throughput_min=rate_min,
        throughput_max=rate_max,
        latency_ms=lat,
        latency_ms_min=lat_min,
        latency_ms_max=lat_max,
        peak_memory_bytes=peak,
        batch_size=batch_size,
        image_size=image_size,
        dtype=dtype_name(dtype),
        device=device_name(device),
        torch_version=torch.__version__,
        warmup=warmup,
        repeats=repeats,
        timer=timer_name(device),
        compiled=forward is not None,
        compile_note=None if forward is not None else compile_note,
        compile_s=compile_s if (throughput or latency) else None,
        throughput_shared=shared,
        **load_fields(load),
    )


def _timed_watched(call: Callable[[], None], device: torch.device, warmup: int, repeats: int):
    """(the timing of ``call``, what other processes did on this process's CPUs meanwhile: machine_load)."""
    with LoadWindow() as window:
        timing = time_repeated(call, device, warmup, repeats)
    return timing, window.reading(torch.get_num_threads())
