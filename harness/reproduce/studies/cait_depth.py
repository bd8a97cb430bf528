"""``cait-depth``, pre-registered: CaiT Table 1's question, depth x residual scheme on the DeiT baseline."""

from __future__ import annotations

from harness.reproduce import cluster_scale

from .cait_common import cait_base, cait_protocol, cait_settings, failure_rule
from .common import DEFAULT_DATASET, Run, data_section, grid_spec, reproduction_study_name


def cait_depth_run(
    scale: str,
    seeds: int,
    dataset: str = DEFAULT_DATASET,
    data_dir: str | None = None,
    pilot: dict[str, dict[str, float]] | None = None,
    only: tuple[str, ...] = (),
) -> Run:
    """CaiT Table 1's question on the DeiT baseline: depth x residual scheme, x seeds.

    The baseline has the class token from layer 0, no class attention, no talking heads (DeiT);
    schemes: none (x + F(LN(x))), ReZero (x + alpha F(x), no LayerNorm, alpha at 0, as in the
    ReZero paper) and LayerScale (per-channel, the paper's eps). The primary claim is the
    interaction: LayerScale's gain over no scaling is larger at the deepest depth than at the
    shallowest. Runs that fail to learn are counted (Fisher's exact test), not averaged.

    At the ``imagenet`` scale: this study at ``--scale small`` (its variants and claims), at 160 px on
    the user's ImageFolder (:func:`harness.reproduce.cluster_scale.cait_run`: DeiT's recipe, seeds
    at least the power calculation's, each variant at its learning-rate pilot's lr).
    """
    if scale in cluster_scale.CLUSTER_SCALES:
        small = cait_depth_run(cluster_scale.CAIT["wrapped_scale"], seeds, "mnist5k", None)
        return cluster_scale.cait_run(small, seeds, dataset, data_dir, pilot, only, interaction=True)
    settings = cait_settings(scale)
    base = {**cait_base(settings, scale), "ca_depth": 0, "cls_insert_layer": 0, "talking_heads": False}
    schemes = {
        "none": {"layer_scale": "off"},
        "rezero": {"residual": "rezero"},
        "layerscale": {"layer_scale": "paper"},
    }
    variants = {
        f"d{depth}-{scheme}": {"depth": depth, **values}
        for depth in settings["depths"]
        for scheme, values in schemes.items()
    }
    deep, shallow = max(settings["depths"]), min(settings["depths"])
    claims = (
        (f"d{deep}-layerscale - d{deep}-none", ">", f"d{shallow}-layerscale - d{shallow}-none"),
        (f"d{deep}-layerscale", ">", f"d{deep}-none"),
        (f"d{deep}-layerscale", ">=", f"d{deep}-rezero"),
        (f"d{deep}-layerscale", ">=", f"d{shallow}-layerscale"),
    )
    name = reproduction_study_name("cait-depth", scale, dataset)
    data = data_section(dataset, data_dir, settings, train_size=settings["train_size"], image_size=None)
    training = {"epochs": settings["epochs"], "lr": settings["lr"], "grad_clip": None}  # instability must show
    spec = grid_spec(
        name,
        family="cait",
        base_model=base,
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
        settings,
        seeds,
        claims,
        ranking="LayerScale's gain over plain residuals grows with depth; deep models train with it (CaiT Table 1)",
        notes=(
            "The first claim is the primary one: the depth x scheme interaction, per seed "
            "(LayerScale - none at the deepest depth) - (the same at the shallowest).",
            f"Budget ({settings['epochs']} epochs, lr {settings['lr']:g}, no gradient clipping): set before the "
            "runs from the time this machine allows (`--plan`), not tuned on any result.",
        ),
        failure_rule=failure_rule(dataset),
    )
    return Run(spec, protocol)
