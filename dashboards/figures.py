"""Matplotlib figures of a study: Pareto scatter, hypervolume progress, learning curves, objective vs parameters.

Every function takes plain DataFrames (as :class:`harness.store.Store` returns them) and returns a
:class:`matplotlib.figure.Figure`, so the same figures serve the HTML report, notebooks and PNG files.
The Agg backend is forced because the report is written on headless machines (cluster heads, CI);
seaborn is imported inside the functions so that importing this module stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

from trials.status import TrialStatus

matplotlib.use("Agg")  # files, never a window: set before pyplot loads (the imports below wait for it)

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import ticker
from matplotlib.figure import Figure

from dashboards.pareto import front_mask
from dashboards.values import axes_order as _axes_order
from dashboards.values import category_labels, per_stage_columns
from dashboards.values import is_categorical as _is_categorical
from dashboards.values import numeric_values as _numeric

# Trials without a usable accuracy, drawn in their own strip with one marker each so they stay visible.
NO_RESULT_MARKERS: dict[str, str] = {TrialStatus.FAILED: "X", TrialStatus.DIVERGED: "v", TrialStatus.INFEASIBLE: "s"}
_MAX_CATEGORIES = 10  # above this many distinct values a numeric color key gets a continuous color map


def _label(name: str, direction: str | None) -> str:
    """Axis label that says which way is better, so a reader never has to guess."""
    if direction is None:
        return name
    arrow = "higher is better" if direction == "max" else "lower is better"
    return f"{name} ({direction}, {arrow})"


def _maybe_log(ax: Any, values: pd.Series, axis: str) -> None:
    """Log scale for positive quantities spanning orders of magnitude (FLOPs, params, lr)."""
    finite = values[np.isfinite(values)]
    if len(finite) >= 2 and (finite > 0).all() and finite.max() / finite.min() > 50:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")


def _front_mask(frame: pd.DataFrame, objectives: Mapping[str, str]) -> np.ndarray:
    return np.asarray(front_mask(frame, objectives), dtype=bool)


def _colors(values: pd.Series) -> tuple[list[Any], dict[str, Any] | None, Any]:
    """Per-row colors for a config key: (colors, legend {label: color} or None, mappable for a color bar)."""
    numeric = _numeric(values)
    labels = category_labels(values)
    if numeric.notna().all() and labels.nunique() > _MAX_CATEGORIES:
        norm = matplotlib.colors.Normalize(numeric.min(), numeric.max())
        cmap = matplotlib.colormaps["viridis"]
        mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
        return [cmap(norm(v)) for v in numeric], None, mappable
    categories = sorted(labels.unique())
    palette = dict(zip(categories, sns.color_palette("tab10", len(categories)), strict=True))
    return [palette[v] for v in labels], palette, None


_ANNOTATE_AT_MOST = 30  # front members labelled with their trial number; more labels would overlap


def pareto_scatter(
    frame: pd.DataFrame, objectives: Mapping[str, str], color_by: str | None = None, *, density: bool = False
) -> Figure:
    """Every trial faint, the Pareto front highlighted and joined by a step line, failures in a strip below.

    ``objectives`` are the front's (2 or 3): the first two are the axes, and the highlighted members are
    the front over all of them, the same trials as the report's front table. With 3, the plane is a
    2-objective view of that front, so the title says so and no step line is drawn (a member can sit
    below another in the plane, beaten there but not on the third objective).

    Failed, diverged and infeasible trials have no accuracy, so they cannot sit in the objective
    plane; hiding them would hide how much of the budget they cost, so they get a labelled strip
    under the main axes (at their cost when it was measured, at the left edge otherwise).

    With ``density`` (a large study), the trials are drawn as a hexbin density with a log color
    scale instead of one marker each, and everything below the front is rasterised, so the figure
    costs the same at 100,000 trials as at 2,000; ``color_by`` then colors the front's members only.

    Long because one figure's layers (all trials, the front, its step line, labels, legend) are drawn in order on
    the same axes.
    """
    sns.set_theme(style="whitegrid")
    x_name, y_name = _axes_order(dict(list(objectives.items())[:2]))
    frame = frame.reset_index(drop=True)
    x = _numeric(frame[x_name]) if x_name in frame else pd.Series(np.nan, index=frame.index)
    y = _numeric(frame[y_name]) if y_name in frame else pd.Series(np.nan, index=frame.index)
    status = frame["status"].astype(str)
    front = _front_mask(frame, objectives)

    fig, (ax, strip) = plt.subplots(
        2, 1, figsize=(9, 7), sharex=True, gridspec_kw={"height_ratios": [6, 1], "hspace": 0.05}
    )
    if color_by is not None and color_by in frame:
        color_rows = front if density else np.ones(len(frame), dtype=bool)
        picked, legend, mappable = _colors(frame.loc[color_rows, color_by])
        colors: list[Any] = ["tab:blue"] * len(frame)
        for i, color in zip(np.flatnonzero(color_rows), picked, strict=True):
            colors[i] = color
    else:
        colors, legend, mappable = ["tab:blue"] * len(frame), None, None

    plotted = (
        np.isfinite(x)
        & np.isfinite(y)
        & status.isin([TrialStatus.COMPLETED, TrialStatus.PRUNED, TrialStatus.RUNNING]).to_numpy()
    )
    log_x = _log_scale(x[plotted])
    if density:
        _density(ax, x[plotted].to_numpy(), y[plotted].to_numpy(), log_x, fig)
    else:
        for state, marker in ((TrialStatus.COMPLETED, "o"), (TrialStatus.PRUNED, "^"), (TrialStatus.RUNNING, "D")):
            rows = plotted & (status == state).to_numpy() & ~front
            if rows.any():
                ax.scatter(
                    x[rows], y[rows], c=[colors[i] for i in np.flatnonzero(rows)], marker=marker, alpha=0.35, s=30,
                    edgecolors="none", label=f"{state} ({int(rows.sum())})",
                )  # fmt: skip
    several = len(objectives) > 2  # a 2-objective view of a front over more: no step line, said in the labels
    if front.any():
        if not several:
            order = np.argsort(x[front].to_numpy(), kind="stable")
            fx, fy = x[front].to_numpy()[order], y[front].to_numpy()[order]
            ax.step(fx, fy, where=step_where(objectives[x_name]), color="black", linewidth=1.2, zorder=3)
        ax.scatter(
            x[front], y[front], c=[colors[i] for i in np.flatnonzero(front)], s=110 if front.sum() <= 200 else 30,
            edgecolors="black", linewidths=1.5 if front.sum() <= 200 else 0.5, zorder=4,
            label=f"Pareto front of all {len(objectives)} objectives ({int(front.sum())})" if several
            else f"Pareto front ({int(front.sum())})",
        )  # fmt: skip
        if front.sum() <= _ANNOTATE_AT_MOST:
            for number, px, py in zip(frame.loc[front, "number"], x[front], y[front], strict=True):
                ax.annotate(f"#{number}", (px, py), textcoords="offset points", xytext=(5, 5), fontsize=8)

    # Failures strip: one row per status, at the measured cost or pinned at the left edge.
    known_x = x[np.isfinite(x)]
    left = known_x.min() if len(known_x) else 0.0
    strip_rows = []
    jitter = np.random.default_rng(0)  # trials at the same cost (or none) side by side, not one marker
    for row, (state, marker) in enumerate(NO_RESULT_MARKERS.items()):
        rows = (status == state).to_numpy()
        strip_rows.append(f"{state} ({int(rows.sum())})")
        if not rows.any():
            continue
        xs = x[rows].fillna(left)
        many = len(xs) > 500
        ys = row + jitter.uniform(-0.3, 0.3, len(xs)) if len(xs) > 1 else np.full(len(xs), row)
        strip.scatter(
            xs, ys, marker=marker, s=12 if many else 40, alpha=0.3 if many else 0.8,
            color="tab:red", label=f"{state} ({len(xs)})", rasterized=many,
        )  # fmt: skip
    strip.set_yticks(range(len(strip_rows)), strip_rows)
    strip.set_ylim(-0.7, len(strip_rows) - 0.3)
    strip.set_ylabel("no result", fontsize=8)
    if strip.get_legend_handles_labels()[0]:
        strip.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)

    if log_x:
        ax.set_xscale("log")
    ax.set_ylabel(_label(y_name, objectives[y_name]))
    strip.set_xlabel(_label(x_name, objectives[x_name]))
    handles, labels = ax.get_legend_handles_labels()
    if legend:
        handles += [plt.Line2D([], [], marker="o", linestyle="", color=c) for c in legend.values()]
        labels += [f"{color_by} = {k}" for k in legend]
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    if mappable is not None:
        fig.colorbar(mappable, ax=[ax, strip], label=color_by, pad=0.25)
    duplicates = int((status == TrialStatus.DUPLICATE).sum())  # the same config as a trial shown: not drawn twice
    shown = f"{len(frame) - duplicates:,} trials" + (f" (+{duplicates} duplicates)" if duplicates else "")
    title = f"{y_name} vs {x_name}: {shown}, {int(front.sum())} on the front"
    if several:
        title += f" of {', '.join(objectives)} (a 2-objective view)"
    ax.set_title(title)
    fig.subplots_adjust(right=0.72)
    return fig


def step_where(x_direction: str) -> str:
    """Matplotlib's ``where`` for the front's step line, the members sorted by x: ``post`` (across, then
    up or down) when lower x is better, ``pre`` when higher x is better.

    Why: the line must turn at the inner corners, each dominated by both neighbours it joins (the
    worse x and the worse y of the two), never at an outer corner that would dominate them. Along a
    2-objective front y gets better exactly as x gets worse; with lower x better the worse x is the
    right-hand neighbour's and the worse y the left-hand one's (``post``), with higher x better it is
    the other way round (``pre``), whichever way y points. Plotly's ``hv`` and ``vh`` are the same two.
    """
    return "pre" if x_direction == "max" else "post"


def _log_scale(values: pd.Series) -> bool:
    """Log scale for positive quantities spanning orders of magnitude (FLOPs, params, lr)."""
    finite = values[np.isfinite(values)]
    return bool(len(finite) >= 2 and (finite > 0).all() and finite.max() / finite.min() > 50)


def _density(ax: Any, x: np.ndarray, y: np.ndarray, log_x: bool, fig: Figure) -> None:
    """All trials as a hexbin count density (log color scale), rasterised: constant cost at any size."""
    if len(x) == 0:
        return
    hexes = ax.hexbin(
        x, y, gridsize=60, bins="log", mincnt=1, cmap="Blues", xscale="log" if log_x else "linear",
        linewidths=0.0, rasterized=True, zorder=1,
    )  # fmt: skip
    colorbar = fig.colorbar(hexes, ax=ax, pad=0.01, fraction=0.04)
    colorbar.set_label(f"trials per cell ({len(x):,} in all)", fontsize=8)


def hypervolume_curve(progress: pd.DataFrame) -> Figure:
    """Hypervolume against the number of finished trials: flattening means the search has stopped paying off."""
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(8, 4))
    if len(progress):
        # A step curve is fully described by the points where it changes (and its end): at 100k
        # trials that is a few hundred points instead of 100k.
        values = progress["hypervolume"].to_numpy()
        changes = np.ones(len(values), dtype=bool)
        changes[1:] = values[1:] != values[:-1]
        changes[-1] = True
        steps = progress[changes]
        ax.step(steps["n_finished"], steps["hypervolume"], where="post", color="tab:blue")
        if len(steps) <= 200:
            ax.plot(steps["n_finished"], steps["hypervolume"], "o", color="tab:blue", markersize=3)
    else:
        ax.text(0.5, 0.5, "no finished trials yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("finished trials")
    ax.set_ylabel("hypervolume (higher is better)")
    ax.set_title("Hypervolume of the Pareto front as trials finish")
    fig.tight_layout()
    return fig


def learning_curves(curves: pd.DataFrame, numbers: Sequence[int]) -> Figure:
    """Eval top-1 and train loss per epoch for the given trials (the front's members): were they still improving?"""
    sns.set_theme(style="whitegrid")
    fig, (top, loss) = plt.subplots(1, 2, figsize=(11, 4))
    chosen = curves[curves["number"].isin(list(numbers))] if len(curves) else curves
    palette = sns.color_palette("tab10", max(len(numbers), 1))
    for color, number in zip(palette, numbers, strict=False):
        rows = chosen[chosen["number"] == number].sort_values("epoch")
        if rows.empty:
            continue
        for ax, column in ((top, "top1"), (loss, "train_loss")):
            if column in rows and rows[column].notna().any():
                ax.plot(rows["epoch"], rows[column], marker="o", markersize=3, color=color, label=f"#{number}")
    top.set_title("eval top-1 per epoch")
    top.set_ylabel("top1 (higher is better)")
    loss.set_title("train loss per epoch")
    loss.set_ylabel("train_loss (lower is better)")
    for ax in (top, loss):
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))  # epochs are whole numbers
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, title="trial", ncol=2)
        else:
            ax.text(0.5, 0.5, "no epochs recorded", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def objective_vs_params(
    frame: pd.DataFrame,
    objective: str,
    params: Sequence[str],
    direction: str | None = None,
    *,
    of_total: int | None = None,
    log_params: Sequence[str] = (),
) -> Figure:
    """One panel per searched parameter against an objective over completed trials: which knobs matter.

    ``of_total``: the number of completed trials in the study when ``frame`` is a random sample of
    them (a large study); the title then says so. ``log_params``: the columns the spec declares
    ``log: true`` (``lr``), drawn on a log axis whatever their range.
    """
    sns.set_theme(style="whitegrid")
    done = frame[(frame["status"] == TrialStatus.COMPLETED) & _numeric(frame[objective]).notna()].copy()
    done[objective] = _numeric(done[objective])
    done, params = per_stage_columns(done, params)
    dense = len(done) <= 500  # few points: big, opaque markers; many: small, translucent, rasterised
    alpha = 0.8 if dense else 0.3
    n = max(len(params), 1)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, param in zip(axes.flat, params, strict=False):
        values = done[param] if param in done else pd.Series(dtype=object)
        short = param.removeprefix("config.")
        if values.dropna().empty:
            ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
        elif _is_categorical(values):
            data = pd.DataFrame({short: category_labels(values), objective: done[objective]})
            order = sorted(data[short].unique())
            sns.boxplot(data=data, x=short, y=objective, order=order, ax=ax, color="0.9", fliersize=0)
            sns.stripplot(data=data, x=short, y=objective, order=order, ax=ax, size=4 if dense else 2, alpha=alpha)
            if len(order) > 4 or max(len(o) for o in order) > 8:
                ax.tick_params(axis="x", labelrotation=60, labelsize=7)
        else:
            xs = _numeric(values)
            ax.scatter(xs, done[objective], s=18 if dense else 6, alpha=alpha, rasterized=not dense)
            if (param in log_params or param.split("[")[0] in log_params) and (xs.dropna() > 0).all():
                ax.set_xscale("log")
            else:
                _maybe_log(ax, xs, "x")
            if ax.get_xscale() == "linear":  # 0.0025, 0.00275, ... would run together: 3 significant digits
                whole = bool(np.all(np.mod(xs.dropna().to_numpy(dtype=float), 1) == 0))  # depths: 1, 2, 3
                ax.xaxis.set_major_locator(ticker.MaxNLocator(nbins=4, integer=whole))
                ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.3g}"))
            ax.tick_params(axis="x", labelsize=8)
        ax.set_xlabel(short)
        ax.set_ylabel(_label(objective, direction))
    for ax in list(axes.flat)[len(params) :]:
        ax.set_visible(False)
    shown = f"{len(done):,} completed trials"
    if of_total is not None and of_total > len(done):
        shown = f"a random sample of {len(done):,} of {of_total:,} completed trials"
    fig.suptitle(f"{objective} against the searched parameters ({shown})")
    fig.tight_layout()
    return fig


def loss_vs_accuracy(curves: pd.DataFrame, variant_of: Mapping[int, str], level: float | None = None) -> Figure:
    """The CoAtNet paper's Fig. 1 form: each run's path of (training loss, eval top-1) over epochs,
    coloured by variant, so generalisation reads as accuracy at equal training loss.

    The training loss is the eval-mode one where the runs recorded it (BatchNorm recalibrated), on
    a log axis (the level is read on log-loss); ``level`` is drawn as a vertical line.
    """
    column = "train_eval_loss" if "train_eval_loss" in curves and curves["train_eval_loss"].notna().any() else None
    column = column or "train_loss"
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = sorted(set(variant_of.values()))
    palette = dict(zip(names, sns.color_palette("tab10", len(names)), strict=False))
    seen: set[str] = set()
    for number, group in curves.groupby("number"):
        variant = variant_of.get(int(number))
        if variant is None:
            continue
        g = group.sort_values("epoch")
        ax.plot(
            g[column],
            g["top1"],
            marker="o",
            ms=3,
            color=palette[variant],
            label=None if variant in seen else variant,
            alpha=0.85,
        )
        seen.add(variant)
    if (curves[column] > 0).all():
        ax.set_xscale("log")
    if level is not None:
        ax.axvline(level, color="0.3", linestyle="--", linewidth=1, label=f"level {level:g}")
    ax.invert_xaxis()  # training proceeds left to right
    eval_mode = " (eval mode)" if column == "train_eval_loss" else ""
    ax.set_xlabel(f"training loss{eval_mode} (lower is further in training)")
    ax.set_ylabel("eval top-1 (%)")
    ax.set_title("Eval accuracy against training loss, per run")
    ax.legend(title="variant", fontsize=8)
    fig.tight_layout()
    return fig


def _error_bars(rows: Sequence[Any]) -> np.ndarray:
    """(2, n) distances from each mean to its interval's ends (asymmetric once clipped to the metric's range)."""
    below = [r.mean - r.low if np.isfinite(r.low) else 0.0 for r in rows]
    above = [r.high - r.mean if np.isfinite(r.high) else 0.0 for r in rows]
    return np.array([below, above])


def variant_intervals(rows: Sequence[Any], metric: str) -> Figure:
    """Mean and 95% interval of a metric per variant (points with error bars), best first.

    ``rows`` are ``harness.reproduce.VariantSummary``-like objects (variant, mean, low, high).
    Variants named ``d<depth>-<scheme>`` (the CaiT depth study) are drawn as accuracy against
    depth, one line per residual scheme.
    """
    sns.set_theme(style="whitegrid")
    depth_named = [re.fullmatch(r"d(\d+)-(\w+)", r.variant) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if rows and all(depth_named):
        schemes = sorted({m.group(2) for m in depth_named})
        for scheme in schemes:
            points = sorted(
                (int(m.group(1)), r) for m, r in zip(depth_named, rows, strict=True) if m.group(2) == scheme
            )
            xs = [d for d, _ in points]
            ys = [r.mean for _, r in points]
            ax.errorbar(xs, ys, yerr=_error_bars([r for _, r in points]), marker="o", capsize=4, label=scheme)
        ax.set_xlabel("depth (self-attention blocks)")
        ax.legend(title="residual scheme")
    else:
        ys = np.arange(len(rows))
        means = [r.mean for r in rows]
        ax.errorbar(means, ys, xerr=_error_bars(rows), fmt="o", capsize=4)
        ax.set_yticks(ys, [r.variant for r in rows])
        ax.invert_yaxis()
        ax.set_ylabel("variant")
    ax.set_title(f"{metric}: mean and 95% interval over seeds")
    ax.set_ylabel(metric) if rows and all(depth_named) else ax.set_xlabel(metric)
    fig.tight_layout()
    return fig
