"""Rendering rows (lists of dicts) as an aligned text table, CSV or JSON: one place for every command.

Rows come from the store, which holds whatever users and trials wrote: a table cell shows every
character that is not printable (control and escape sequences, a window-title sequence, line breaks)
as its escape (``\x1b``), so nothing stored reaches a terminal raw. JSON is strict (RFC 8259): a NaN
is ``null``, an infinity the string ``"inf"`` or ``"-inf"``; JSON escapes control characters itself.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

FORMATS = ("table", "json", "csv")


def printable(text: str) -> str:
    """``text`` with every non-printable character as its escape: safe to print to a terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return printable("/".join(str(v) for v in value))
    return printable(str(value))


def strict_json_value(value: Any) -> Any:
    """``value`` with every non-finite float replaced (NaN -> None, +-inf -> "inf"/"-inf"), recursively."""
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {key: strict_json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json_value(item) for item in value]
    return value


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
        return json.dumps(strict_json_value(list(rows)), indent=2, default=str, allow_nan=False)
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
