"""From a reproduction's store rows to numbers: the protocol's metric per run, per variant
(mean, 95% interval over seeds) and a verdict on each of the paper's claims (paired by seed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dashboards.stats import assess, holm, mean_ci
from harness.reproduce.studies import PAPER_CLAIMS


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


def summarize(
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
    tested, missing = [], []
    for a, relation, b in claims if claims is not None else PAPER_CLAIMS[protocol]:
        claim = f"{a} {relation} {b}"
        if samples.get(a) and samples.get(b):
            tested.append(
                assess(samples[a], samples[b], relation, higher, margin=margin, large_margin=large_margin, claim=claim)
            )
        else:
            missing.append(claim)
    # Holm over the study's family: every claim tested here, untestable ones counting as p = 1.
    adjusted = holm(tested + [_untestable(claim) for claim in missing])[: len(tested)]
    verdicts: list[dict[str, Any]] = [
        {
            "claim": v.claim,
            "verdict": v.result,
            "difference": v.difference.estimate,
            "low": v.interval.low,
            "high": v.interval.high,
            "margin": v.margin,
            "test": v.difference.test,
            "p": v.p_value,
            "p_exact": v.p_exact,
            "p_holm": v.p_adjusted,
            "power": v.power,
        }
        for v in adjusted
    ]
    verdicts += [{"claim": claim, "verdict": "inconclusive (a variant did not complete)"} for claim in missing]
    return rows, verdicts, metric


def _untestable(claim: str):
    """A claim whose variants did not complete: in Holm's family with p = 1, so it cannot ease the others."""
    return assess([], [], ">", claim=claim)
