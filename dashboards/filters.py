"""``--where`` filters: ``KEY=VALUE`` and comparisons, parsed once and typed by the column they read.

One syntax everywhere a study is filtered (``pareto``, ``fidelity``, ``Study.trials(where=...)``,
``Study.fidelity(where=...)``): ``KEY OP VALUE`` with ``OP`` one of ``=``, ``!=``, ``<``, ``<=``, ``>``,
``>=``, or ``KEY in V1,V2,...`` (the word ``in`` between spaces, the values separated by commas).
The key is everything before the first of ``!<>=``, so a value may hold those characters
(``name=a<b``); filters are ANDed.

Why typed by the column and not by the value: ``params>100000`` read as text would put ``99999``
above ``100000``; a number compares only with the numbers a column holds, text only with text, and
a comparison whose value and column disagree (``layout>3``, ``lr>high``) is refused naming the column
rather than quietly matching nothing. ``=``, ``!=`` and ``in`` match as ``KEY=VALUE`` always has: a
number equals a number (``lr=0.001`` matches ``1e-3``), anything equals its text as the tables show
it (``layout=CCTT``, ``depths=2/2/3/2``, ``None``).

What the tables show is what a filter sees, whatever the storage: a value the table shows ``-`` (null,
NaN, or a key a trial's config lacks) is ``None`` (``head_hidden_dim=None``; ``null`` and ``~`` too, as
YAML writes it); a flag equals ``true``/``false`` in any of YAML's spellings whether it is stored as a
boolean or as the number 1 or 0 (a trial's facts, ``cudnn_benchmark``, are recorded as numbers). A
slip that would match nothing is refused or read as meant, never left to say "no rows": ``==`` is
``=``, ``=>`` and ``=<`` are refused naming the operators, and quotes around a value (``layout in
'CCCT','CCTT'``, as a shell or Python user writes them) are dropped.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from trials.errors import DataError

__all__ = ["OPERATORS", "Filter", "FilterError", "Where", "WhereKey", "check_index", "filter_mask", "parse_filters"]

OPERATORS = ("=", "!=", "<", "<=", ">", ">=", "in")
ORDERING = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}  # arrays and text alike
SYNTAX = (
    "KEY=VALUE, KEY!=VALUE, KEY<VALUE, KEY<=VALUE, KEY>VALUE, KEY>=VALUE or KEY in V1,V2,... "
    "(e.g. layout=CCTT, lr>0.002, 'layout in CCTT,CTTT')"
)

_IN = re.compile(r"^\s*(?P<key>[^!<>=\s]+)\s+in\s+(?P<values>.*?)\s*$", re.DOTALL)
_COMPARISON = re.compile(r"^(?P<key>[^!<>=]*)(?P<op>!=|<=|>=|=|<|>)(?P<value>.*)$", re.DOTALL)
_OPERATOR_CHARACTERS = "!<>="
# Operators written the other way round (or as other languages write them): refused, naming the one meant.
_MEANT = {"=>": ">=", "=<": "<=", "=!": "!=", "<>": "!=", "!==": "!=", "===": "=", ">==": ">=", "<==": "<="}
# YAML's spellings (a spec writes ``choice: [null, 16]``, ``hflip: false``), and Python's ``None``.
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})
_NULL = frozenset({"None", "null", "Null", "NULL", "~"})


class FilterError(DataError, ValueError):
    """A filter that cannot be read or cannot apply to the column it names: one line naming it."""


@dataclass(frozen=True)
class Filter:
    """One filter: ``key`` (as given, ``depths[3]``), ``op`` (one of :data:`OPERATORS`), ``values``
    (one, or several for ``in``), and ``text``, the filter as the user wrote it, for messages."""

    key: str
    op: str
    values: tuple[str, ...]
    text: str

    @property
    def value(self) -> str:
        return self.values[0]


# What a ``where`` argument may be: one filter, several, or ``{KEY: VALUE}`` (see :func:`parse_filters`).
Where = str | Mapping[str, Any] | Iterable["str | Filter"] | None


@dataclass(frozen=True)
class WhereKey:
    """A filter key resolved: the column it reads (``config.model.depths``, or a metric such as
    ``params``) and, for ``depths[3]``, the list index."""

    key: str  # as given
    column: str  # config.model.depths, top1
    index: int | None = None
    metric: bool = False  # a cost or final metric of the trial, not a config value


def _unquoted(value: str) -> str:
    """``'CCTT'`` or ``"CCTT"`` -> ``CCTT``: quotes a shell kept, or a Python user wrote, are no part
    of a stored value (none of which begins and ends with the same quote)."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" and value[0] not in value[1:-1]:
        return value[1:-1].strip()
    return value


def parse_filter(text: str) -> Filter:
    """``"lr>0.002"`` -> ``Filter("lr", ">", ("0.002",))``; anything else of :data:`SYNTAX` refused in one line.

    ``lr==0.003`` is ``lr=0.003``; ``lr=>0.003`` (an operator run no filter has) is refused naming the
    one meant, where it used to compare with the text ``>0.003`` and match nothing."""
    if not isinstance(text, str):
        raise FilterError(f"filter {text!r} is not text: write it as {SYNTAX}")
    found = _IN.match(text)
    if found:
        values = tuple(_unquoted(v) for v in _unquoted(found["values"]).split(","))
        if not all(values):
            raise FilterError(
                f"filter {text!r}: 'in' takes values separated by commas, none empty (layout in CCTT,CTTT)"
            )
        return Filter(found["key"], "in", values, text)
    found = _COMPARISON.match(text)
    if not found or not found["key"].strip():
        raise FilterError(f"filter {text!r} is not {SYNTAX}")
    key, op, value = found["key"].strip(), found["op"], found["value"].strip()
    run = op + value[: len(value) - len(value.lstrip(_OPERATOR_CHARACTERS))]
    if run == "==":
        op, value = "=", value[1:].strip()
    elif run != op:
        meant = f"; did you mean {_MEANT[run]}?" if run in _MEANT else ""
        raise FilterError(
            f"filter {text!r}: {run} is no operator (operators: =, !=, <, <=, >, >=, in){meant} "
            f"(a value that begins with one of {_OPERATOR_CHARACTERS}: KEY in VALUE)"
        )
    value = _unquoted(value)
    if op in ORDERING and not value:
        raise FilterError(f"filter {text!r}: {op} needs a value to compare with")
    return Filter(key, op, (value,), text)


def parse_filters(where: Where) -> list[Filter]:
    """The filters of ``where``: a string (one filter), strings (``--where`` repeated), or a mapping
    ``{KEY: VALUE}`` (each ``KEY=VALUE``; a list value is ``KEY in ...``). A key given twice with ``=``
    is refused: the filters are ANDed and two values of one key would match nothing (keeping the
    last silently did); a key may take several comparisons (``lr>0.001``, ``lr<0.003``)."""
    if where is None:
        return []
    if isinstance(where, str):
        items: list[str | Filter] = [where]
    elif isinstance(where, Mapping):
        items = [
            Filter(str(k), "in", tuple(map(str, v)), f"{k} in {','.join(map(str, v))}")
            if isinstance(v, (list, tuple, set, frozenset))
            else Filter(str(k), "=", (str(v),), f"{k}={v}")
            for k, v in where.items()
        ]
    else:
        items = list(where)
    filters = [item if isinstance(item, Filter) else parse_filter(item) for item in items]
    equal: dict[str, Filter] = {}
    for flt in filters:
        if flt.op != "=":
            continue
        if flt.key in equal:
            raise FilterError(
                f"filter key {flt.key!r} given twice ({flt.key}={equal[flt.key].value}, {flt.key}={flt.value}): "
                "one value per key (several: KEY in V1,V2)"
            )
        equal[flt.key] = flt
    return filters


def as_text(value: Any) -> str:
    """A value as a filter compares it: ``None``, ``CCTT``, and a list as the tables show it (``2/2/3/2``)."""
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return "/".join(map(str, value))
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _is_number_or_flag(value: Any) -> bool:
    """A number, or a flag as the number it is recorded as elsewhere (``True`` 1, ``False`` 0)."""
    return isinstance(value, (int, float, np.integer, np.floating, np.bool_))


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return None if math.isnan(number) else number


def _equals(series: pd.Series, value: str) -> pd.Series:
    """``KEY=VALUE`` as it always matched: the value's text, or its number among the numbers; and a
    null (``None``, ``null``, ``~``) every missing value, a flag (``true``, ``False``...) the flags and
    the numbers 1 or 0, so ``cudnn_benchmark=false`` matches a fact recorded as 0.0 as
    ``throughput_shared=false`` matches a stored boolean (``series``: missing values already None)."""
    matched = (series.map(as_text) == value) | (series.map(str) == value)  # a list also as Python writes it
    if value in _NULL:
        return matched | series.map(lambda v: v is None).astype(bool)
    number = 1.0 if value in _TRUE else 0.0 if value in _FALSE else _number(value)
    if number is None:
        return matched
    numeric = series.map(_is_number_or_flag).astype(bool)
    return (numeric & (series.where(numeric, np.nan).astype(float) == number)) | matched


def _ordered(series: pd.Series, flt: Filter, column: str, study: str) -> pd.Series:
    """``<``, ``<=``, ``>``, ``>=``: numbers as numbers, text as text, and a value of the other kind
    than the column's refused naming the column."""
    present = [v for v in series if v is not None and not (isinstance(v, float) and math.isnan(v))]
    numbers = [v for v in present if _is_number(v)]
    texts = [v for v in present if isinstance(v, str)]
    others = [v for v in present if not _is_number(v) and not isinstance(v, str)]
    where = f" in study {study}" if study else ""
    if others and not numbers and not texts:
        kind = "lists" if isinstance(others[0], (list, tuple)) else type(others[0]).__name__ + " values"
        hint = f"; compare one element, e.g. {flt.key}[0]{flt.op}{flt.value}" if kind == "lists" else ""
        raise FilterError(f"filter {flt.text!r}: {column} holds {kind}{where}, which {flt.op} cannot order{hint}")
    number = _number(flt.value)
    if number is not None:
        if texts and not numbers:
            raise FilterError(
                f"filter {flt.text!r}: {column} holds text{where} (e.g. {texts[0]!r}), not numbers: a number "
                f"compares only with a numeric column (text compares with =, != or in)"
            )
        numeric = series.map(_is_number).to_numpy(dtype=bool)
        values = series.where(numeric, np.nan).to_numpy(dtype=float)
        return pd.Series(numeric & ORDERING[flt.op](values, number), index=series.index)
    if numbers:
        raise FilterError(
            f"filter {flt.text!r}: {column} holds numbers{where} (e.g. {numbers[0]!r}) and {flt.value!r} is not one"
        )
    textual = series.map(lambda v: isinstance(v, str)).to_numpy(dtype=bool)
    return pd.Series(
        [bool(t) and ORDERING[flt.op](v, flt.value) for t, v in zip(textual, series, strict=True)],
        index=series.index,
        dtype=bool,
    )


def check_index(name: str, key: WhereKey, values: Sequence[Any], study: str) -> None:
    """An indexed filter key (``depths[3]``) against the shape of what the study stored: refused, naming
    it, where the key holds no lists or the index is past the end of every one of them (an index out of
    range matched nothing and read as "no trial matches")."""
    lengths = [len(v) for v in values if isinstance(v, (list, tuple))]
    shown = key.column.removeprefix("config.")
    if not lengths and len(values):
        raise FilterError(f"filter key {name!r}: {shown} is not a list in study {study}; filter it without an index")
    if lengths and key.index >= max(lengths):
        index = str(key.index) if len(str(key.index)) <= 20 else f"{str(key.index)[:20]}..."
        raise FilterError(
            f"filter key {name!r}: index {index} is past the end of {shown}, whose lists hold at most "
            f"{max(lengths)} elements in study {study} (indices 0 to {max(lengths) - 1})"
        )


def _element(series: pd.Series, index: int) -> pd.Series:
    """Element ``index`` of each list value (None where the value is no list or too short)."""
    return series.map(lambda v: v[index] if isinstance(v, (list, tuple)) and index < len(v) else None)


def filter_mask(frame: pd.DataFrame, filters: Sequence[Filter], keys: Mapping[str, WhereKey], study: str = "") -> Any:
    """The rows of ``frame`` every filter keeps (ANDed), as a boolean array; each filter reads the
    column its key resolved to (``keys``, by :func:`dashboards.pareto.resolve_where`). A missing value
    (NaN, where pandas turned a config's null or absent key in a numeric column into one, or null) is
    None in every column, config or metric alike: the ``-`` of the tables, matched by ``KEY=None``."""
    mask = np.ones(len(frame), dtype=bool)
    for key in {keys[f.key].key: keys[f.key] for f in filters}.values():
        if key.index is not None:
            check_index(key.key, key, frame[key.column].tolist(), study)
    for flt in filters:
        key = keys[flt.key]
        series = frame[key.column] if key.index is None else _element(frame[key.column], key.index)
        series = series.astype(object).where(series.notna(), None)
        shown = key.column.removeprefix("config.") + (f"[{key.index}]" if key.index is not None else "")
        if flt.op == "=":
            kept = _equals(series, flt.value)
        elif flt.op == "!=":
            kept = ~_equals(series, flt.value)
        elif flt.op == "in":
            kept = np.logical_or.reduce([_equals(series, v).to_numpy(dtype=bool) for v in flt.values])
        else:
            kept = _ordered(series, flt, shown, study)
        mask &= np.asarray(kept, dtype=bool)
    return mask
