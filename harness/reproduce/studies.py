"""The reproductions' studies: the papers' claims, the scales, and each comparison as a grid spec.

``coatnet-layouts`` (CoAtNet Fig. 1: ViT-REL, C-C-C-C, C-C-C-T, C-C-T-T, C-T-T-T at matched
parameter counts, under the generalisation and capacity protocols), ``cait-depth`` (depth x
residual scheme) and ``cait-class-attention`` (SA/CA split): each is an ordinary grid study over
variants x seeds, so it runs, resumes and is stored like any search.
"""

from __future__ import annotations

from typing import Any

from search_space.matching import match_layouts
from trials.models import resolve_config

LAYOUTS = ("VIT-REL", "CCCC", "CCCT", "CCTT", "CTTT")

# CoAtNet Fig. 1, as pairwise claims on the protocol's metric (A relation B, "better" direction).
PAPER_CLAIMS = {
    "generalisation": [
        ("CCCC", "~", "CCCT"),
        ("CCCT", ">=", "CCTT"),
        ("CCTT", ">", "CTTT"),
        ("CTTT", ">", "VIT-REL"),
        ("CTTT", ">>", "VIT-REL"),  # the paper's "much better"
    ],
    "capacity": [("CCTT", "~", "CTTT"), ("CTTT", ">", "VIT-REL"), ("VIT-REL", ">", "CCCT"), ("CCCT", ">", "CCCC")],
}
PAPER_RANKING = {
    "generalisation": "CCCC ~ CCCT >= CCTT > CTTT >> VIT-REL",
    "capacity": "CCTT ~ CTTT > VIT-REL > CCCT > CCCC",
}

# Per scale: the reference model (matched by the others), data size and budget.
SCALES: dict[str, dict[str, Any]] = {
    "tiny": {"base": "coatnet_tiny32", "train_size": 2000, "val_size": 500, "epochs": 3, "capacity_factor": 2},
    "small": {
        "base": {"preset": "coatnet_0", "image_size": 32, "dims": [32, 64, 128, 256, 512], "head_hidden_dim": None},
        "train_size": 20000,
        "val_size": 5000,
        "epochs": 30,
        "capacity_factor": 2,
    },
    # Conclusive on a 2-core CPU in well under 90 minutes per study with 5 seeds (see docs/reproductions).
    "cpu": {"base": "coatnet_tiny32", "train_size": 2000, "val_size": 500, "epochs": 10, "capacity_factor": 2},
    "paper": {"base": "coatnet_0", "train_size": None, "val_size": None, "epochs": 300, "capacity_factor": 1},
}


def _data_section(
    scale: str, settings: dict[str, Any], dataset: str, data_dir: str | None, train_factor: int = 1
) -> dict[str, Any]:
    """The spec's ``data`` section for a scale: synthetic sizes from the scale, digits' own batch size."""
    data: dict[str, Any] = {"name": dataset, "batch_size": 64 if scale == "tiny" else 256}
    if data_dir:
        data["data_dir"] = data_dir
    if dataset == "synthetic" and settings["train_size"]:
        data.update(num_classes=10, train_size=settings["train_size"] * train_factor, val_size=settings["val_size"])
    if dataset == "digits":
        data["batch_size"] = 32  # 1,437 training images
    return data


def _grid_spec(
    name: str,
    dataset: str,
    *,
    family: str,
    base_model: dict[str, Any] | str,
    data: dict[str, Any],
    training: dict[str, Any],
    variants: dict[str, dict[str, Any]],
    seeds: int,
    objectives: dict[str, str],
) -> dict[str, Any]:
    """A reproduction as an ordinary grid study: every variant x every seed, two at a time.

    The study is named after the dataset unless it is the synthetic default, so that runs on
    different data never share a study.
    """
    return {
        "name": name + ("" if dataset == "synthetic" else f"-{dataset}"),
        "family": family,
        "base_model": base_model,
        "data": data,
        "training": training,
        "measure": {"latency": False, "repeats": 2, "batch_size": 32},
        "variants": variants,
        "params": {"variant": {"choice": list(variants)}, "seed": {"choice": list(range(seeds))}},
        "objectives": objectives,
        "search": {"sampler": "grid", "n_trials": len(variants) * seeds, "concurrency": 2, "seed": 0},
    }


def coatnet_layouts_spec(
    scale: str, protocol: str, seeds: int, dataset: str = "synthetic", data_dir: str | None = None
) -> dict[str, Any]:
    """The grid-search spec of one protocol of the layout study (variants = matched layouts x seeds)."""
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; use one of {', '.join(SCALES)}")
    if protocol not in PAPER_CLAIMS:
        raise ValueError(f"unknown protocol {protocol!r}; use generalisation or capacity")
    settings = SCALES[scale]
    base = resolve_config(settings["base"])
    matched = match_layouts(base.replace(layout="CCTT"), LAYOUTS)
    variants = {
        layout: {"layout": config.layout, "depths": list(config.depths), "dims": list(config.dims)}
        for layout, config in matched.items()
    }
    factor = settings["capacity_factor"] if protocol == "capacity" else 1
    data = _data_section(scale, settings, dataset, data_dir, train_factor=factor)
    if protocol == "generalisation":  # no augmentation, no regularisation (the paper's setting)
        data["augment"] = {"random_crop": False, "hflip": False}
        training = {"epochs": settings["epochs"], "weight_decay": 0.0, "label_smoothing": 0.0, "lr": 2e-3}
        model_extra = {"drop_path_rate": 0.0}
    else:
        training = {"epochs": settings["epochs"] * factor, "lr": 2e-3}
        model_extra = {}
    base_model = settings["base"] if isinstance(settings["base"], dict) else {"preset": settings["base"]}
    return _grid_spec(
        f"coatnet-layouts-{protocol}-{scale}",
        dataset,
        family="coatnet",
        base_model={**base_model, **model_extra},
        data=data,
        training=training,
        variants=variants,
        seeds=seeds,
        objectives={"top1": "max", "train_loss": "min"},
    )


CAIT_SCALES: dict[str, dict[str, Any]] = {
    "tiny": {
        "base": {"preset": "cait_tiny32", "embed_dim": 64, "num_heads": 2},
        "depths": (2, 8),
        "split_depth": 4,
        "train_size": 2000,
        "val_size": 500,
        "epochs": 3,
    },
    "cpu": {
        "base": {"preset": "cait_tiny32", "embed_dim": 64, "num_heads": 2},
        "depths": (2, 12),
        "split_depth": 6,
        "train_size": 2000,
        "val_size": 500,
        "epochs": 20,  # 10 left the 12-block LayerScale model below 3x chance on digits
        "lr": 2e-3,
    },
    "small": {
        "base": {"preset": "cait_tiny32", "embed_dim": 192, "num_heads": 4},
        "depths": (6, 12, 18, 24),
        "split_depth": 12,
        "train_size": 20000,
        "val_size": 5000,
        "epochs": 50,
    },
    "paper": {
        "base": {"preset": "cait_xxs24"},
        "depths": (12, 24, 36),
        "split_depth": 24,
        "train_size": None,
        "val_size": None,
        "epochs": 400,
    },
}


def _cait_common(
    scale: str, dataset: str, data_dir: str | None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    if scale not in CAIT_SCALES:
        raise ValueError(f"unknown scale {scale!r}; use one of {', '.join(CAIT_SCALES)}")
    settings = CAIT_SCALES[scale]
    data = _data_section(scale, settings, dataset, data_dir)
    return settings, data, {"epochs": settings["epochs"], "lr": settings.get("lr", 1e-3)}


def cait_depth_spec(scale: str, seeds: int, dataset: str = "synthetic", data_dir: str | None = None):
    """Depth x residual scheme (no LayerScale, ReZero-style scalar gain at 0, LayerScale with the paper's
    eps) x seeds; returns (spec, claims, paper ranking). Divergence is recorded, not hidden."""
    settings, data, training = _cait_common(scale, dataset, data_dir)
    schemes = {"off": "off", "rezero": "rezero", "layerscale": "paper"}
    variants = {
        f"d{depth}-{scheme}": {"depth": depth, "layer_scale": value, "cls_insert_layer": None}
        for depth in settings["depths"]
        for scheme, value in schemes.items()
    }
    deepest, shallowest = max(settings["depths"]), min(settings["depths"])
    claims = [
        (f"d{deepest}-layerscale", ">", f"d{deepest}-off"),
        (f"d{deepest}-layerscale", ">=", f"d{deepest}-rezero"),
        (f"d{deepest}-layerscale", ">=", f"d{shallowest}-layerscale"),
    ]
    spec = _grid_spec(
        f"cait-depth-{scale}",
        dataset,
        family="cait",
        base_model=settings["base"],
        data=data,
        training={**training, "grad_clip": None},  # no clipping: instability must be able to show
        variants=variants,
        seeds=seeds,
        objectives={"top1": "max", "flops": "min"},
    )
    ranking = "deep models train with LayerScale; without it the deepest baseline fails (CaiT Table 1/Fig. 3)"
    return spec, claims, ranking


def cait_class_attention_spec(scale: str, seeds: int, dataset: str = "synthetic", data_dir: str | None = None):
    """SA+CA splits at a fixed total, and late class-token insertion for the CA-free baseline."""
    settings, data, training = _cait_common(scale, dataset, data_dir)
    d = settings["split_depth"]
    variants = {
        f"{d}+0": {"depth": d, "ca_depth": 0, "cls_insert_layer": 0},
        f"{d}+0 cls@{d // 2}": {"depth": d, "ca_depth": 0, "cls_insert_layer": d // 2},
        f"{d - 2}+2": {"depth": d - 2, "ca_depth": 2, "cls_insert_layer": None},
        f"{d - 1}+1": {"depth": d - 1, "ca_depth": 1, "cls_insert_layer": None},
        f"{d}+1": {"depth": d, "ca_depth": 1, "cls_insert_layer": None},
        f"{d}+2": {"depth": d, "ca_depth": 2, "cls_insert_layer": None},
    }
    claims = [(f"{d}+2", ">", f"{d}+0"), (f"{d}+2", ">=", f"{d}+1"), (f"{d}+0 cls@{d // 2}", ">=", f"{d}+0")]
    spec = _grid_spec(
        f"cait-class-attention-{scale}",
        dataset,
        family="cait",
        base_model=settings["base"],
        data=data,
        training=training,
        variants=variants,
        seeds=seeds,
        objectives={"top1": "max", "flops": "min"},
    )
    ranking = f"{d}+2 best; class attention beats the CA-free baseline; late insertion helps it (CaiT Table 3)"
    return spec, claims, ranking


def plan(study: str, scale: str, seeds: int, protocols: tuple[str, ...], dataset: str, data_dir: str | None):
    """(spec, protocol, claims, paper ranking) for each run a reproduction needs."""
    if study == "coatnet-layouts":
        return [
            (coatnet_layouts_spec(scale, p, seeds, dataset, data_dir), p, PAPER_CLAIMS[p], PAPER_RANKING[p])
            for p in protocols
        ]
    if study == "cait-depth":
        spec, claims, ranking = cait_depth_spec(scale, seeds, dataset, data_dir)
    elif study == "cait-class-attention":
        spec, claims, ranking = cait_class_attention_spec(scale, seeds, dataset, data_dir)
    else:
        raise ValueError(f"unknown study {study!r}")
    return [(spec, "accuracy", claims, ranking)]
