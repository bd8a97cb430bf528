"""What the CaiT reproductions share: the per-scale settings (:data:`CAIT_SCALES`), the base model,
the failure rule, the protocol (final test top-1 at 32 px), and the spec and note of issue 48's
controls (pre-registered on fresh seeds).
"""

from __future__ import annotations

import math
from typing import Any

from trials.config.data_config import NUM_CLASSES

from .common import (
    FAILED_LOSS_FRACTION,
    FRESH_SEEDS,
    LARGE_MARGIN,
    MARGIN,
    PREREGISTERED_CONTROLS,
    PREREGISTERED_SECOND_CONTROLS,
    SECOND_FRESH_SEEDS,
    Protocol,
    data_section,
    grid_spec,
)

CAIT_SCALES: dict[str, dict[str, Any]] = {
    "tiny": {"width": 64, "heads": 2, "depths": (2, 4), "split_depth": 4, "train_size": 256, "val_size": 256,
             "epochs": 2, "lr": 1e-3, "scheme_depths": (4,), "scheme_epochs": 2},
    "cpu": {"width": 64, "heads": 2, "depths": (4, 12), "split_depth": 6, "train_size": 1000, "val_size": 1000,
            "epochs": 30, "lr": 1e-3, "scheme_depths": (12,), "scheme_epochs": 20},
    "small": {"width": 192, "heads": 4, "depths": (12, 24), "split_depth": 12, "train_size": 3000,
              "val_size": 1000, "epochs": 150, "lr": 5e-4, "gpus": 0.25, "scheme_depths": (12, 24),
              "scheme_epochs": 150},
    "paper": {"width": 192, "heads": 4, "depths": (12, 18, 24, 36), "split_depth": 24, "train_size": None,
              "val_size": None, "epochs": 400, "lr": 5e-4, "gpus": 1.0, "scheme_depths": (12, 18, 24, 36),
              "scheme_epochs": 400},
}  # fmt: skip

# CaiT Table 1's drop-path rate "adjusted per depth" for the DeiT baseline (a spec line, not a scheme).
ADJUSTED_DROP_PATH = {12: 0.05, 18: 0.10, 24: 0.20, 36: 0.25}
# The residual-schemes study's schemes: Table 1's columns. SkipInit is left out: at alpha = 0 it is
# ReZero's network, so under the same seed its runs would be ReZero's, bit for bit.
TABLE_1_SCHEMES = ("prenorm", "rezero", "fixup", "t-fixup", "scalar", "layerscale")
# The schemes whose original papers drop LayerNorm: CaiT ran them with it (section 3, Table A.1:
# "modified version of Rezero with LayerNorm and warmup"), so the study runs both versions and its
# claims are on CaiT's (``+ln``); the originals are reported beside them.
RENORMALISED_SCHEMES = ("rezero", "fixup", "t-fixup")


def cait_settings(scale: str) -> dict[str, Any]:
    if scale not in CAIT_SCALES:
        raise ValueError(f"unknown scale {scale!r}; use one of {', '.join(CAIT_SCALES)}")
    return CAIT_SCALES[scale]


def cait_base(settings: dict[str, Any], scale: str) -> dict[str, Any]:
    if scale == "paper":
        return {"preset": "cait_xxs24", "embed_dim": settings["width"], "num_heads": settings["heads"]}
    return {"preset": "cait_tiny32", "embed_dim": settings["width"], "num_heads": settings["heads"]}


def num_classes(dataset: str) -> int:
    return NUM_CLASSES.get(dataset, 10)


def failure_rule(dataset: str) -> str:
    """When a CaiT run counts as a failure to learn (both CaiT depth studies count these)."""
    chance = 100 / num_classes(dataset)
    return (
        f"final training loss within {FAILED_LOSS_FRACTION:.0%} of ln(classes) = "
        f"{math.log(num_classes(dataset)):.3f}, or final accuracy at most chance ({chance:g}%) + 2 points"
    )


def cait_protocol(
    name: str,
    dataset: str,
    settings: dict[str, Any],
    seeds: int,
    claims: tuple[tuple[str, str, str], ...],
    *,
    ranking: str,
    notes: tuple[str, ...],
    failure_rule: str | None = None,
    first_seed: int = 0,
) -> Protocol:
    """What both CaiT studies commit to: final test top-1 at 32 px, the scale's data and budget."""
    return Protocol(
        study=name,
        kind="accuracy",
        dataset=dataset,
        image_size=32,
        train_size=settings["train_size"],
        epochs=settings["epochs"],
        seeds=seeds,
        lr=settings["lr"],
        metric="final test top-1 (validation top-1 where the dataset keeps no test split), higher is better",
        level=None,
        margin=MARGIN,
        large_margin=LARGE_MARGIN,
        claims=claims,
        ranking=ranking,
        notes=notes,
        failure_rule=failure_rule,
        gpus=settings.get("gpus", 0.0),
        first_seed=first_seed,
    )


def control_spec(
    name: str,
    settings: dict[str, Any],
    dataset: str,
    data_dir: str | None,
    base_model: dict[str, Any],
    training: dict[str, Any],
    variants: dict[str, Any],
    seeds: int,
    first_seed: int = FRESH_SEEDS,
) -> dict[str, Any]:
    """The grid spec of one of issue 48's CaiT controls: the controlled study's data, top-1 and FLOPs as
    objectives, on :data:`FRESH_SEEDS` (what the three controls share; their models and budgets differ)."""
    data = data_section(dataset, data_dir, settings, train_size=settings["train_size"], image_size=None)
    return grid_spec(
        name,
        family="cait",
        base_model=base_model,
        data=data,
        training=training,
        variants=variants,
        seeds=seeds,
        objectives={"top1": "max", "flops": "min"},
        gpus=settings.get("gpus", 0.0),
        first_seed=first_seed,
    )


def second_control_note(what: str) -> str:
    """Issue 59's controls: pre-registered on their own date, on their own fresh seeds."""
    return (
        f"Pre-registered on {PREREGISTERED_SECOND_CONTROLS} (issue 59), before any of its runs, as a control for "
        f"{what}; fresh seeds from {SECOND_FRESH_SEEDS} (no earlier run used them), every variant on the same "
        "seeds, so each claim is paired. Its own study and Holm family: no committed verdict is re-adjusted."
    )


def control_note(what: str) -> str:
    return (
        f"Pre-registered on {PREREGISTERED_CONTROLS} (issue 48), before any of its runs, as a control for {what}; "
        f"fresh seeds from {FRESH_SEEDS} (no committed run used them: those ran seeds 0-29), every variant on the "
        "same seeds, so each claim is paired. Its own study and Holm family: the committed verdicts are not "
        "re-adjusted or replaced, and stand beside this one."
    )
