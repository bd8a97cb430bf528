"""``archsearch reproduce STUDY --plan``: what a reproduction will run, without training anything.

For every variant: parameters and FLOPs (closed-form cost model), the token grid of each attention
stage (or each stage), and for the study its pre-registered protocol and an estimate of the wall
time here, from a few timed training steps of each variant on this machine, with a range: the estimate
at the fastest and at the slowest of those steps (on a shared machine the same plan has swung 2x between
two invocations; the range shows how far it moved while this one timed).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from harness.reproduce.cluster_scale import ClusterRun
from harness.reproduce.cluster_scale import cost as cluster_cost
from harness.reproduce.studies import Run, variant_config
from search_space.cost_model import estimate_flops, estimate_params
from trials.measurement.timing import Timing, TrainingStepper
from trials.models.config import CaiTConfig, CoAtNetConfig

TIMED_ROUNDS = 3  # timed steps per variant, interleaved across variants, after one warm-up step each
EVAL_COST = 1 / 3  # a forward pass costs about a third of a training step
RUN_OVERHEAD_S = 5.0  # building, measuring params/FLOPs/throughput, writing the record


def shape(config: CaiTConfig | CoAtNetConfig) -> dict[str, list[int]]:
    """The variant's depths and widths, what size-matching changed between layouts: CoAtNet's blocks and
    width per stage S0..S4; CaiT's self-attention and class-attention blocks and its one width."""
    if isinstance(config, CoAtNetConfig):
        return {"depths": list(config.depths), "widths": list(config.dims)}
    return {"depths": [config.depth, config.ca_depth], "widths": [config.embed_dim]}


def grids(config: CaiTConfig | CoAtNetConfig) -> list[list[int]]:
    """The spatial grid of each stage the attention (or convolution) runs on: CoAtNet's S1..S4,
    ViT-REL's and CaiT's patch grid."""
    if isinstance(config, CoAtNetConfig):
        return [[side, side] for side in config.stage_resolutions()]
    side = config.image_size // config.patch_size
    return [[side, side]]


def _step_times(configs: dict[str, CaiTConfig | CoAtNetConfig], batch_size: int) -> dict[str, Timing]:
    """Each variant's seconds per training step at ``batch_size`` on one CPU thread (a trial's share here).

    One warm-up step each, then :data:`TIMED_ROUNDS` rounds of one step of every variant in turn: interleaved,
    so a neighbour that loads this shared machine for a while slows every variant alike, and the spread of a
    variant's steps (its range) shows how much the machine moved while the plan timed it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        steps = {name: TrainingStepper(config.replace(num_classes=10), batch_size) for name, config in configs.items()}
        for stepper in steps.values():
            stepper.step()  # warm-up: the first step allocates and is slower
        times: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(TIMED_ROUNDS):
            for name, stepper in steps.items():
                times[name].append(stepper.step())
        return {name: Timing(tuple(seconds)) for name, seconds in times.items()}
    finally:
        torch.set_num_threads(threads)


def _run_seconds(step: float, run: Run, train_size: int) -> float:
    """One run's estimated seconds here at ``step`` seconds per training step: every epoch's steps, its
    evaluation passes at a third of a step per batch, and the per-run overhead."""
    data, training = run.spec["data"], run.spec["training"]
    batch = data.get("batch_size", 64)
    evaluated = data.get("val_size", 1000) + (2 * train_size if training.get("recalibrate_batchnorm") else 0)
    epoch = step * (math.ceil(train_size / batch) + EVAL_COST * math.ceil(evaluated / batch))
    return round(RUN_OVERHEAD_S + training["epochs"] * epoch, 1)


def wall_seconds(total: float, longest: float, concurrency: int) -> float:
    """The wall time of runs taking ``total`` seconds in all, ``concurrency`` at a time: their share of the slots,
    but never less than the longest single run (two runs at concurrency 4 take one run's time, not half of one)."""
    return round(max(total / max(1, concurrency), longest), 0)


def describe(run: Run, *, timed: bool = True, finished: set[tuple[str, int]] | None = None) -> dict[str, Any]:
    """One study of the plan: its variants, its protocol, and the estimated wall time here, with its range
    (from the fastest and the slowest of each variant's timed steps).

    ``finished``: the runs ``(variant, seed)`` a store already holds (:func:`harness.reproduce.run.finished_runs`),
    which the next ``reproduce`` with that store does not run again: their count, and the wall time the
    rest still needs, are added (a long reproduction run over several sittings says what is left)."""
    train_size = run.protocol.train_size or 0
    concurrency = run.spec["search"]["concurrency"]
    configs = {name: variant_config(run, name) for name in run.spec["variants"]}
    times = _step_times(configs, run.spec["data"].get("batch_size", 64)) if timed and train_size else {}
    variants, seconds, low, high = [], 0.0, 0.0, 0.0
    left = [0.0, 0.0, 0.0]  # what the runs not yet finished need: estimate, fastest, slowest
    longest, longest_left = [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]  # one run's time: the wall time's floor
    for name, config in configs.items():
        seeds = run.protocol.seeds_of(name)
        remaining = seeds - sum(1 for variant, _ in finished or () if variant == name)
        entry = {"name": name, "seeds": seeds, "params": estimate_params(config), "flops": estimate_flops(config),
                 "grids": grids(config), **shape(config)}  # fmt: skip
        if finished is not None:
            entry["finished"] = seeds - remaining
        if name in times:
            step = times[name]
            entry["estimated_run_s"] = _run_seconds(step.median, run, train_size)
            entry["estimated_run_s_range"] = [_run_seconds(step.spread[0], run, train_size),
                                              _run_seconds(step.spread[1], run, train_size)]  # fmt: skip
            seconds += entry["estimated_run_s"] * seeds
            low += entry["estimated_run_s_range"][0] * seeds
            high += entry["estimated_run_s_range"][1] * seeds
            for index, run_s in enumerate((entry["estimated_run_s"], *entry["estimated_run_s_range"])):
                left[index] += run_s * remaining
                longest[index] = max(longest[index], run_s if seeds else 0.0)
                longest_left[index] = max(longest_left[index], run_s if remaining > 0 else 0.0)
        variants.append(entry)
    notes = [note for note in (run.protocol.more_seeds_note(), run.protocol.selection_note()) if note]
    cluster = {}
    if isinstance(run, ClusterRun):  # --scale imagenet: the pilot part first, GPU-hours instead of time here
        costs = cluster_cost(run, run.spec["data"].get("data_dir"))
        notes += costs["notes"]
        cluster = {"pilot": {"study": run.pilot["name"], "runs": run.pilot["search"]["n_trials"]},
                   "gpu_hours": costs["gpu_hours"], "training_rates": costs["rates"]}  # fmt: skip
    progress = {}
    if finished is not None:
        progress = {
            "finished_runs": len(finished),
            "remaining_wall_time_s": wall_seconds(left[0], longest_left[0], concurrency) if seconds else None,
            "remaining_wall_time_s_range": [wall_seconds(left[1], longest_left[1], concurrency),
                                            wall_seconds(left[2], longest_left[2], concurrency)]
            if seconds
            else None,
        }
    return {
        "study": run.protocol.study,
        "runs": run.spec["search"]["n_trials"],
        "parts": [{"study": part["name"], "runs": part["search"]["n_trials"]} for part in run.parts],
        "variants": variants,
        "protocol": run.protocol.to_dict(),
        "notes": notes,
        "estimated_wall_time_s": wall_seconds(seconds, longest[0], concurrency) if seconds else None,
        "estimated_wall_time_s_range": [wall_seconds(low, longest[1], concurrency),
                                        wall_seconds(high, longest[2], concurrency)] if seconds else None,
        **cluster,
        **progress,
    }


def plan_report(
    runs: list[Run],
    *,
    timed: bool = True,
    scale: str | None = None,
    finished: dict[str, set[tuple[str, int]]] | None = None,
) -> dict[str, Any]:
    """The whole reproduction: ``variants`` and ``protocol`` of the first study (every layout study
    shares its variants), and ``studies`` with each one's own; ``scale`` as asked (or defaulted).
    ``finished``: per study name, the runs a store already holds (:func:`describe`)."""
    studies = [
        describe(run, timed=timed, finished=None if finished is None else finished.get(run.spec["name"], set()))
        for run in runs
    ]
    estimated = all(s["estimated_wall_time_s"] is not None for s in studies)
    return {
        "scale": scale,
        "variants": studies[0]["variants"],
        "protocol": studies[0]["protocol"],
        "studies": studies,
        "estimated_wall_time_s": sum(s["estimated_wall_time_s"] for s in studies) if estimated else None,
        "estimated_wall_time_s_range": [sum(s["estimated_wall_time_s_range"][i] for s in studies) for i in (0, 1)]
        if estimated
        else None,
    }
