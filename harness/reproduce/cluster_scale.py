"""``--scale imagenet``: the protocols that would decide the papers' claims on a user's GPU cluster.

The CPU scales cannot separate CoAtNet's hypothesis from a plain convolution advantage (64 px: S3
and S4 attend over 16 and 4 tokens) and run CaiT at 32 px. This scale trains on the user's
ImageFolder (ImageNet-1k; ImageNet-100 as the stated fallback) at 160 px, where S3/S4 attend over
10x10 = 100 and 5x5 = 25 tokens, ViT-REL and CaiT over 100 patches:

* ``coatnet-layouts`` (generalisation protocol; the capacity protocol needs JFT-300M-scale data and
  is refused): CoAtNet-0 (C-C-T-T, 25.0M parameters at 160 px) and the other layouts matched to it
  within 2% in parameters and FLOPs (ViT-REL in parameters);
* ``cait-depth`` and ``cait-residual-schemes``: CaiT Table 1's question and columns at depths 12
  and 24, width 192 (XXS), patch 16, with DeiT's augmentation.

Each study first runs a **learning-rate pilot** (its own grid study, ``<study>-lr-pilot``): every
variant x a small lr grid on seed 1000 (never a study seed), a short budget, 2% of the training
split held out for the choice (the ``val/`` split the endpoint reads is never seen). The rule,
fixed here: each variant takes the lr with the best pilot validation top-1 at the pilot's end;
ties go to the lower lr; a diverged or failed pilot run ranks last. The study's runs refuse to
start until every pilot run has an outcome (:func:`pilot_step`, called by
:func:`harness.reproduce.run.reproduce`), then run at each variant's lr, written into the study's
grid (one sub-grid per variant) and its frozen protocol; the choice is written beside the summary
(``<study>-lr-pilot.json``). Seeds come from a power calculation (:mod:`.power`) at an assumed
spread; the GPU-hours ``--plan`` prints take each variant's training rate as the slower of the GPU
(the H100 throughput measured in ``benchmarks/results/gpu-h100-a.json`` scaled by the cost model's
MACs at 160 px) and its loader processes (the per-core rate of the study's own input pipeline measured
in ``benchmarks/results/loader_rate.json``, times the processes a trial's CPUs give) (:func:`rates`,
:func:`gpu_hours`). The study runs in parts of 4 seeds each (every variant in each part, so every
finished part is a balanced, paired set).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from search_space.cost_model import estimate_flops
from trials.status import TrialStatus

from . import power
from .studies.common import Run, grid_spec, reproduction_study_name, subset_name, variant_config

SCALE = "imagenet"
CLUSTER_SCALES = (SCALE,)
IMAGE_SIZE = 160  # S3 10x10 = 100 tokens, S4 5x5 = 25; ViT-REL and CaiT at patch 16: 100
MATCH_TOLERANCE = 0.02  # every layout within 2% of CoAtNet-0 in parameters and FLOPs (ViT-REL: parameters)

# The power calculation (pre-registered): the smallest difference worth detecting, the assumed spread.
DIFFERENCE = 0.3  # points of top-1
# An assumption, not a measurement: seed-to-seed standard deviations of ImageNet-1k top-1 for one
# recipe are commonly reported at about 0.1-0.2 points; 0.12 is taken here. Runs of two variants on
# one seed are treated as independent (the conservative case: sharing a seed's data order can only
# correlate them positively and shrink the paired spread).
RUN_SD = 0.12
MARGIN = 0.3  # points: the '~' and '>=' margins, the difference the seeds are powered for
LARGE_MARGIN = 2.0  # points: what the paper's "much better" ('>>') needs at this scale

PILOT_SEEDS = (1000,)  # never a study seed (those are 0..n-1)
PILOT_VAL_FRACTION = 0.02  # held out of train/ for the pilot's choice (ImageNet-1k: 25,623 images)
PART_SEEDS = 4  # seeds per part: every variant on 4 seeds
# One trial per GPU, 8 CPU cores for its ImageFolder loader processes (a test sets this to none).
TRIAL_RESOURCES: dict[str, float] = {"cpus": 8, "gpus": 1}
# Each trial's cost measurement (as every reproduction's: throughput at batch 32, no latency; a test turns it off).
MEASURE: dict[str, Any] = {"latency": False, "repeats": 2, "batch_size": 32}

# Reference sizes: (training images, validation images).
REFERENCE_SIZES = {"ImageNet-1k": (1_281_167, 50_000), "ImageNet-100": (126_689, 5_000)}
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class Throughput:
    """A measured training throughput: bf16 images per second at ``macs`` multiply-adds per image
    (the cost model's FLOPs: one multiply-add counts one)."""

    model: str
    images_per_s: float
    macs: float
    source: str


# Measured on one H100 (benchmarks/results/gpu-h100-a.json, rows "archsearch", eager, bf16, batch
# 128, 224 px; a test holds these to the file). Eager, not regional-compiled (2,871 and 1,724 img/s):
# the estimate should not assume a compile every trial may not get.
THROUGHPUT = {
    "coatnet": Throughput("coatnet_0", 2129.814907985583, 4.168849408e9,
                          "gpu-h100-a.json row coatnet_0 (archsearch, eager, bf16, batch 128)"),
    "cait": Throughput("cait_s24", 1225.3088867747952, 9.346529664e9,
                       "gpu-h100-a.json row cait_s24 (archsearch, eager, softmax in input dtype, bf16, batch 128)"),
}  # fmt: skip
EVAL_COST = 1 / 3  # a forward pass (validation) costs about a third of a training step


@dataclass(frozen=True)
class LoaderRate:
    """A measured input-pipeline rate: images one DataLoader process decodes and transforms per second of
    its CPU core (``pipeline``: the row of ``benchmarks/results/loader_rate.json``)."""

    pipeline: str
    images_per_s: float
    source: str


# Measured on one core of this project's CPU machine (benchmarks/results/loader_rate.json, medians of images
# per CPU-second; a test holds these to the file and each row's recipe to the studies'): JPEG decode and the
# study's per-sample transforms at 160 px, collated, on the CPU. A cluster node's cores may be faster or
# slower; the JPEGs there decode on the CPU with ``data.gpu_decode: false`` (on CUDA the default decodes them
# with nvJPEG and runs the per-sample transforms on the GPU in the training process: not measured yet).
LOADER_RATE = {
    "cait": LoaderRate("cait train", 320.1, "loader_rate.json row 'cait train' (decode, RandomResizedCrop 160, flip, "
                       "RandAugment (2, 9); MixUp/CutMix run on the GPU)"),
    "coatnet": LoaderRate("coatnet train", 449.1, "loader_rate.json row 'coatnet train' (decode, resize 183, centre "
                          "crop 160: no augmentation)"),
}  # fmt: skip
EVAL_LOADER_RATE = LoaderRate("validation", 467.8,
                              "loader_rate.json row 'validation' (decode, resize 183, centre crop 160)")  # fmt: skip

COATNET: dict[str, Any] = {
    "epochs": 100,  # the paper's Fig. 1: 300; the endpoint is read at a training loss, not at the end
    "pilot_epochs": 10,
    "batch_size": 256,
    "lrs": (5e-4, 1e-3, 2e-3),  # around the paper's peak 1e-3
    "reference_lr": 1e-3,
    "warmup_epochs": 2,
    "level": 1.0,  # nats of running training loss
}
CAIT: dict[str, Any] = {
    "epochs": 100,  # Table 1: 400
    "pilot_epochs": 10,
    "batch_size": 256,
    "lrs": (1.25e-4, 2.5e-4, 5e-4),  # around DeiT's 5e-4 x 256/512
    "reference_lr": 2.5e-4,
    "warmup_epochs": 5,
    "wrapped_scale": "small",  # the study's variants and claims as at --scale small: width 192, depths 12, 24
}


@dataclass(frozen=True)
class ClusterRun(Run):
    """A study at a cluster scale: its learning-rate ``pilot`` grid study (run first, never pooled
    into the summary), the pilot's lr grid, and the lr each variant runs at (None: not chosen yet,
    the plan's placeholder)."""

    pilot: dict[str, Any] = field(default_factory=dict)
    lrs: tuple[float, ...] = ()
    chosen: dict[str, float] | None = None
    family: str = "coatnet"


def require_imagefolder(dataset: str, data_dir: str | None) -> None:
    """``--scale imagenet`` trains on the user's ImageFolder: anything else is refused in one line."""
    if dataset != "imagefolder" or not data_dir:
        raise ValueError(
            f"--scale {SCALE} trains on your ImageFolder (ImageNet-1k, or ImageNet-100 as the fallback): "
            "give --dataset imagefolder --data-dir DIR (DIR/train/<class>/..., DIR/val/<class>/...)"
        )


def folder_counts(data_dir: str | None) -> dict[str, int] | None:
    """Images under ``train/`` and ``val/`` and the class folders of ``train/`` (None: no such folder)."""
    root = Path(data_dir or "")
    if not (root / "train").is_dir():
        return None
    counts = {"classes": 0, "train_images": 0, "val_images": 0}
    for split in ("train", "val"):
        if not (root / split).is_dir():
            continue
        for entry in os.scandir(root / split):
            if not entry.is_dir():
                continue
            counts["classes"] += split == "train"
            counts[f"{split}_images"] += sum(
                1 for f in os.scandir(entry.path) if f.name.lower().endswith(IMAGE_SUFFIXES)
            )
    return counts


# -- specs ------------------------------------------------------------------------------------


def _with_lrs(spec: dict[str, Any], seeds: dict[str, range], lrs: dict[str, float]) -> dict[str, Any]:
    """``spec`` with each variant on its own seeds at its own lr: one sub-grid per variant."""
    out = {**spec, "params": {**spec["params"], "lr": {"choice": sorted(set(lrs.values()))}}}
    out["params"]["seed"] = {"choice": list(range(max(len(s) for s in seeds.values())))}
    out["search"] = {
        **spec["search"],
        "grid": [{"variant": [v], "seed": list(s), "lr": [lrs[v]]} for v, s in seeds.items()],
        "n_trials": sum(len(s) for s in seeds.values()),
    }
    out["training"] = {k: v for k, v in spec["training"].items() if k != "lr"}
    return out


def _cluster_parts(whole: dict[str, Any], seeds: int, lrs: dict[str, float]) -> tuple[dict[str, Any], ...]:
    """The study in parts of :data:`PART_SEEDS` seeds, every variant in each (paired, balanced)."""
    parts = []
    for index, start in enumerate(range(0, seeds, PART_SEEDS), start=1):
        block = range(start, min(seeds, start + PART_SEEDS))
        part = _with_lrs(whole, {v: block for v in lrs}, lrs)
        part["params"]["seed"] = whole["params"]["seed"]
        parts.append({**part, "name": f"{whole['name']}-part{index}"})
    return tuple(parts)


def _pilot_spec(whole: dict[str, Any], variants: list[str], settings: dict[str, Any]) -> dict[str, Any]:
    """The learning-rate pilot: every variant x the lr grid on the pilot seeds, a short budget, the
    choice made on a held-out part of train/ (never on the val/ split the study's endpoint reads)."""
    runs = len(variants) * len(settings["lrs"]) * len(PILOT_SEEDS)
    return {
        **whole,
        "name": f"{whole['name']}-lr-pilot",
        "variants": {v: whole["variants"][v] for v in variants},
        "data": {**whole["data"], "val_fraction": PILOT_VAL_FRACTION},
        "training": {
            **{k: v for k, v in whole["training"].items() if k != "lr"},
            "epochs": settings["pilot_epochs"],
            "warmup_epochs": min(whole["training"].get("warmup_epochs", 0), settings["pilot_epochs"] - 1),
        },
        "params": {
            "variant": {"choice": list(variants)},
            "seed": {"choice": list(PILOT_SEEDS)},
            "lr": {"choice": list(settings["lrs"])},
        },
        "search": {k: v for k, v in whole["search"].items() if k != "grid"} | {"n_trials": runs},
    }


def _resources(spec: dict[str, Any]) -> dict[str, Any]:
    search = {k: v for k, v in spec["search"].items() if k != "resources"}
    if TRIAL_RESOURCES:
        search["resources"] = dict(TRIAL_RESOURCES)
    return {**spec, "search": search, "measure": dict(MEASURE)}


def powered_seeds(claims: int, *, interaction: bool = False) -> int:
    """Seeds per variant for :data:`DIFFERENCE` at Holm's strictest level over ``claims``; with an
    interaction claim (a difference of differences: twice the variance), for that claim's spread."""
    sd = power.paired_sd(RUN_SD) * (2**0.5 if interaction else 1)
    return power.seeds_for(DIFFERENCE, sd, power.holm_strictest(claims))


def power_note(claims: int, seeds: int, *, interaction: bool = False) -> str:
    sd = power.paired_sd(RUN_SD)
    lines = (
        f"Seeds (power calculation, {power.POWER:.0%} power at Holm's strictest level, "
        f"`harness/reproduce/power.py`): the smallest difference worth detecting is {DIFFERENCE:g} points; "
        f"the seed-to-seed sd of one run's top-1 is ASSUMED to be {RUN_SD:g} points (commonly reported at "
        "about 0.1-0.2 for ImageNet-1k, not measured here), runs of two variants on one seed independent "
        f"(the conservative case), so the per-seed difference varies by {sd:.3g}: "
        + power.power_statement(DIFFERENCE, sd, claims, seeds)
    )
    if interaction:
        lines += (
            f"; the interaction claim's per-seed value (a difference of differences) varies by {sd * 2**0.5:.3g}: "
            + power.power_statement(DIFFERENCE, sd * 2**0.5, claims, seeds)
        )
    worse = power.seeds_for(DIFFERENCE, power.paired_sd(0.2) * (2**0.5 if interaction else 1),
                            power.holm_strictest(claims))  # fmt: skip
    return lines + f". Were the sd 0.2 points, {worse} seeds would be needed. " + REESTIMATION_RULE


# The seed re-estimation rule, registered with every imagenet-scale protocol before any run.
SEED_CAP = 30  # seeds per variant the rule may raise a study to (the small scale's focus pair runs 30)
REESTIMATION_RULE = (
    f"Seed re-estimation, registered before any run: after the first part ({PART_SEEDS} seeds per variant), each "
    "claim's per-seed sd is estimated from it; where one exceeds the sd assumed here, the study's seeds become "
    "the fewest at which every claim reaches 80% power at Holm's strictest level for its target (the paper's "
    f"difference where reported, else the margin) at the larger sd, at most {SEED_CAP} and never fewer than "
    "planned (`reestimated_seeds`); the count is given with --seeds before the second part runs, and the summary "
    "states it."
)

# CaiT Table 1: ImageNet top-1 at depths 12/18/24/36 as the paper reports them (the residual-schemes study's
# ranking note quotes the same rows). A variant ``d<depth>-<scheme>`` (``+ln``: CaiT's own form) reads its row.
CAIT_TABLE_1 = {
    "layerscale": {12: 80.5, 18: 81.7, 24: 82.4, 36: 82.9},
    "fixup": {12: 80.7, 18: 82.0, 24: 82.3, 36: 82.4},
    "t-fixup": {12: 79.4, 18: 81.7, 24: 81.5, 36: 82.1},
    "scalar": {12: 80.4, 18: 81.6, 24: 81.1, 36: 81.6},
    "rezero": {12: 78.3, 18: 80.1, 24: 80.8, 36: 81.6},
    "prenorm": {12: 79.9, 18: 80.1, 24: 78.9, 36: 78.9},  # the DeiT baseline (failed at 24 and 36)
    "none": {12: 79.9, 18: 80.1, 24: 78.9, 36: 78.9},
}


def paper_value(side: str) -> float | None:
    """The paper's top-1 for a variant (``d24-layerscale``), or for ``"A - B"`` its difference; None where
    CaiT's Table 1 reports no such model (a Xavier-initialised control, a class-attention split)."""
    if " - " in side:
        a, b = (paper_value(part.strip()) for part in side.split(" - ", 1))
        return None if a is None or b is None else a - b
    match = re.fullmatch(r"d(\d+)-(.+?)(\+ln)?", side)
    if not match:
        return None
    return CAIT_TABLE_1.get(match[2], {}).get(int(match[1]))


def paper_difference(claim: tuple[str, str, str]) -> float | None:
    """The paper's reported A - B for a claim (points of ImageNet top-1), or None."""
    a, b = paper_value(claim[0]), paper_value(claim[2])
    return None if a is None or b is None else round(a - b, 6)


def _claim_target(claim: tuple[str, str, str]) -> tuple[float, str]:
    """What a claim's seeds are powered for: the paper's difference, or (none reported) the margin's."""
    reported = paper_difference(claim)
    if reported is not None:
        return reported, f"the paper's {reported:+.1f}"
    relation = claim[1]
    if relation == "~":
        return 0.0, "no difference (equivalence)"
    return {">": DIFFERENCE, ">=": 0.0, ">>": LARGE_MARGIN + DIFFERENCE}[relation], "none reported: the margin's"


def claim_seeds(claims: Sequence[tuple[str, str, str]], sd: float) -> dict[tuple[str, str, str], int | None]:
    """Each claim's fewest seeds for 80% power at Holm's strictest level at its target (``_claim_target``),
    None beyond :data:`SEED_CAP`; an interaction's ``"A - B"`` sides vary by sqrt(2) x ``sd``."""
    alpha = power.holm_strictest(len(claims))
    needs = {}
    for claim in claims:
        target, _ = _claim_target(claim)
        spread = sd * (2**0.5 if " - " in claim[0] else 1)
        needs[claim] = power.seeds_for_claim(claim[1], target, spread, alpha, MARGIN, LARGE_MARGIN, most=SEED_CAP)
    return needs


def reestimated_seeds(planned: int, claims: Sequence[tuple[str, str, str]], observed_sd: float) -> int:
    """The registered rule (:data:`REESTIMATION_RULE`): the seeds after the first part, from the larger of the
    assumed and the observed per-seed sd; at most :data:`SEED_CAP`, never fewer than ``planned``."""
    sd = max(power.paired_sd(RUN_SD), observed_sd)
    needs = [n if n is not None else SEED_CAP for n in claim_seeds(claims, sd).values()]
    return max(planned, min(SEED_CAP, max(needs, default=planned)))


def study_seeds(seeds: int, claims: Sequence[tuple[str, str, str]], *, interaction: bool = False) -> int:
    """A cluster study's seeds: at least the margin's power calculation (:func:`powered_seeds`) and each
    claim's own need against its target (:func:`claim_seeds`) where that is at most :data:`SEED_CAP`."""
    within_cap = [n for n in claim_seeds(claims, power.paired_sd(RUN_SD)).values() if n is not None]
    return max(seeds, powered_seeds(len(claims), interaction=interaction), *within_cap)


CAIT_SOURCE = "CaiT Table 1's ImageNet top-1 at that depth, where it has both models"
COATNET_SOURCE = "none here: CoAtNet's Fig. 1 gives no per-layout numbers this protocol reads"


def paper_power_note(claims: Sequence[tuple[str, str, str]], seeds: int, source: str = CAIT_SOURCE) -> str:
    """Each claim's power at ``seeds`` against the paper's reported difference (or the margin where it
    reports none), exactly as the verdict decides it (TOST for '~'), at Holm's strictest level."""
    sd = power.paired_sd(RUN_SD)
    alpha = power.holm_strictest(len(claims))
    needs = claim_seeds(claims, sd)
    parts = []
    for claim in claims:
        target, said = _claim_target(claim)
        spread = sd * (2**0.5 if " - " in claim[0] else 1)
        at = power.claim_power(claim[1], target, spread, seeds, alpha, MARGIN, LARGE_MARGIN)
        need = f"{needs[claim]} seeds for 80%" if needs[claim] else f"more than {SEED_CAP} seeds for 80%"
        parts.append(f"`{' '.join(claim)}`: {said} -> {at:.0%} ({need})")
    return (
        f"Power per claim with {seeds} seeds at Holm's strictest level ({alpha:.3g}), each claim as its verdict "
        f"decides it ('~' by TOST, computed exactly), against the paper's reported difference ({source}), else "
        "the margin's: " + "; ".join(parts) + "."
    )


def _pilot_note(settings: dict[str, Any], chosen: dict[str, float] | None) -> str:
    grid = ", ".join(f"{lr:g}" for lr in settings["lrs"])
    head = (
        f"Learning rate per variant, from the pilot (its own grid study, run first): every variant x lr "
        f"{{{grid}}} on seed {', '.join(map(str, PILOT_SEEDS))} (not a study seed), {settings['pilot_epochs']} "
        f"epochs, choice on {PILOT_VAL_FRACTION:.0%} of train/ held out (val/ unseen). Rule, fixed before the "
        "pilot: the best pilot validation top-1 at its end; ties to the lower lr; a diverged or failed run "
        "ranks last. The study's runs refuse to start until every pilot run has an outcome"
    )
    if chosen is None:
        return head + (
            f"; not chosen yet, so this plan shows lr {settings['reference_lr']:g} for every variant as a placeholder."
        )
    return head + ". Chosen: " + ", ".join(f"{v} {lr:g}" for v, lr in chosen.items()) + "."


def cluster_run(
    run: Run,
    *,
    family: str,
    settings: dict[str, Any],
    seeds: int,
    pilot: dict[str, dict[str, float]] | None,
    only: tuple[str, ...],
) -> ClusterRun:
    """The cluster-scale run of a study definition's ``run`` (its protocol's notes the study's own):
    ``only``'s variants, each variant's lr (the pilot's choice, or the placeholder), the parts, the
    pilot spec, and the pilot's note before the study's."""
    spec = run.spec
    variants = list(spec["variants"])
    for name in only:
        if name not in variants:
            raise ValueError(
                f"--only {name}: {spec['name']} has no variant {name!r}; its variants: {', '.join(variants)}"
            )
    chosen_variants = [v for v in variants if not only or v in only]
    name = subset_name(spec["name"], chosen_variants) if only else spec["name"]
    spec = _resources({**spec, "name": name, "variants": {v: spec["variants"][v] for v in chosen_variants}})
    spec["params"] = {**spec["params"], "variant": {"choice": chosen_variants}}
    pilot_spec = _pilot_spec(spec, chosen_variants, settings)
    chosen = (pilot or {}).get(pilot_spec["name"])
    if chosen is not None and set(chosen) != set(chosen_variants):
        raise ValueError(f"the pilot's choice for {pilot_spec['name']} does not name every variant of the study")
    lrs = chosen or {v: settings["reference_lr"] for v in chosen_variants}
    whole = _with_lrs(spec, {v: range(seeds) for v in chosen_variants}, lrs)
    protocol = replace(
        run.protocol,
        study=name,
        lr=lrs.get("CCTT", settings["reference_lr"]) if family == "coatnet" else settings["reference_lr"],
        seeds=seeds,
        notes=(_pilot_note(settings, chosen), *run.protocol.notes),
        gpus=TRIAL_RESOURCES.get("gpus", 0.0),
        more_seeds={},
        only=tuple(chosen_variants) if only else (),
    )
    models = {v: m for v, m in run.variant_models.items() if v in chosen_variants}
    return ClusterRun(whole, protocol, models, _cluster_parts(whole, seeds, lrs), pilot=pilot_spec,
                      lrs=tuple(settings["lrs"]), chosen=chosen, family=family)  # fmt: skip


def imagefolder_data(data_dir: str, settings: dict[str, Any], augment: dict[str, Any]) -> dict[str, Any]:
    return {"name": "imagefolder", "data_dir": data_dir, "batch_size": settings["batch_size"],
            "image_size": IMAGE_SIZE, "augment": augment}  # fmt: skip


def cait_run(
    small: Run,
    seeds: int,
    dataset: str,
    data_dir: str | None,
    pilot: dict[str, dict[str, float]] | None,
    only: tuple[str, ...],
    *,
    interaction: bool,
) -> ClusterRun:
    """A CaiT study at 160 px on the user's ImageFolder, from the same study at ``--scale small``
    (``small``: its variants and claims, width 192, depths 12 and 24), at patch 16 on 160 px (100
    tokens), DeiT's augmentation and the pilot's lr per variant (the ``imagenet`` scale of
    cait-depth's and cait-residual-schemes' definitions)."""
    require_imagefolder(dataset, data_dir)
    settings = CAIT
    claims = small.protocol.claims
    seeds = study_seeds(seeds, claims, interaction=interaction)
    prefix = small.spec["name"].removesuffix(f"-{settings['wrapped_scale']}-mnist5k")
    name = reproduction_study_name(prefix, SCALE, dataset)
    base_model = {**small.spec["base_model"], "image_size": IMAGE_SIZE, "patch_size": 16}
    augment = {"random_crop": True, "hflip": True, "randaugment": [2, 9], "mixup_alpha": 0.8, "cutmix_alpha": 1.0}
    training = {**small.spec["training"], "epochs": settings["epochs"], "lr": settings["reference_lr"],
                "warmup_epochs": settings["warmup_epochs"], "weight_decay": 0.05, "label_smoothing": 0.1}  # fmt: skip
    data = imagefolder_data(data_dir, settings, augment)
    variants, objectives = small.spec["variants"], small.spec["objectives"]
    spec = grid_spec(name, family="cait", base_model=base_model, data=data, training=training,
                     variants=variants, seeds=seeds, objectives=objectives)  # fmt: skip
    depths = sorted({v.get("depth") for v in small.spec["variants"].values() if v.get("depth")})
    protocol = replace(
        small.protocol,
        study=name,
        dataset=dataset,
        image_size=IMAGE_SIZE,
        train_size=None,
        epochs=settings["epochs"],
        metric="final validation top-1 on the folder's val/ split (no test split), higher is better",
        margin=MARGIN,
        large_margin=LARGE_MARGIN,
        failure_rule=None,  # see the note below
        first_seed=0,  # no earlier run at this scale: a control's fresh seeds are any seeds here
    )
    width, heads = small.spec["base_model"].get("embed_dim"), small.spec["base_model"].get("num_heads")
    notes = (
        f"Model: CaiT at width {width} ({heads} heads, XXS's), patch 16 at {IMAGE_SIZE} px: "
        f"{(IMAGE_SIZE // 16) ** 2} tokens; depths "
        f"{', '.join(map(str, depths))} (Table 1: 12, 18, 24, 36); the variants and claims are the study's own "
        f"(as at --scale {settings['wrapped_scale']}), every variant in the run.",
        f"Budget: {settings['epochs']} epochs (Table 1: 400), DeiT's recipe at batch {settings['batch_size']}: "
        f"RandomResizedCrop, flip, RandAugment (2, 9), MixUp 0.8, CutMix 1.0, label smoothing 0.1, weight decay "
        f"0.05, {settings['warmup_epochs']} warm-up epochs; gradient clipping as the study sets it.",
        power_note(len(claims), seeds, interaction=interaction),
        paper_power_note(claims, seeds),
        f"Margins: '~' and '>=' +-{MARGIN:g} points, '>>' {LARGE_MARGIN:g}; all fixed before any run.",
        *small.protocol.notes,
        "Failures to learn are not counted apart at this scale: the analysis reads the rule's class count from "
        "the dataset's name, which an ImageFolder does not give (it would take 10, and flag every healthy run "
        "whose MixUp training loss ends above 2.19); a run that fails shows in its variant's accuracy.",
    )
    run = Run(spec, replace(protocol, notes=notes), dict(small.variant_models))
    return cluster_run(run, family="cait", settings=settings, seeds=seeds, pilot=pilot, only=only)


# -- the pilot --------------------------------------------------------------------------------


def choose_lrs(trials, pilot: dict[str, Any]) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """(variant -> lr, one row per pilot run) by the pre-registered rule, from the pilot's stored
    trials (``config.name``, ``config.training.lr``, ``config.seed``, ``status``, ``top1``).

    Refuses (ValueError) until every pilot run has an outcome (completed, diverged or failed), or
    where no lr of a variant completed."""
    finished = (TrialStatus.COMPLETED, TrialStatus.DIVERGED, TrialStatus.FAILED)
    rows = []
    if len(trials):
        for _, t in trials.iterrows():
            status = str(t["status"])
            if status not in finished:
                continue
            top1 = float(t["top1"]) if status == TrialStatus.COMPLETED and t["top1"] == t["top1"] else None  # NaN: none
            rows.append({"variant": str(t["config.name"]), "lr": float(t["config.training.lr"]),
                         "seed": int(t["config.seed"]), "status": status, "top1": top1})  # fmt: skip
    points = {(v, lr, s) for v in pilot["params"]["variant"]["choice"] for lr in pilot["params"]["lr"]["choice"]
              for s in pilot["params"]["seed"]["choice"]}  # fmt: skip
    done = {(r["variant"], r["lr"], r["seed"]) for r in rows} & points
    if done != points:
        raise ValueError(
            f"the study's runs refuse to start until its learning-rate pilot {pilot['name']} has completed: "
            f"{len(done)} of its {len(points)} runs have an outcome (the next `reproduce` with this store runs "
            "the rest)"
        )
    chosen = {}
    for variant in pilot["params"]["variant"]["choice"]:
        scores = {}
        for lr in pilot["params"]["lr"]["choice"]:
            values = [r["top1"] for r in rows if r["variant"] == variant and r["lr"] == lr]
            scores[lr] = None if any(v is None for v in values) else sum(values) / len(values)
        ranked = [lr for lr in scores if scores[lr] is not None]
        if not ranked:
            raise ValueError(f"no learning rate of the pilot trained {variant} to the end: the study cannot choose one")
        chosen[variant] = max(ranked, key=lambda lr: (scores[lr], -lr))  # best top-1, ties to the lower lr
    return chosen, sorted(rows, key=lambda r: (r["variant"], r["lr"], r["seed"]))


# -- cost -------------------------------------------------------------------------------------


def loader_processes() -> int:
    """DataLoader processes of a cluster trial: its CPUs (:data:`TRIAL_RESOURCES`) less the one the training
    process keeps, at least one (:func:`trials.data.bundle.auto_loader_processes`' rule on an accelerator, not
    imported: it bounds the count by this machine's cores, not the cluster node's)."""
    return max(1, math.floor(TRIAL_RESOURCES.get("cpus", 1)) - 1)


@dataclass(frozen=True)
class Rates:
    """A variant's training and validation images/s on one GPU: each the slower of the GPU's and the loader's."""

    gpu: float  # training images/s the GPU sustains at the variant's MACs
    loader: float  # training images/s the trial's loader processes deliver
    eval_gpu: float  # validation images/s of the GPU (a forward pass: a third of a step)
    eval_loader: float  # validation images/s of the loader processes
    family: str

    @property
    def train(self) -> float:
        return min(self.gpu, self.loader)

    @property
    def eval(self) -> float:
        return min(self.eval_gpu, self.eval_loader)

    @property
    def limit(self) -> str:
        """Which of the two sets the training rate: ``"loader"`` or ``"gpu"`` (a tie goes to the GPU)."""
        return "loader" if self.loader < self.gpu else "gpu"

    def note(self, variant: str) -> str:
        """The line ``--plan`` prints: both rates, and which one limits."""
        processes, per_core = loader_processes(), LOADER_RATE[self.family].images_per_s
        loader = f"{processes} loader processes x {per_core:,.0f} img/s/core = {self.loader:,.0f} img/s"
        gpu = f"GPU {self.gpu:,.0f} img/s at {IMAGE_SIZE} px"
        if self.limit == "loader":
            return f"training rate {variant}: loader-bound: {loader} < {gpu}"
        return f"training rate {variant}: GPU-bound: {gpu} <= {loader}"

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_img_s": round(self.gpu, 1), "loader_img_s": round(self.loader, 1), "limit": self.limit,
                "eval_gpu_img_s": round(self.eval_gpu, 1), "eval_loader_img_s": round(self.eval_loader, 1)}  # fmt: skip


def rates(macs: float, family: str) -> Rates:
    """A variant's rates at ``macs`` multiply-adds per image: the GPU's, the family's reference row scaled by
    the MACs ratio (an estimate: a smaller model's utilisation is lower, so this is optimistic for it); the
    loader's, the measured per-core rate of the family's pipeline x :func:`loader_processes`."""
    measured = THROUGHPUT[family]
    gpu = measured.images_per_s * measured.macs / macs
    processes = loader_processes()
    return Rates(gpu=gpu, loader=LOADER_RATE[family].images_per_s * processes, eval_gpu=gpu / EVAL_COST,
                 eval_loader=EVAL_LOADER_RATE.images_per_s * processes, family=family)  # fmt: skip


def gpu_hours(macs: float, family: str, train_images: int, val_images: int, epochs: int, runs: int) -> float:
    """Estimated H100-hours of ``runs`` runs of a model at ``macs`` per image: each epoch ``train_images`` at
    the slower of the GPU's and the loader's training rate (:func:`rates`), and a validation pass over
    ``val_images`` at the slower of the GPU's forward rate and the loader's evaluation rate."""
    rate = rates(macs, family)
    seconds = epochs * (train_images / rate.train + val_images / rate.eval)
    return runs * seconds / 3600


def cost(run: ClusterRun, data_dir: str | None) -> dict[str, Any]:
    """GPU-hours of the pilot and the study, at the folder's counted size (where it exists) and at
    ImageNet-1k's and ImageNet-100's; each variant's rates; and the lines ``--plan`` prints."""
    macs = {v: estimate_flops(variant_config(run, v)) for v in run.spec["variants"]}
    pilot_runs = len(run.pilot["params"]["lr"]["choice"]) * len(PILOT_SEEDS)
    sizes = dict(REFERENCE_SIZES)
    counted = folder_counts(data_dir)
    if counted and counted["train_images"]:
        sizes = {f"your folder ({counted['classes']:,} classes)": (counted["train_images"], counted["val_images"]),
                 **sizes}  # fmt: skip
    measured, loader = THROUGHPUT[run.family], LOADER_RATE[run.family]
    variant_rates = {v: rates(m, run.family) for v, m in macs.items()}
    out: dict[str, Any] = {"gpu_hours": {}, "rates": {v: r.to_dict() for v, r in variant_rates.items()},
                           "notes": [r.note(v) for v, r in variant_rates.items()]}  # fmt: skip
    for label, (train, val) in sizes.items():
        study = sum(gpu_hours(m, run.family, train, val, run.protocol.epochs, run.protocol.seeds_of(v))
                    for v, m in macs.items())  # fmt: skip
        pilot_val = round(train * PILOT_VAL_FRACTION)
        pilot = sum(gpu_hours(m, run.family, train - pilot_val, pilot_val, run.pilot["training"]["epochs"], pilot_runs)
                    for m in macs.values())  # fmt: skip
        out["gpu_hours"][label] = {"train_images": train, "val_images": val, "pilot": round(pilot, 1),
                                   "study": round(study, 1), "total": round(pilot + study, 1)}  # fmt: skip
        out["notes"].append(
            f"estimated GPU-hours at {label}, {train:,} training images: pilot {pilot:,.0f} + study {study:,.0f} "
            f"= {pilot + study:,.0f} H100-hours"
        )
    out["notes"].append(
        f"GPU-hours: an estimate, not a measurement: each variant trains at the slower of two rates (the lines "
        f"above). The GPU's: the measured {measured.images_per_s:,.0f} img/s at {measured.macs / 1e9:.2f} GMACs of "
        f"{measured.source} scaled by the cost model's MACs ratio at {IMAGE_SIZE} px (optimistic for a smaller "
        "model; regional compilation measured 1.35x (coatnet_0) and 1.41x (cait_s24) faster on these rows, which a "
        f"loader-bound variant does not gain). The loader's: {loader.images_per_s:,.0f} img/s per core, "
        f"{loader.source}, measured on one core of this project's CPU machine, not a cluster node's, x "
        f"{loader_processes()} loader processes ({TRIAL_RESOURCES.get('cpus', 1):g} CPUs per trial less the training "
        "process's), JPEGs decoded on the CPU (`data.gpu_decode: false`; on CUDA the default decodes them with "
        "nvJPEG and transforms each sample on the GPU in the training process, a path not measured yet). Then x "
        f"epochs x images, + a validation pass (the GPU at a third of a step, the loader at "
        f"{EVAL_LOADER_RATE.images_per_s:,.0f} img/s per core), x runs; one trial per GPU"
    )
    return out
