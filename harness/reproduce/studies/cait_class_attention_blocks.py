"""``cait-class-attention-blocks``, pre-registered 2026-11-29 (issue 59) on fresh seeds: class attention
against self-attention at equal blocks and parameters, (d+2)+0 against d+2.
"""

from __future__ import annotations

from harness.reproduce import cluster_scale
from search_space.cost_model import estimate_flops, estimate_params
from trials.models import resolve_config

from .cait_common import cait_base, cait_protocol, cait_settings, control_spec, second_control_note
from .common import DEFAULT_DATASET, SECOND_FRESH_SEEDS, Run, reproduction_study_name


def cait_class_attention_blocks_run(
    scale: str,
    seeds: int,
    dataset: str = DEFAULT_DATASET,
    data_dir: str | None = None,
    pilot: dict[str, dict[str, float]] | None = None,
    only: tuple[str, ...] = (),
) -> Run:
    """The clean test cait-class-attention-matched could not be: d+2 against (d+2)+0, the same number of
    blocks and (an SA block and a CA block have nearly the same weights) the same parameters; the last two
    blocks attend with every token or with the class token alone. cait-class-attention's base and budget."""
    if scale in cluster_scale.CLUSTER_SCALES:  # the same study at --scale small, on the user's ImageFolder
        small = cait_class_attention_blocks_run(cluster_scale.CAIT["wrapped_scale"], seeds, "mnist5k", None)
        return cluster_scale.cait_run(small, seeds, dataset, data_dir, pilot, only, interaction=False)
    settings = cait_settings(scale)
    d = settings["split_depth"]
    with_ca, plain = f"{d}+2", f"{d + 2}+0"
    variants = {
        plain: {"depth": d + 2, "ca_depth": 0, "cls_insert_layer": 0},
        with_ca: {"depth": d, "ca_depth": 2, "cls_insert_layer": None},
    }
    base = cait_base(settings, scale)
    configs = {v: resolve_config({**base, **values}) for v, values in variants.items()}
    params = {v: estimate_params(c) for v, c in configs.items()}  # as --plan
    flops = {v: estimate_flops(c) for v, c in configs.items()}
    name = reproduction_study_name("cait-class-attention-blocks", scale, dataset)
    spec = control_spec(
        name, settings, dataset, data_dir, base, {"epochs": settings["epochs"], "lr": settings["lr"]}, variants,
        seeds, first_seed=SECOND_FRESH_SEEDS,
    )  # fmt: skip
    protocol = cait_protocol(
        name,
        dataset,
        settings,
        seeds,
        ((with_ca, ">", plain),),
        ranking="class attention in the last blocks beats self-attention there (CaiT Table 3's question)",
        notes=(
            second_control_note(
                f"cait-class-attention-matched's `{d - 2}+2 > {d}+0`, matched in parameters but not in "
                "self-attention depth or FLOPs"
            ),
            f"Equal blocks and parameters: {with_ca} has {params[with_ca]:,} parameters and {flops[with_ca]:,} "
            f"FLOPs, {plain} {params[plain]:,} and {flops[plain]:,} (the closed-form cost model); both have "
            f"{d + 2} blocks, the first {d} self-attention blocks alike. CaiT blocks (talking heads, LayerScale), "
            "cait-class-attention's base model, recipe and budget unchanged.",
        ),
        first_seed=SECOND_FRESH_SEEDS,
    )
    return Run(spec, protocol)
