"""Cost of a model: parameters, FLOPs (fvcore), inference throughput, batch-1 latency, peak memory.

Timing follows the usual rules for device work: warm up, synchronise (CUDA events on a GPU),
repeat, report the median and the spread. Every measurement records the device name, dtype,
batch size and torch version, because a number without them cannot be compared.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass

import torch
from torch import nn

from .flops import count_flops
from .timing import time_repeated


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

    def to_dict(self) -> dict:
        return asdict(self)


def device_name(device: torch.device) -> str:
    """A human-readable device name: the GPU model, or the CPU with the thread count used."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine() or "cpu"
    return f"cpu ({cpu}, {torch.get_num_threads()} threads)"


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def count_flops_or_none(model: nn.Module, image_size: int, device: torch.device) -> int | None:
    """fvcore FLOPs of one image, or None where fvcore is not installed (e.g. a bare GPU node)."""
    try:
        images = torch.randn(1, 3, image_size, image_size, device=device)
        return count_flops(model, images).total
    except ImportError:
        return None


def inference_fn(model: nn.Module, batch: torch.Tensor, dtype: torch.dtype, device: torch.device):
    """One timed inference call as a trial measures it (inference mode, autocast below fp32);
    ``archsearch verify`` re-times the front with the same call."""
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)

    def forward() -> None:
        with torch.inference_mode(), autocast:
            model(batch)

    return forward


def measure_cost(
    model: nn.Module,
    image_size: int,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    batch_size: int = 64,
    warmup: int = 2,
    repeats: int = 5,
    flops: bool = True,
    throughput: bool = True,
    latency: bool = True,
) -> CostMeasurement:
    """Measure ``model`` (moved to ``device``; left in eval mode) on random ``image_size`` inputs."""
    device = torch.device(device)
    channels_last = device.type == "cuda"
    model = model.to(device, memory_format=torch.channels_last if channels_last else torch.preserve_format).eval()
    params = sum(p.numel() for p in model.parameters())
    flop_count = count_flops_or_none(model, image_size, device) if flops else None

    def batch_of(n: int) -> torch.Tensor:
        x = torch.randn(n, 3, image_size, image_size, device=device)
        return x.contiguous(memory_format=torch.channels_last) if channels_last else x

    rate = rate_min = rate_max = None
    peak = None
    if throughput:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        timing = time_repeated(inference_fn(model, batch_of(batch_size), dtype, device), device, warmup, repeats)
        rate = timing.rate(batch_size)
        fastest, slowest = timing.spread
        rate_min, rate_max = batch_size / slowest, batch_size / fastest
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device)
    lat = lat_min = lat_max = None
    if latency:
        timing = time_repeated(inference_fn(model, batch_of(1), dtype, device), device, warmup, repeats)
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
    )
