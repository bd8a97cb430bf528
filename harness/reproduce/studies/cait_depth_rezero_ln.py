"""``cait-depth-rezero-ln``, pre-registered 2026-11-27 (issue 48) on fresh seeds: cait-depth's ReZero
claim against CaiT's ReZero (LayerNorm kept).
"""

from __future__ import annotations

from harness.reproduce import cluster_scale

from .cait_common import cait_base, cait_protocol, cait_settings, control_note, control_spec, failure_rule
from .common import DEFAULT_DATASET, FRESH_SEEDS, Run, reproduction_study_name


def cait_depth_rezero_ln_run(
    scale: str,
    seeds: int,
    dataset: str = DEFAULT_DATASET,
    data_dir: str | None = None,
    pilot: dict[str, dict[str, float]] | None = None,
    only: tuple[str, ...] = (),
) -> Run:
    """cait-depth's ReZero claim with CaiT's ReZero: LayerScale against ReZero with the branch LayerNorm
    kept (``keep_norm``, CaiT section 3, Table A.1) at cait-depth's deepest depth, base and budget, on
    fresh seeds. cait-depth itself keeps the original ReZero (its pre-registered, committed protocol)."""
    if scale in cluster_scale.CLUSTER_SCALES:  # the same study at --scale small, on the user's ImageFolder
        small = cait_depth_rezero_ln_run(cluster_scale.CAIT["wrapped_scale"], seeds, "mnist5k", None)
        return cluster_scale.cait_run(small, seeds, dataset, data_dir, pilot, only, interaction=False)
    settings = cait_settings(scale)
    base = {**cait_base(settings, scale), "ca_depth": 0, "cls_insert_layer": 0, "talking_heads": False}
    d = max(settings["depths"])
    variants = {
        f"d{d}-layerscale": {"depth": d, "layer_scale": "paper"},
        f"d{d}-rezero+ln": {"depth": d, "residual": "rezero", "keep_norm": True},
    }
    claims = ((f"d{d}-layerscale", ">=", f"d{d}-rezero+ln"),)
    name = reproduction_study_name("cait-depth-rezero-ln", scale, dataset)
    spec = control_spec(
        name,
        settings,
        dataset,
        data_dir,
        base,
        {"epochs": settings["epochs"], "lr": settings["lr"], "grad_clip": None},
        variants,
        seeds,
    )
    protocol = cait_protocol(
        name,
        dataset,
        settings,
        seeds,
        claims,
        ranking="CaiT Table 1 at depth 12: LayerScale 80.5, ReZero (CaiT's, with LayerNorm and warm-up) 78.3",
        notes=(
            control_note(
                f"cait-depth's `d{d}-layerscale >= d{d}-rezero`, decided against the original ReZero (no "
                "LayerNorm), which CaiT's Table 1 did not run: CaiT re-normalised it (section 3, Table A.1, "
                "'Rezero with LayerNorm and warmup')"
            ),
            "cait-depth keeps its ReZero as registered and run (changing a committed protocol after its results "
            "would void its verdicts); this study asks its question of CaiT's ReZero instead, with cait-depth's "
            "base model, depth, recipe (warm-up included) and budget unchanged.",
            f"Budget ({settings['epochs']} epochs, lr {settings['lr']:g}, no gradient clipping): cait-depth's.",
        ),
        failure_rule=failure_rule(dataset),
        first_seed=FRESH_SEEDS,
    )
    return Run(spec, protocol)
