"""Rendering rows (lists of dicts) as an aligned text table, CSV or JSON: one place for every command.

Rows come from the store, which holds whatever users and trials wrote: a table cell shows every
character that is not printable (control and escape sequences, a window-title sequence, line breaks)
as its escape (``\x1b``), so nothing stored reaches a terminal raw. JSON is strict (RFC 8259): a NaN
is ``null``, an infinity the string ``"inf"`` or ``"-inf"``; JSON escapes control characters itself.

Numbers a person reads are written by one function, :func:`format_number`, in one of three kinds:
``count`` (parameters, FLOPs: a whole number with thousands separators, ``937,806``), ``compact``
(three significant digits with an SI suffix, ``4.87M``: the progress line, which must stay one
terminal line) and ``real`` (six significant digits, never an exponent from a million up). A table
column whose name ends in ``params`` or ``flops`` is a count; JSON and CSV keep the raw numbers.
"""

from __future__ import annotations

import csv
import io
import json
import math
import unicodedata
from collections.abc import Sequence
from typing import Any

from trials.errors import printable  # the renderers escape cells with it; commands import it from here

FORMATS = ("table", "json", "csv")
NUMBER_KINDS = ("count", "compact", "real")
COUNT_COLUMNS = ("params", "flops")  # a column named so (or ``*.params``, ``*.flops``) holds counts
_SI_PREFIXES = ("", "k", "M", "G", "T", "P")


def format_number(value: float | int, kind: str = "real") -> str:
    """``value`` as a person reads it: ``count`` ``937,806`` (rounded to a whole number, separators,
    never ``.0``), ``compact`` ``4.87M`` (three significant digits, an SI suffix from a thousand up),
    ``real`` ``0.0042``/``93.1417`` (six significant digits; from a million up a whole number with
    separators, never ``4.86643e+06``). NaN and infinities read ``nan``, ``inf``, ``-inf`` in every kind."""
    if kind not in NUMBER_KINDS:
        raise ValueError(f"unknown number kind {kind!r}; use one of {', '.join(NUMBER_KINDS)}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        value = float(value)  # numpy scalars, Decimals: as the float they stand for
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if kind == "count":
        return f"{round(value):,}"
    if kind == "compact":
        return _compact(float(value))
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 1_000_000 else str(value)
    return f"{value:,.0f}" if abs(value) >= 1_000_000 else f"{value:.6g}"


def _compact(value: float) -> str:
    scale = 0
    while abs(value) >= 1000 and scale < len(_SI_PREFIXES) - 1:
        value /= 1000
        scale += 1
    text = f"{value:.3g}"
    if abs(float(text)) >= 1000 and scale < len(_SI_PREFIXES) - 1:  # 999.7k rounds to 1e+03k: 1M instead
        value, scale = value / 1000, scale + 1
        text = f"{value:.3g}"
    return text + _SI_PREFIXES[scale]


def column_kind(column: str) -> str:
    """How a table shows a column's numbers: ``count`` for parameters and FLOPs, else ``real``."""
    return "count" if column.rsplit(".", 1)[-1] in COUNT_COLUMNS else "real"


def _cell(value: Any, kind: str = "real") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool) and kind == "count"):
        return format_number(value, kind)
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


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: 2 for a wide or full-width character (``全``, ``ａ``), 0 for a combining
    mark, 1 otherwise. Padding by ``len()`` shifted every column after a cell holding such characters."""
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def render_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, kinds: dict[str, str] | None = None
) -> str:
    """Left-aligned text columns with a header rule; numbers right-aligned, each column's numbers in
    its kind (:func:`format_number`): ``kinds`` where given, else :func:`column_kind` of its name."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    kind = {col: (kinds or {}).get(col) or column_kind(col) for col in columns}
    cells = [[_cell(row.get(col), kind[col]) for col in columns] for row in rows]
    widths = [max(display_width(col), *(display_width(r[i]) for r in cells)) for i, col in enumerate(columns)]
    numeric = [all(isinstance(row.get(col), (int, float)) or row.get(col) is None for row in rows) for col in columns]

    def pad(value: str, width: int, right: bool) -> str:
        fill = " " * (width - display_width(value))
        return fill + value if right else value + fill

    def line(values: Sequence[str]) -> str:
        parts = [pad(v, w, num) for v, w, num in zip(values, widths, numeric, strict=True)]
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


def render(
    rows: Sequence[dict[str, Any]], fmt: str, columns: Sequence[str] | None = None, kinds: dict[str, str] | None = None
) -> str:
    """Render ``rows`` as ``table``, ``csv`` or ``json`` (JSON keeps every key, not only ``columns``;
    JSON and CSV keep raw numbers, ``kinds`` shape a table's only)."""
    if fmt == "json":
        return json.dumps(strict_json_value(list(rows)), indent=2, default=str, allow_nan=False)
    if fmt == "csv":
        return render_csv(rows, columns)
    if fmt == "table":
        return render_table(rows, columns, kinds)
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
