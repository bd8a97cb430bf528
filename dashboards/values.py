"""How the report reads config and metric values: numbers, category labels, axis order, per-stage knobs.

Shared by the static figures (:mod:`dashboards.figures`, matplotlib) and the interactive ones
(:mod:`dashboards.interactive`, plotly), so both draw the same trials the same way whatever the
drawing library: a config column may mix text, numbers, lists and missing values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd


def numeric_values(series: pd.Series) -> pd.Series:
    """Numbers as floats; anything else (text, lists, None, booleans) as NaN."""
    if series.dtype.kind in "iuf":
        return series.astype(float)
    return series.map(
        lambda v: float(v) if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) else np.nan
    )


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and np.isnan(value))


def category_labels(values: pd.Series) -> pd.Series:
    """Config values as category labels: text as is, lists and dicts as JSON, missing values as "missing".

    Config columns of a study mix types (a key only some families have, a list-valued knob), and
    text and floats cannot be sorted together: labels are always strings.
    """

    def label(value: Any) -> str:
        if is_missing(value):
            return "missing"
        if isinstance(value, (list, dict)):
            return json.dumps(value, default=str)
        return str(value)

    return values.map(label).astype(object)


def axes_order(objectives: Mapping[str, str]) -> tuple[str, str]:
    """(x, y): a cost (min) on x and a quality (max) on y when there is one of each, the usual reading."""
    names = list(objectives)
    if len(names) != 2:
        raise ValueError(f"a Pareto scatter needs exactly 2 objectives, got {names}")
    first, second = names
    if objectives[first] == "max" and objectives[second] == "min":
        return second, first
    return first, second


def is_categorical(values: pd.Series) -> bool:
    """Strings, booleans and mixed values are categories; numbers are a scale (depth, width, lr)."""
    present = values.dropna()
    if present.empty:
        return True
    if present.map(lambda v: isinstance(v, bool)).all():
        return True
    return numeric_values(present).isna().any()


def per_stage_columns(frame: pd.DataFrame, params: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """List-valued parameters (CoAtNet's ``depths``, ``dims``) as one column per stage, ``depths[2]``,
    keeping only the stages that vary: a panel per stage reads, a whole list as a tick label does not."""
    out, names = frame.copy(), []
    for param in params:
        values = out[param] if param in out else pd.Series(dtype=object)
        lists = values.dropna()
        if lists.empty or not lists.map(lambda v: isinstance(v, (list, tuple))).all():
            names.append(param)
            continue
        width = int(lists.map(len).max())
        for i in range(width):
            column = f"{param}[{i}]"
            out[column] = values.map(lambda v, i=i: v[i] if isinstance(v, (list, tuple)) and len(v) > i else None)
            if out[column].map(lambda v: json.dumps(v, default=str)).nunique() > 1:
                names.append(column)
    return out, names
