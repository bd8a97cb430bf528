"""The report's interactive figures (plotly): hover names the trial, log-scaled knobs sit on log axes.

Why plotly: a reader of a static scatter cannot tell which dot is which trial; Optuna's
``plot_pareto_front`` answers that with a hover label, and so do these figures (trial number,
objectives, searched parameters). Why one offline file still: the report is mailed, attached to
tickets and opened on air-gapped clusters, so plotly.js goes into the page once, inline
(:func:`plotly_js`), never from a CDN; each figure is a ``<div>`` and a ``Plotly.newPlot`` call.

Size at scale: the scatter of a large study uses WebGL (``scattergl``) and keeps its per-point
data small (numbers as typed arrays, one hover row per trial with only the searched parameters);
README "Pareto fronts and reports" states the file size at 100 and 100,000 trials.

Every user-provided string (config values, parameter and study names) is HTML-escaped before it
reaches a hover template, because plotly renders a subset of HTML in labels; plotly's JSON
encoder escapes ``<`` and ``/`` so nothing can close the page's ``<script>``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from importlib.util import find_spec
from typing import Any

import numpy as np
import optuna
import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from dashboards.pareto import front_mask
from dashboards.values import axes_order, category_labels, is_categorical, numeric_values, per_stage_columns
from trials.status import TrialStatus

WEBGL_ABOVE = 2_000  # points per trace above which the scatter draws with WebGL (SVG slows past a few thousand)
_CONFIG = {"displaylogo": False, "responsive": True}
_PALETTE = [  # matplotlib's tab10, as the static figures use
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
]  # fmt: skip
_MAX_CATEGORIES = 10  # a numeric colour key with more distinct values gets a colour scale, not a legend


def plotly_js() -> str:
    """plotly.js itself (minified, ~4.7 MB): inlined once in the page's head, so no figure needs a network."""
    return get_plotlyjs()


def figure_html(fig: go.Figure, div_id: str) -> str:
    """A ``<div>`` and the script that draws ``fig`` into it; plotly.js must already be on the page."""
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG)


def _short(column: str) -> str:
    return column.removeprefix("config.")


def _text(value: Any) -> str:
    """A hover cell: numbers to 4 significant digits, lists as JSON, missing as empty; HTML-escaped."""
    if value is None or (isinstance(value, (float, np.floating)) and not np.isfinite(value)):
        return ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (float, np.floating)):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple, dict)):
        return html.escape(json.dumps(value, default=str))
    return html.escape(str(value))


def _hover(frame: pd.DataFrame, x_name: str, y_name: str, params: Sequence[str]) -> tuple[np.ndarray, str]:
    """(customdata, hovertemplate): trial number, both objectives and the searched parameters."""
    columns = [frame["number"].astype(int).astype(str).to_numpy()]
    lines = [
        "<b>trial %{customdata[0]}</b>",
        f"{html.escape(y_name)}: %{{y:.4g}}",
        f"{html.escape(x_name)}: %{{x:.4g}}",
    ]
    for i, param in enumerate(params, start=1):
        columns.append(frame[param].map(_text).to_numpy() if param in frame else np.full(len(frame), ""))
        lines.append(f"{html.escape(_short(param))}: %{{customdata[{i}]}}")
    return np.column_stack(columns), "<br>".join(lines) + "<extra></extra>"


def _scatter_trace(large: bool):
    return go.Scattergl if large else go.Scatter


def _log_axis(values: pd.Series, declared: bool) -> bool:
    """Log axis when the spec declares the parameter log-scaled, or positive values span > 50x (FLOPs)."""
    finite = values[np.isfinite(values)]
    if declared:
        return bool(len(finite) and (finite > 0).all())
    return bool(len(finite) >= 2 and (finite > 0).all() and finite.max() / finite.min() > 50)


def pareto_scatter(
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    params: Sequence[str] = (),
    color_by: str | None = None,
    *,
    title: str = "",
) -> go.Figure:
    """One point per completed trial with both objectives, the front joined by a step line.

    ``objectives`` are the front's (2 or 3): the first two are the axes, and the members marked are the
    front over all of them, the report's front table. With 3 the plane is a 2-objective view of that
    front: the title says so, the hover shows the third objective, and no step line is drawn (a member
    may sit below another in the plane). The step line turns at the inner corners, each dominated by
    both members it joins: :func:`step_shape`.

    Trial traces carry ``meta="trials"`` (the front line is drawn over them, not as extra points),
    so one can count exactly one point per completed trial. Trials without objective values
    (failed, diverged, infeasible, pruned before a value) cannot sit in the plane; the title
    counts them. ``color_by`` (a config column, or ``study``) splits the trials into one trace per
    value (a legend) or, for a many-valued number, colours them on a scale.

    Long because one interactive figure's traces (trials, front, step line, hover text) are built in order for the
    same axes.
    """
    x_name, y_name = axes_order(dict(list(objectives.items())[:2]))
    others = [name for name in objectives if name not in (x_name, y_name)]  # off the plane: in the hover
    frame = frame.reset_index(drop=True)
    x = numeric_values(frame[x_name]) if x_name in frame else pd.Series(np.nan, index=frame.index)
    y = numeric_values(frame[y_name]) if y_name in frame else pd.Series(np.nan, index=frame.index)
    placed = (frame["status"].astype(str) == TrialStatus.COMPLETED) & x.notna() & y.notna()
    done = frame[placed].assign(**{x_name: x[placed], y_name: y[placed]})
    on_front = np.asarray(front_mask(done, objectives), dtype=bool) if len(done) else np.zeros(0, dtype=bool)
    large = len(done) > WEBGL_ABOVE
    fig = go.Figure()
    groups: list[tuple[str, pd.DataFrame, dict[str, Any]]] = []
    if color_by and color_by in done and len(done):
        values = done[color_by]
        labels = category_labels(values)
        if not is_categorical(values) and labels.nunique() > _MAX_CATEGORIES:
            colour = {"color": numeric_values(values), "colorscale": "Viridis", "showscale": True,
                      "colorbar": {"title": html.escape(_short(color_by))}}  # fmt: skip
            groups.append(("trials", done, colour))
        else:
            for i, label in enumerate(sorted(labels.unique())):  # the trace name is escaped where it is set
                groups.append((label, done[labels == label], {"color": _PALETTE[i % len(_PALETTE)]}))
    else:
        groups.append(("trials", done, {"color": "#4c72b0"}))
    hover_params = [*others, *(p for p in params if p != color_by)]
    hover_params += [color_by] if color_by and color_by != "study" else []
    for label, part, marker in groups:
        if part.empty:
            continue
        custom, template = _hover(part, x_name, y_name, hover_params)
        if color_by == "study":
            template = f"study {html.escape(label)}<br>" + template
        trace = _scatter_trace(large)
        fig.add_trace(
            trace(
                x=part[x_name].to_numpy(float),
                y=part[y_name].to_numpy(float),
                mode="markers",
                name=html.escape(f"{_short(color_by)} = {label}" if color_by and label != "trials" else label),
                meta="trials",
                customdata=custom,
                hovertemplate=template,
                marker={"size": 5 if large else 8, "opacity": 0.5 if large else 0.75, **marker},
            )
        )
    several = len(objectives) > 2
    if on_front.any():
        front = done[on_front].sort_values(x_name, kind="stable")
        custom, template = _hover(front, x_name, y_name, hover_params)
        fig.add_trace(
            go.Scatter(
                x=front[x_name].to_numpy(float),
                y=front[y_name].to_numpy(float),
                mode="markers" if several else "lines+markers",
                line={"shape": step_shape(objectives[x_name]), "color": "black", "width": 1.5},
                marker={"size": 11, "symbol": "circle-open", "color": "black", "line": {"width": 2}},
                name=f"Pareto front of all {len(objectives)} objectives ({int(on_front.sum())})"
                if several
                else f"Pareto front ({int(on_front.sum())})",
                meta="front",
                customdata=custom,
                hovertemplate="on the front<br>" + template,
            )
        )
    missing = len(frame) - len(done)
    heading = title or f"{y_name} vs {x_name}"
    heading += f": {len(done):,} completed trials, {int(on_front.sum())} on the front"
    if several:
        heading += f" of {', '.join(objectives)} (a 2-objective view)"
    if missing:
        by_status = frame.loc[~placed, "status"].astype(str).value_counts()
        heading += " (not drawn, no objective values: " + ", ".join(f"{n} {s}" for s, n in by_status.items()) + ")"
    fig.update_layout(
        title={"text": html.escape(heading), "font": {"size": 14}},
        xaxis_title=html.escape(_axis_label(x_name, objectives[x_name])),
        yaxis_title=html.escape(_axis_label(y_name, objectives[y_name])),
        template="plotly_white",
        height=520,
        legend={"itemsizing": "constant"},
        hovermode="closest",
    )
    if len(done) and _log_axis(done[x_name], declared=False):
        fig.update_xaxes(type="log")
    return fig


def step_shape(x_direction: str) -> str:
    """Plotly's line shape for the front's step line, the members sorted by x: ``hv`` (across, then up
    or down) when lower x is better, ``vh`` when higher x is better, whichever way y points.

    Why: the line must turn at the inner corners, each dominated by both members it joins (the worse
    x and the worse y of the two), never at an outer corner that would dominate them; along a
    2-objective front y gets better exactly as x gets worse, so the worse x settles which corner it
    is. (:func:`dashboards.figures.step_where` is the same rule in matplotlib's words.)
    """
    return "vh" if x_direction == "max" else "hv"


def _axis_label(name: str, direction: str) -> str:
    return f"{name} ({direction}, {'higher' if direction == 'max' else 'lower'} is better)"


def hypervolume_curve(progress: pd.DataFrame) -> go.Figure:
    """Hypervolume against finished trials: where it flattens, the search stopped paying off."""
    fig = go.Figure(
        go.Scatter(
            x=progress["n_finished"].to_numpy(),
            y=progress["hypervolume"].to_numpy(float),
            mode="lines",
            line={"shape": "hv"},
            hovertemplate="after %{x} finished trials<br>hypervolume %{y:.4g}<extra></extra>",
            name="hypervolume",
        )
    )
    fig.update_layout(
        title="Hypervolume against finished trials", xaxis_title="finished trials", yaxis_title="hypervolume",
        template="plotly_white", height=360,
    )  # fmt: skip
    return fig


def learning_curves(curves: pd.DataFrame, numbers: Sequence[int]) -> go.Figure:
    """Eval top-1 and training loss per epoch of the front's members, one colour per trial."""
    metrics = [m for m in ("top1", "train_loss") if m in curves]
    fig = make_subplots(rows=1, cols=max(len(metrics), 1), subplot_titles=[html.escape(m) for m in metrics])
    for i, number in enumerate(numbers):
        rows = curves[curves["number"] == number].sort_values("epoch")
        for col, metric in enumerate(metrics, start=1):
            fig.add_trace(
                go.Scatter(
                    x=rows["epoch"].to_numpy(),
                    y=numeric_values(rows[metric]).to_numpy(float),
                    mode="lines+markers",
                    name=f"trial {int(number)}",
                    legendgroup=str(number),
                    showlegend=col == 1,
                    line={"color": _PALETTE[i % len(_PALETTE)]},
                    hovertemplate=f"trial {int(number)}<br>epoch %{{x}}<br>{metric} %{{y:.4g}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="epoch")
    fig.update_layout(template="plotly_white", height=380, title="Learning curves of the front's trials")
    return fig


def objective_vs_params(
    frame: pd.DataFrame,
    objective: str,
    params: Sequence[str],
    log_params: Sequence[str] = (),
    *,
    title: str = "",
) -> go.Figure:
    """One panel per searched parameter against ``objective`` (completed trials), hover naming the trial.

    A parameter the spec declares ``log: true`` (``lr``) is drawn on a log axis; categorical ones
    (layouts, booleans) on a category axis in sorted order; list-valued ones one panel per stage.
    """
    done = frame[(frame["status"] == TrialStatus.COMPLETED) & numeric_values(frame[objective]).notna()].copy()
    done[objective] = numeric_values(done[objective])
    logged = set(log_params)
    done, panels = per_stage_columns(done, params)
    n = max(len(panels), 1)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[html.escape(_short(p)) for p in panels])
    large = len(done) > WEBGL_ABOVE
    for k, param in enumerate(panels):
        row, col = divmod(k, cols)
        values = done[param] if param in done else pd.Series(dtype=object)
        categorical = is_categorical(values)
        xs = category_labels(values).map(html.escape) if categorical else numeric_values(values)
        fig.add_trace(
            _scatter_trace(large)(
                x=xs.to_numpy(),
                y=done[objective].to_numpy(float),
                mode="markers",
                showlegend=False,
                marker={"size": 4 if large else 7, "opacity": 0.4 if large else 0.75, "color": "#4c72b0"},
                customdata=done["number"].astype(int).to_numpy(),
                hovertemplate=f"trial %{{customdata}}<br>{html.escape(_short(param))}: %{{x}}<br>"
                f"{html.escape(objective)}: %{{y:.4g}}<extra></extra>",
            ),
            row=row + 1,
            col=col + 1,
        )
        base = param.split("[")[0]
        if categorical:
            fig.update_xaxes(type="category", categoryorder="category ascending", row=row + 1, col=col + 1)
        elif _log_axis(xs, declared=param in logged or base in logged):
            fig.update_xaxes(type="log", row=row + 1, col=col + 1)
    fig.update_yaxes(title_text=html.escape(objective), col=1)
    fig.update_layout(
        title=html.escape(title or f"{objective} against the searched parameters ({len(done):,} completed trials)"),
        template="plotly_white",
        height=300 * rows + 80,
    )
    return fig


# -- parameter importance: Optuna's evaluators over the study's completed trials -------------------


def _distributions(
    frame: pd.DataFrame, params: Sequence[str], log_params: Sequence[str]
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Optuna distributions of the searched parameters as the trials took them, and their values.

    Built from the observed values (not the spec's domains) so that a list-valued knob's stages and a
    parameter a later spec dropped are handled alike; a log-scaled one (``log: true``) keeps its
    log scale, which PED-ANOVA's kernel density and fANOVA's splits both respect.
    """
    distributions: dict[str, Any] = {}
    columns: dict[str, pd.Series] = {}
    logged = set(log_params)
    for param in params:
        values = frame[param]
        if values.isna().any():
            continue  # a conditional parameter: Optuna's evaluators need every trial to have it
        if is_categorical(values):
            labels = category_labels(values)
            choices = sorted(labels.unique())
            if len(choices) < 2:
                continue
            distributions[param] = optuna.distributions.CategoricalDistribution(choices)
            columns[param] = labels
            continue
        numbers = numeric_values(values)
        low, high = float(numbers.min()), float(numbers.max())
        if not low < high:
            continue
        log = (param in logged or param.split("[")[0] in logged) and low > 0
        if np.all(np.mod(numbers.to_numpy(), 1) == 0):
            distributions[param] = optuna.distributions.IntDistribution(int(low), int(high), log=log)
            columns[param] = numbers.astype(int)
        else:
            distributions[param] = optuna.distributions.FloatDistribution(low, high, log=log)
            columns[param] = numbers
    return distributions, pd.DataFrame(columns, index=frame.index)


# fANOVA's marginal variances cost ~trials x trees (73 s at 2,000 trials and Optuna's 64 trees on the
# 2-core machine): it gets a seeded sample of at most this many of the trials PED-ANOVA sees, and 32 trees.
FANOVA_TRIALS = 500


def evaluators() -> dict[str, tuple[Any, int | None]]:
    """Optuna's importance evaluators the report runs, each with the most trials it is given (None: all):
    PED-ANOVA always (no dependency, fast at any size); fANOVA too when scikit-learn (its random
    forest) is installed, on at most :data:`FANOVA_TRIALS`. Seeded: a report is reproducible."""
    found: dict[str, tuple[Any, int | None]] = {"PED-ANOVA": (optuna.importance.PedAnovaImportanceEvaluator(), None)}
    if find_spec("sklearn") is not None:
        fanova = optuna.importance.FanovaImportanceEvaluator(n_trees=32, seed=0)
        found["fANOVA"] = (fanova, FANOVA_TRIALS)
    return found


def param_importances(
    frame: pd.DataFrame,
    objectives: Mapping[str, str],
    params: Sequence[str],
    log_params: Sequence[str] = (),
) -> dict[str, dict[str, dict[str, float]]]:
    """``{evaluator: {objective: {param: importance}}}`` over the completed trials of ``frame``.

    Each objective gets its own single-objective in-memory Optuna study (the objective's direction,
    the trials' parameter values), the form Optuna's ``get_param_importances`` takes; importances of
    one objective sum to 1. Empty when fewer than 4 trials or fewer than one varying parameter.
    """
    done = frame[frame["status"] == TrialStatus.COMPLETED]
    done, stages = per_stage_columns(done, params)
    result: dict[str, dict[str, dict[str, float]]] = {}
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "study created in memory" line per objective
    try:
        for objective, direction in objectives.items():
            _importances_of(done, stages, objective, direction, log_params, result)
    finally:
        optuna.logging.set_verbosity(verbosity)
    return result


def _importances_of(
    done: pd.DataFrame,
    stages: Sequence[str],
    objective: str,
    direction: str,
    log_params: Sequence[str],
    result: dict[str, dict[str, dict[str, float]]],
) -> None:
    """One objective's importances by every evaluator, into ``result``."""
    if objective not in done:
        return
    values = numeric_values(done[objective])
    usable = done[values.notna()]
    distributions, table = _distributions(usable, stages, log_params)
    if len(usable) < 4 or not distributions:
        return
    trials = [
        optuna.trial.create_trial(
            params={p: (v.item() if hasattr(v, "item") else v) for p, v in row.items()},
            distributions=distributions,
            value=float(value),
        )
        for (_, row), value in zip(table.iterrows(), values[values.notna()], strict=True)
    ]
    for name, (evaluator, at_most) in evaluators().items():
        study = optuna.create_study(direction="maximize" if direction == "max" else "minimize")
        if at_most is not None and len(trials) > at_most:
            keep = np.sort(np.random.default_rng(0).choice(len(trials), size=at_most, replace=False))
            study.add_trials([trials[i] for i in keep])
        else:
            study.add_trials(trials)
        try:
            found = optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=True)
        except (ValueError, RuntimeError):  # e.g. every value equal: nothing to attribute
            continue
        result.setdefault(name, {})[objective] = {_short(p): float(v) for p, v in found.items()}


def importance_bars(importances: Mapping[str, Mapping[str, Mapping[str, float]]], n_trials: int) -> go.Figure:
    """One bar panel per (evaluator, objective): which knobs moved each objective, largest on top."""
    panels = [(e, o, v) for e, by_objective in importances.items() for o, v in by_objective.items()]
    cols = min(2, max(len(panels), 1))
    rows = (len(panels) + cols - 1) // cols or 1
    titles = [html.escape(f"{o} ({e})") for e, o, _ in panels]
    fig = make_subplots(
        rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.25, vertical_spacing=min(0.3, 0.5 / rows)
    )
    for k, (_, _, values) in enumerate(panels):
        ordered = sorted(values.items(), key=lambda kv: kv[1])
        fig.add_trace(
            go.Bar(
                x=[v for _, v in ordered],
                y=[html.escape(p) for p, _ in ordered],
                orientation="h",
                showlegend=False,
                marker={"color": "#4c72b0"},
                hovertemplate="%{y}: %{x:.3f}<extra></extra>",
            ),
            row=k // cols + 1,
            col=k % cols + 1,
        )
    fig.update_xaxes(range=[0, 1])  # importances of one objective sum to 1: panels compare at a glance
    fig.update_layout(
        title=f"Parameter importance per objective (Optuna's evaluators, {n_trials:,} completed trials)",
        template="plotly_white",
        height=max(320, 100 + rows * (70 + 24 * max((len(v) for *_, v in panels), default=1))),
    )
    return fig
