"""``cait-residual-schemes``, pre-registered: CaiT Table 1's columns (the residual schemes) at depth."""

from __future__ import annotations

from harness.reproduce import cluster_scale

from .cait_common import (
    ADJUSTED_DROP_PATH,
    RENORMALISED_SCHEMES,
    TABLE_1_SCHEMES,
    cait_base,
    cait_protocol,
    cait_settings,
    failure_rule,
)
from .common import DEFAULT_DATASET, Run, data_section, grid_spec, reproduction_study_name


def cait_residual_schemes_run(
    scale: str,
    seeds: int,
    dataset: str = DEFAULT_DATASET,
    data_dir: str | None = None,
    pilot: dict[str, dict[str, float]] | None = None,
    only: tuple[str, ...] = (),
) -> Run:
    """CaiT Table 1's columns on the DeiT baseline: residual scheme x depth, x seeds.

    Every scheme trains with the same recipe (the scale's budget, no gradient clipping, no
    drop-path at the cpu scale), so only the residual scheme differs. The claims are Table 1's
    orderings at depth: LayerScale beats the baseline and is not worse than any other scheme.

    At the ``imagenet`` scale: this study at ``--scale small`` (its variants and claims), at 160 px on
    the user's ImageFolder (:func:`harness.reproduce.cluster_scale.cait_run`: DeiT's recipe, seeds
    at least the power calculation's, each variant at its learning-rate pilot's lr).
    """
    if scale in cluster_scale.CLUSTER_SCALES:
        small = cait_residual_schemes_run(cluster_scale.CAIT["wrapped_scale"], seeds, "mnist5k", None)
        return cluster_scale.cait_run(small, seeds, dataset, data_dir, pilot, only, interaction=False)
    settings = cait_settings(scale)
    base = {**cait_base(settings, scale), "ca_depth": 0, "cls_insert_layer": 0, "talking_heads": False}
    eps = {"scalar": {"layer_scale": "paper"}, "layerscale": {"layer_scale": "paper"}}
    variants = {}
    for depth in settings["scheme_depths"]:
        for scheme in TABLE_1_SCHEMES:
            variants[f"d{depth}-{scheme}"] = {"depth": depth, "residual": scheme, **eps.get(scheme, {})}
            if scheme in RENORMALISED_SCHEMES:
                variants[f"d{depth}-{scheme}+ln"] = {"depth": depth, "residual": scheme, "keep_norm": True}
    deep = max(settings["scheme_depths"])
    others = ("fixup+ln", "t-fixup+ln", "rezero+ln", "scalar")
    claims = (
        (f"d{deep}-layerscale", ">", f"d{deep}-prenorm"),
        *((f"d{deep}-layerscale", ">=", f"d{deep}-{other}") for other in others),
    )
    name = reproduction_study_name("cait-residual-schemes", scale, dataset)
    data = data_section(dataset, data_dir, settings, train_size=settings["train_size"], image_size=None)
    epochs = settings["scheme_epochs"]
    training = {"epochs": epochs, "lr": settings["lr"], "grad_clip": None}
    spec = grid_spec(
        name,
        family="cait",
        base_model={**base, "drop_path_rate": 0.0},
        data=data,
        training=training,
        variants=variants,
        seeds=seeds,
        objectives={"top1": "max", "flops": "min"},
        gpus=settings.get("gpus", 0.0),
    )
    protocol = cait_protocol(
        name,
        dataset,
        {**settings, "epochs": epochs},
        seeds,
        claims,
        ranking=(
            "ImageNet top-1 at depth 12/18/24/36 (CaiT Table 1): LayerScale 80.5/81.7/82.4/82.9, Fixup "
            "80.7/82.0/82.3/82.4, T-Fixup 79.4/81.7/81.5/82.1, alpha=eps 80.4/81.6/81.1/81.6, ReZero "
            "78.3/80.1/80.8/81.6, baseline 79.9/80.1/78.9 (failed)/78.9 (failed)"
        ),
        notes=(
            f"Schemes: {', '.join(TABLE_1_SCHEMES)} (`archsearch models --residual-schemes`); scalar and "
            "LayerScale at the paper's eps for the depth. SkipInit is not a separate variant: at alpha = 0 it "
            "is ReZero's network, and its runs would be ReZero's bit for bit.",
            f"Two versions of {', '.join(RENORMALISED_SCHEMES)}: the original (no LayerNorm, as its paper) and "
            "CaiT's (`+ln`: the branch LayerNorm kept, `keep_norm`), which CaiT's Table 1 reports (section 3, "
            "Table A.1); the claims are on CaiT's versions, the originals are shown beside them. Initialisation "
            "as each paper says: T-Fixup's Xavier on each d x d projection (not the fused qkv matrix) and on the "
            "encoder only, the classification head as every other scheme's; Fixup's L^-1/2 on the value and "
            "first FFN layers (the layers in series on each branch), not on queries and keys.",
            f"Budget ({epochs} epochs, lr {settings['lr']:g}, no gradient clipping, no drop-path): the same "
            "recipe for every scheme, set before the runs from the time this machine allows (`--plan`).",
            "Table 1's drop-path 'adjusted per depth' baseline is the prenorm scheme with "
            f"`drop_path_rate` {ADJUSTED_DROP_PATH} by depth, a spec line rather than a scheme.",
        ),
        failure_rule=failure_rule(dataset),
    )
    return Run(spec, protocol)
