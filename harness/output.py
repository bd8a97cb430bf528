"""Rendering rows (lists of dicts) as an aligned text table, CSV or JSON: one place for every command."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

FORMATS = ("table", "json", "csv")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "/".join(str(v) for v in value)
    return str(value)


def render_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Left-aligned text columns with a header rule; numbers right-aligned."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    cells = [[_cell(row.get(col)) for col in columns] for row in rows]
    widths = [max(len(col), *(len(r[i]) for r in cells)) for i, col in enumerate(columns)]
    numeric = [all(isinstance(row.get(col), (int, float)) or row.get(col) is None for row in rows) for col in columns]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    out = [line(columns), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def render_csv(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    columns = list(columns or (rows[0].keys() if rows else []))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in row.items()})
    return buffer.getvalue().rstrip("\n")


def render(rows: Sequence[dict[str, Any]], fmt: str, columns: Sequence[str] | None = None) -> str:
    """Render ``rows`` as ``table``, ``csv`` or ``json`` (JSON keeps every key, not only ``columns``)."""
    if fmt == "json":
        return json.dumps(list(rows), indent=2, default=str)
    if fmt == "csv":
        return render_csv(rows, columns)
    if fmt == "table":
        return render_table(rows, columns)
    raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def nest_keys(flat: dict[str, Any], sep: str = ".") -> dict[str, Any]:
    """``{"model.depth": 4}`` -> ``{"model": {"depth": 4}}``: a flattened config back as a mapping."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(sep)
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out
