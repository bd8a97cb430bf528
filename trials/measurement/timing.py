"""Wall-clock timing of device work: synchronised, warmed up, repeated; medians and spreads; and the
seconds of one training step of a model config, the unit the plans of ``reproduce --plan`` and
``archsearch check`` multiply by the steps a run takes."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trials.models.build import build_model
from trials.models.config import ModelConfig

TIMED_STEPS = 2  # of a training step's timing, after one warm-up step


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


class TrainingStepper:
    """A model of ``config``, its AdamW optimiser and a batch of random images of the config's size and
    channels: :meth:`step` trains one step and returns its seconds (on the caller's torch threads). What
    every plan made before anything trains times (``archsearch reproduce --plan``, ``archsearch check``)."""

    def __init__(self, config: ModelConfig, batch_size: int):
        self.model = build_model(config)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        channels = getattr(config, "in_chans", 3)
        self.images = torch.randn(batch_size, channels, config.image_size, config.image_size)
        self.labels = torch.randint(0, config.num_classes, (batch_size,))

    def step(self) -> float:
        started = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(self.model(self.images), self.labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return time.perf_counter() - started


def training_step_seconds(config: ModelConfig, batch_size: int, *, threads: int = 1) -> float:
    """Seconds of one AdamW training step of ``config`` at ``batch_size`` on this machine's CPU, on
    ``threads`` intra-op threads (a CPU trial's share: one by default): the upper median of
    :data:`TIMED_STEPS` steps after a warm-up step (:class:`TrainingStepper`)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        stepper = TrainingStepper(config, batch_size)
        times = [stepper.step() for _ in range(TIMED_STEPS + 1)]
        timed = sorted(times[1:])
        return timed[len(timed) // 2]
    finally:
        torch.set_num_threads(previous)
