"""``cait-class-attention``, pre-registered: CaiT Table 3's SA/CA split and late class-token insertion."""

from __future__ import annotations

from harness.reproduce import cluster_scale

from .cait_common import cait_base, cait_protocol, cait_settings
from .common import DEFAULT_DATASET, Run, data_section, grid_spec, reproduction_study_name


def cait_class_attention_run(
    scale: str,
    seeds: int,
    dataset: str = DEFAULT_DATASET,
    data_dir: str | None = None,
    pilot: dict[str, dict[str, float]] | None = None,
    only: tuple[str, ...] = (),
) -> Run:
    """SA+CA splits at a fixed total, and late class-token insertion for the CA-free baseline."""
    if scale in cluster_scale.CLUSTER_SCALES:  # the same study at --scale small, on the user's ImageFolder
        small = cait_class_attention_run(cluster_scale.CAIT["wrapped_scale"], seeds, "mnist5k", None)
        return cluster_scale.cait_run(small, seeds, dataset, data_dir, pilot, only, interaction=False)
    settings = cait_settings(scale)
    d = settings["split_depth"]
    late = d - 1  # CaiT inserts the class token at layer 10 or 11 of 12 (Table 3): here the last block's
    variants = {
        f"{d}+0": {"depth": d, "ca_depth": 0, "cls_insert_layer": 0},
        f"{d}+0 cls@{late}": {"depth": d, "ca_depth": 0, "cls_insert_layer": late},
        f"{d - 2}+2": {"depth": d - 2, "ca_depth": 2, "cls_insert_layer": None},
        f"{d - 1}+1": {"depth": d - 1, "ca_depth": 1, "cls_insert_layer": None},
        f"{d}+1": {"depth": d, "ca_depth": 1, "cls_insert_layer": None},
        f"{d}+2": {"depth": d, "ca_depth": 2, "cls_insert_layer": None},
    }
    claims = ((f"{d}+2", ">", f"{d}+0"), (f"{d}+2", ">=", f"{d}+1"), (f"{d}+0 cls@{late}", ">=", f"{d}+0"))
    name = reproduction_study_name("cait-class-attention", scale, dataset)
    data = data_section(dataset, data_dir, settings, train_size=settings["train_size"], image_size=None)
    spec = grid_spec(
        name,
        family="cait",
        base_model=cait_base(settings, scale),
        data=data,
        training={"epochs": settings["epochs"], "lr": settings["lr"]},
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
        ranking=f"{d}+2 best; class attention beats the CA-free baseline; late insertion helps it (CaiT Table 3)",
        notes=(
            f"CaiT blocks (talking heads, LayerScale), {d} self-attention blocks in all; cait-depth's budget.",
            f"Late insertion: the class token joins at block {late} of {d} (0-based), the place CaiT's Table 3 "
            "reports a gain at relative to its depth (layer 10 or 11 of 12); earlier insertion (CaiT: layer 0 "
            "to 8) is not claimed to help and is not tested.",
        ),
    )
    return Run(spec, protocol)
