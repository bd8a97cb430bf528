"""Wall-clock timing of device work: synchronised, warmed up, repeated; medians and spreads."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels so that a host clock reads finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_once(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds for one call of ``fn``: CUDA events on a GPU, a synchronised perf counter elsewhere."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


@dataclass(frozen=True)
class Timing:
    """Repeated timings of one workload: median and spread (min/max) in seconds."""

    seconds: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.seconds), max(self.seconds)

    def rate(self, items: int) -> float:
        """Items per second at the median."""
        return items / self.median


def timer_name(device: torch.device) -> str:
    """Which clock :func:`time_once` reads on ``device``, for the record of a measurement."""
    return "cuda_events" if device.type == "cuda" else "perf_counter"


def time_repeated(fn: Callable[[], object], device: torch.device, warmup: int = 2, repeats: int = 5) -> Timing:
    """``warmup`` untimed calls (caches, autotuning, clocks ramping up), then ``repeats`` timed ones."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    return Timing(tuple(time_once(fn, device) for _ in range(repeats)))
