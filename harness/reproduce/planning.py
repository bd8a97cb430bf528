"""``archsearch reproduce STUDY --plan``: what a reproduction will run, without training anything.

For every variant: parameters and FLOPs (closed-form cost model), the token grid of each attention
stage (or each stage), and for the study its pre-registered protocol and an estimate of the wall
time here, from one timed training step of each variant on this machine.
"""

from __future__ import annotations

import math
from typing import Any

from harness.reproduce.cluster_scale import ClusterRun
from harness.reproduce.cluster_scale import cost as cluster_cost
from harness.reproduce.studies import Run, variant_config
from search_space.cost_model import estimate_flops, estimate_params
from trials.measurement.timing import training_step_seconds
from trials.models.config import CaiTConfig, CoAtNetConfig

EVAL_COST = 1 / 3  # a forward pass costs about a third of a training step
RUN_OVERHEAD_S = 5.0  # building, measuring params/FLOPs/throughput, writing the record


def grids(config: CaiTConfig | CoAtNetConfig) -> list[list[int]]:
    """The spatial grid of each stage the attention (or convolution) runs on: CoAtNet's S1..S4,
    ViT-REL's and CaiT's patch grid."""
    if isinstance(config, CoAtNetConfig):
        return [[side, side] for side in config.stage_resolutions()]
    side = config.image_size // config.patch_size
    return [[side, side]]


def _step_seconds(config: CaiTConfig | CoAtNetConfig, batch_size: int) -> float:
    """Median seconds of one training step at ``batch_size`` on one CPU thread (a trial's share here)."""
    return training_step_seconds(config.replace(num_classes=10), batch_size)


def describe(run: Run, *, timed: bool = True) -> dict[str, Any]:
    """One study of the plan: its variants, its protocol, and the estimated wall time here."""
    data, training = run.spec["data"], run.spec["training"]
    batch = data.get("batch_size", 64)
    train_size = run.protocol.train_size or 0
    val_size = data.get("val_size", 1000)
    concurrency = run.spec["search"]["concurrency"]
    variants, seconds = [], 0.0
    for name in run.spec["variants"]:
        config = variant_config(run, name)
        entry = {
            "name": name,
            "seeds": run.protocol.seeds_of(name),
            "params": estimate_params(config),
            "flops": estimate_flops(config),
            "grids": grids(config),
        }
        if timed and train_size:
            step = _step_seconds(config, batch)
            steps = math.ceil(train_size / batch)
            evaluated = val_size + (2 * train_size if training.get("recalibrate_batchnorm") else 0)
            epoch = step * (steps + EVAL_COST * math.ceil(evaluated / batch))
            entry["estimated_run_s"] = round(RUN_OVERHEAD_S + training["epochs"] * epoch, 1)
            seconds += entry["estimated_run_s"] * run.protocol.seeds_of(name)
        variants.append(entry)
    notes = [note for note in (run.protocol.more_seeds_note(), run.protocol.selection_note()) if note]
    cluster = {}
    if isinstance(run, ClusterRun):  # --scale imagenet: the pilot part first, GPU-hours instead of time here
        costs = cluster_cost(run, run.spec["data"].get("data_dir"))
        notes += costs["notes"]
        cluster = {"pilot": {"study": run.pilot["name"], "runs": run.pilot["search"]["n_trials"]},
                   "gpu_hours": costs["gpu_hours"], "training_rates": costs["rates"]}  # fmt: skip
    return {
        "study": run.protocol.study,
        "runs": run.spec["search"]["n_trials"],
        "parts": [{"study": part["name"], "runs": part["search"]["n_trials"]} for part in run.parts],
        "variants": variants,
        "protocol": run.protocol.to_dict(),
        "notes": notes,
        "estimated_wall_time_s": round(seconds / concurrency, 0) if seconds else None,
        **cluster,
    }


def plan_report(runs: list[Run], *, timed: bool = True, scale: str | None = None) -> dict[str, Any]:
    """The whole reproduction: ``variants`` and ``protocol`` of the first study (every layout study
    shares its variants), and ``studies`` with each one's own; ``scale`` as asked (or defaulted)."""
    studies = [describe(run, timed=timed) for run in runs]
    total = [s["estimated_wall_time_s"] for s in studies]
    return {
        "scale": scale,
        "variants": studies[0]["variants"],
        "protocol": studies[0]["protocol"],
        "studies": studies,
        "estimated_wall_time_s": sum(total) if all(t is not None for t in total) else None,
    }
