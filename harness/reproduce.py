"""``archsearch reproduce``: the papers' comparisons as ordinary studies (spec -> grid search -> store).

``coatnet-layouts``: ViT-REL, C-C-C-C, C-C-C-T, C-C-T-T, C-T-T-T at matched parameter counts,
same data and budget, several seeds, under the paper's two protocols:

* generalisation: no augmentation, no regularisation; compare evaluation accuracy at equal
  training loss (interpolated on each trial's learning curve at a loss every run reached);
* capacity: the largest data and longest budget of the scale; compare final training loss.

The summary states, for each ordering of the paper's Fig. 1, whether it holds here, from 95%
intervals over seeds (never hard-coded).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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


def coatnet_layouts_spec(
    scale: str, protocol: str, seeds: int, dataset: str = "synthetic", data_dir: str | None = None
) -> dict[str, Any]:
    """The grid-search spec of one protocol of the layout study (variants = matched layouts x seeds)."""
    from search_space.matching import match_layouts
    from trials.models import resolve_config

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
    data: dict[str, Any] = {"name": dataset, "batch_size": 64 if scale == "tiny" else 256}
    if data_dir:
        data["data_dir"] = data_dir
    if dataset == "synthetic" and settings["train_size"]:
        data.update(num_classes=10, train_size=settings["train_size"] * factor, val_size=settings["val_size"])
    if dataset == "digits":
        data["batch_size"] = 32  # 1,437 training images
    if protocol == "generalisation":  # no augmentation, no regularisation (the paper's setting)
        data["augment"] = {"random_crop": False, "hflip": False}
        training = {"epochs": settings["epochs"], "weight_decay": 0.0, "label_smoothing": 0.0, "lr": 2e-3}
        model_extra = {"drop_path_rate": 0.0}
    else:
        training = {"epochs": settings["epochs"] * factor, "lr": 2e-3}
        model_extra = {}
    base_model = settings["base"] if isinstance(settings["base"], dict) else {"preset": settings["base"]}
    return {
        "name": f"coatnet-layouts-{protocol}-{scale}" + ("" if dataset == "synthetic" else f"-{dataset}"),
        "family": "coatnet",
        "base_model": {**base_model, **model_extra},
        "data": data,
        "training": training,
        "measure": {"latency": False, "repeats": 2, "batch_size": 32},
        "variants": variants,
        "params": {"variant": {"choice": list(LAYOUTS)}, "seed": {"choice": list(range(seeds))}},
        "objectives": {"top1": "max", "train_loss": "min"},
        "search": {"sampler": "grid", "n_trials": len(LAYOUTS) * seeds, "concurrency": 2, "seed": 0},
    }


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
    data: dict[str, Any] = {"name": dataset, "batch_size": 64 if scale == "tiny" else 256}
    if data_dir:
        data["data_dir"] = data_dir
    if dataset == "synthetic" and settings["train_size"]:
        data.update(num_classes=10, train_size=settings["train_size"], val_size=settings["val_size"])
    if dataset == "digits":
        data["batch_size"] = 32  # 1,437 training images
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
    spec = {
        "name": f"cait-depth-{scale}" + ("" if dataset == "synthetic" else f"-{dataset}"),
        "family": "cait",
        "base_model": settings["base"],
        "data": data,
        "training": {**training, "grad_clip": None},  # no clipping: instability must be able to show
        "measure": {"latency": False, "repeats": 2, "batch_size": 32},
        "variants": variants,
        "params": {"variant": {"choice": list(variants)}, "seed": {"choice": list(range(seeds))}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {"sampler": "grid", "n_trials": len(variants) * seeds, "concurrency": 2, "seed": 0},
    }
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
    spec = {
        "name": f"cait-class-attention-{scale}" + ("" if dataset == "synthetic" else f"-{dataset}"),
        "family": "cait",
        "base_model": settings["base"],
        "data": data,
        "training": training,
        "measure": {"latency": False, "repeats": 2, "batch_size": 32},
        "variants": variants,
        "params": {"variant": {"choice": list(variants)}, "seed": {"choice": list(range(seeds))}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {"sampler": "grid", "n_trials": len(variants) * seeds, "concurrency": 2, "seed": 0},
    }
    ranking = f"{d}+2 best; class attention beats the CA-free baseline; late insertion helps it (CaiT Table 3)"
    return spec, claims, ranking


def accuracy_at_equal_loss(curves, trials) -> tuple[float, dict[int, float]]:
    """Eval top-1 of every trial interpolated at one training loss: the highest final training loss
    among the trials (a loss every run reached), as the paper's "at equal training loss"."""
    per_trial = {int(n): g.sort_values("epoch") for n, g in curves.groupby("number")}
    completed = set(trials[trials["status"] == "completed"]["number"].astype(int))
    per_trial = {n: g for n, g in per_trial.items() if n in completed and g["train_loss"].notna().all()}
    level = max(g["train_loss"].iloc[-1] for g in per_trial.values())
    values = {}
    for number, g in per_trial.items():
        losses, accs = g["train_loss"].to_numpy(float), g["top1"].to_numpy(float)
        # Loss falls with epochs: interpolate accuracy as a function of (decreasing) loss.
        order = np.argsort(losses)
        values[number] = float(np.interp(level, losses[order], accs[order]))
    return float(level), values


@dataclass
class VariantSummary:
    variant: str
    params: float
    flops: float
    metric: str
    mean: float
    low: float  # the 95% interval, clipped to the metric's possible range (accuracy in [0, 100], loss >= 0)
    high: float
    n: int
    clipped: bool = False  # whether the t-interval reached past that range (and was cut there)


def _metric_range(protocol: str) -> tuple[float, float]:
    return (0.0, float("inf")) if protocol == "capacity" else (0.0, 100.0)


def summarise(
    store,
    study: str,
    protocol: str,
    claims: list[tuple[str, str, str]] | None = None,
    *,
    margin: float = 1.0,
    large_margin: float = 5.0,
) -> tuple[list[VariantSummary], list[dict[str, Any]], str]:
    """Per-variant mean and 95% interval of the protocol's metric, and the verdict on each paper claim.

    ``protocol``: ``generalisation`` (eval top-1 at equal training loss), ``capacity`` (final
    training loss, lower is better) or ``accuracy`` (final eval top-1). Diverged trials are
    counted per variant in the summary, not averaged in. Samples are keyed by seed, so claims
    are tested on per-seed differences (paired) wherever both variants ran that seed.
    """
    from dashboards.stats import assess, mean_ci

    trials = store.trials(study)
    trials = trials[trials["status"] == "completed"]
    if protocol == "generalisation":
        level, values = accuracy_at_equal_loss(store.learning_curves(study), trials)
        trials = trials.assign(metric=trials["number"].map(values))
        metric, higher = f"eval top-1 at train loss {level:.3f}", True
    elif protocol == "capacity":
        trials = trials.assign(metric=trials["train_loss"])
        metric, higher = "final train loss", False
    else:
        trials = trials.assign(metric=trials["top1"])
        metric, higher = "final eval top-1", True
    lowest, highest = _metric_range(protocol)
    seed_column = "config.seed" if "config.seed" in trials else None
    samples: dict[str, dict[int, float]] = {}
    rows = []
    for variant, group in trials.groupby("config.name"):
        group = group[group["metric"].notna()]
        seeds = group[seed_column].astype(int) if seed_column else range(len(group))
        samples[variant] = {int(seed): float(v) for seed, v in zip(seeds, group["metric"], strict=True)}
        if not samples[variant]:
            continue
        ci = mean_ci(list(samples[variant].values()))
        shown = ci.clipped(lowest, highest)
        rows.append(
            VariantSummary(
                variant, float(group["params"].mean()), float(group["flops"].mean()), metric, ci.mean,
                shown.low, shown.high, ci.n, clipped=(shown.low, shown.high) != (ci.low, ci.high),
            )
        )  # fmt: skip
    rows.sort(key=lambda r: -r.mean if higher else r.mean)
    verdicts = []
    for a, relation, b in claims if claims is not None else PAPER_CLAIMS[protocol]:
        claim = f"{a} {relation} {b}"
        if samples.get(a) and samples.get(b):
            v = assess(samples[a], samples[b], relation, higher, margin=margin, large_margin=large_margin, claim=claim)
            verdicts.append(
                {
                    "claim": claim,
                    "verdict": v.result,
                    "difference": v.difference.estimate,
                    "low": v.interval.low,
                    "high": v.interval.high,
                    "margin": v.margin,
                    "test": v.difference.test,
                    "p": v.p_value,
                    "power": v.power,
                }
            )
        else:
            verdicts.append({"claim": claim, "verdict": "inconclusive (a variant did not complete)"})
    return rows, verdicts, metric


def _number(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    value = float(value)
    return f"{value:.{digits}f}" if np.isfinite(value) else ("+inf" if value > 0 else "-inf")


def markdown_summary(
    study: str,
    protocol: str,
    rows: list[VariantSummary],
    claims: list[dict[str, Any]],
    command: str,
    paper_ranking: str | None = None,
    outcomes: dict[str, dict[str, int]] | None = None,
) -> str:
    """The study's summary: per-variant means and intervals, the ranking next to the paper's, verdicts."""
    unit = "loss" if protocol == "capacity" else "points of top-1"
    lines = [
        f"# {study}",
        "",
        f"Command: `{command}`",
        "",
        f"Protocol: **{protocol}**. Metric: {rows[0].metric if rows else '-'} (mean and 95% t-interval over seeds).",
        "",
        "| rank | variant | params | GFLOPs | mean | 95% CI | seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for rank, r in enumerate(rows, start=1):
        ci = "unbounded (1 seed)" if r.n < 2 else f"[{r.low:.3f}, {r.high:.3f}]" + (" *" if r.clipped else "")
        lines.append(
            f"| {rank} | {r.variant} | {r.params / 1e6:.3f}M | {r.flops / 1e9:.4f} | {r.mean:.3f} | {ci} | {r.n} |"
        )
    if any(r.clipped for r in rows):
        bound = "[0, 100]" if protocol != "capacity" else "[0, +inf)"
        lines += ["", f"\\* interval clipped to the metric's possible range {bound}; the t-interval reached past it."]
    found = " > ".join(r.variant for r in rows)
    lines += [
        "",
        f"Ranking found here: {found}",
        f"Paper's ranking: {paper_ranking or PAPER_RANKING.get(protocol, '-')}",
        "",
        f"| paper's claim | here | A - B ({unit}) | 95% CI | margin | test | p | power |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in claims:
        if "difference" not in c:
            lines.append(f"| {c['claim']} | {c['verdict']} | - | - | - | - | - | - |")
            continue
        margin = "-" if c["margin"] is None else f"{c['margin']:g}"
        interval = f"[{_number(c['low'])}, {_number(c['high'])}]"
        lines.append(
            f"| {c['claim']} | {c['verdict']} | {_number(c['difference'])} | {interval} | {margin} | {c['test']} "
            f"| {c['p']:.3g} | {c['power']} |"
        )
    lines += [
        "",
        "Each verdict is a one-sided test at the 5% level on A - B (oriented so that positive means A is "
        "better; for a loss, lower is better). `A > B` holds if A - B > 0 is significant and does not hold "
        "if B - A > 0 is; `A ~ B` holds only if equivalence within +-margin is shown (TOST) and does not hold "
        "if a difference beyond the margin is significant; `A >= B` holds if `A > B` or `A ~ B` holds; "
        "`A >> B` needs A - B above the large margin. Anything else is inconclusive: no significant "
        "difference is never read as agreement. With every variant run on the same seeds (same data order "
        "and split per seed), differences are paired by seed.",
    ]
    if outcomes:
        lines += ["", "| variant | completed | diverged | failed |", "|---|---|---|---|"]
        for variant, counts in sorted(outcomes.items()):
            done, diverged, failed = (counts.get(k, 0) for k in ("completed", "diverged", "failed"))
            lines.append(f"| {variant} | {done} | {diverged} | {failed} |")
        lines.append("")
        lines.append("Divergence is a result: a diverged run is counted here and left out of the means.")
    return "\n".join(lines) + "\n"


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


def reproduce(
    study: str,
    store_url: str,
    *,
    scale: str,
    seeds: int,
    protocols: tuple[str, ...] = ("generalisation", "capacity"),
    dataset: str = "synthetic",
    data_dir: str | None = None,
    address: str | None = None,
    output: Path,
    command: str,
    results_dir: Path | None = None,
    margin: float = 1.0,
    large_margin: float = 5.0,
    run: bool = True,
) -> list[Path]:
    """Run the study's grid searches, then write a Markdown summary and an HTML report for each.

    ``run=False`` writes the summaries and reports again from the store (e.g. with another
    ``margin``) without running anything.
    """
    from dashboards.report import write_report
    from harness.search import run_search
    from harness.store import Store
    from search_space.validation import load_spec

    output.mkdir(parents=True, exist_ok=True)
    written = []
    for spec_dict, protocol, claims, ranking in plan(study, scale, seeds, protocols, dataset, data_dir):
        spec = load_spec(spec_dict, check_paths=address is None)
        if run:
            run_search(spec, store_url, address=address, results_dir=results_dir)
        with Store.open(store_url, create=False) as store:
            store.study(spec.name)  # with run=False: a one-line error if the study was never run
            from dashboards.files import atomic_write

            rows, verdicts, _ = summarise(store, spec.name, protocol, claims, margin=margin, large_margin=large_margin)
            trials = store.trials(spec.name)
            outcomes = {
                str(variant): group["status"].value_counts().to_dict()
                for variant, group in trials.groupby("config.name")
            }
            figures = _study_figures(store, spec.name, rows, output)
            summary = output / f"{spec.name}.md"
            text = markdown_summary(spec.name, protocol, rows, verdicts, command, ranking, outcomes)
            text += "".join(f"\n![{title}]({path.name})\n" for title, path in figures)
            atomic_write(summary, text)
            color = "config.model.layout" if spec.family == "coatnet" else "config.model.layer_scale"
            report = write_report(
                store, [spec.name], dict(spec.objectives), output / f"{spec.name}.html", color_by=color
            )
        written += [summary, report, *(path for _, path in figures)]
    return written


def _study_figures(store, study: str, rows: list[VariantSummary], output: Path) -> list[tuple[str, Path]]:
    """The reproduction's own figures: accuracy against training loss per run (CoAtNet Fig. 1 form),
    and the metric per variant with its interval (accuracy against depth for the depth study)."""
    import io

    import matplotlib.pyplot as plt

    from dashboards.figures import loss_vs_accuracy, variant_intervals
    from dashboards.files import atomic_write

    trials = store.trials(study)
    variant_of = {int(n): str(v) for n, v in zip(trials["number"], trials["config.name"], strict=True)}
    made = []
    for title, suffix, figure in (
        (
            "eval accuracy against training loss",
            "loss-vs-accuracy",
            loss_vs_accuracy(store.learning_curves(study), variant_of),
        ),
        ("metric per variant", "variants", variant_intervals(rows, rows[0].metric if rows else "metric")),
    ):
        path = output / f"{study}-{suffix}.png"
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=110)
        plt.close(figure)
        atomic_write(path, buffer.getvalue())
        made.append((title, path))
    return made


def reproduce_coatnet_layouts(store_url: str, **kwargs: Any) -> list[Path]:
    return reproduce("coatnet-layouts", store_url, **kwargs)
