"""A table's parameters as the domains a user would write, and the table row a proposal of them is evaluated as.

Why: a tabular benchmark samples each numeric parameter at a few values (depth 1, 2, 3, 4; width 32 ... 256;
lr 1e-4 ... 1e-2), and a replay that declares each as ``{choice: values}`` hands the sampler a categorical
space: TPE and NSGA-II learn nothing from order or scale there. A user writes ``depth: {int: [1, 4]}``,
``width: {int: [32, 256], log: true}``, ``lr: {float: [1e-4, 1e-2], log: true}``;
``benchmarks.search_quality --domains ordinal`` replays that space (:func:`spec_params`).

The replay's model: the user's domain is continuous (or an integer range finer than the table), and the
table samples it. A proposal between two of the table's values (a log-int 45 between 32 and 64, any
float lr) is evaluated as the table's nearest value, in log space on a log domain, ties to the smaller
value (:class:`NearestRow`): its cost, and every epoch of its curve, are that row's.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.table import Table, TableError

MODES = ("choice", "ordinal")  # --domains: every parameter a choice (the committed results), or user domains
ORDINAL_MIN_VALUES = 3  # fewer distinct values stay a choice: two points say nothing of order or scale
# Values whose steps in log space agree within this (the largest over the smallest, less 1), and whose steps
# do not agree, are a geometric progression: a user's rounded grid is written ``log: true`` too (1e-3, 3e-3,
# 1e-2: log steps 1.10 and 1.20; 1, 2, 5, 10: 0.69 and 0.92), a dense linear one is not (100, 110, 130).
GEOMETRIC_TOLERANCE = 0.35


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _even(steps: Sequence[float], tolerance: float) -> bool:
    return max(steps) <= min(steps) * (1 + tolerance)


def _geometric(values: Sequence[float]) -> bool:
    """Positive values (sorted, distinct) evenly spaced in log space (:data:`GEOMETRIC_TOLERANCE`), not in
    linear space: an arithmetic progression is linear, however close its ratios (4, 5, 6)."""
    if values[0] <= 0 or _even([b - a for a, b in itertools.pairwise(values)], 1e-9):
        return False
    return _even([math.log(b / a) for a, b in itertools.pairwise(values)], GEOMETRIC_TOLERANCE)


def user_domain(values: Sequence[Any]) -> dict[str, Any]:
    """The domain a user would write for a parameter the table holds at ``values`` (its distinct values).

    Numbers, at least :data:`ORDINAL_MIN_VALUES` of them: all integers -> ``{int: [low, high]}`` with
    ``log: true`` where they are a geometric progression, else with the largest ``step`` that holds every
    value (an arithmetic progression's difference: the domain is exactly the table's values); any
    fraction -> ``{float: [low, high]}``, ``log: true`` where geometric. Booleans, strings, mixed
    columns and numbers with fewer distinct values -> ``{choice: values}``."""
    distinct = sorted(set(values), key=lambda v: (not _number(v), v if _number(v) else 0, str(v)))
    if len(distinct) < ORDINAL_MIN_VALUES or not all(_number(v) for v in distinct):
        return {"choice": list(distinct)}
    low, high = distinct[0], distinct[-1]
    if all(isinstance(v, int) for v in distinct):
        if _geometric(distinct):
            return {"int": [low, high], "log": True}
        step = math.gcd(*(b - a for a, b in itertools.pairwise(distinct)))
        return {"int": [low, high], **({"step": step} if step > 1 else {})}
    return {"float": [float(low), float(high)], **({"log": True} if _geometric(distinct) else {})}


def spec_params(table: Table, mode: str) -> dict[str, dict[str, Any]]:
    """The spec's ``params`` for a replay of ``table``: every parameter ``{choice: its values}``
    (``choice``), or the domain a user would write (``ordinal``, :func:`user_domain`)."""
    if mode not in MODES:
        raise TableError(f"--domains: {mode!r} is not one of {', '.join(MODES)}")
    domains = table.domains()
    if mode == "choice":
        return {name: {"choice": values} for name, values in domains.items()}
    return {name: user_domain(values) for name, values in domains.items()}


def nearest(values: Sequence[float], value: float, log: bool = False) -> float:
    """The one of ``values`` (sorted) nearest ``value``; in log space where ``log``; a tie goes to the smaller."""
    at = bisect.bisect_left(values, value)
    if at < len(values) and values[at] == value:
        return values[at]
    if at == 0:
        return values[0]
    if at == len(values):
        return values[-1]
    low, high = values[at - 1], values[at]
    closer_to_low = value * value <= low * high if log else value - low <= high - value  # log: v/low <= high/v
    return low if closer_to_low else high


class NearestRow:
    """The table row a proposal is evaluated as: each parameter of a numeric domain (``int`` or ``float``, a
    spec's :class:`~search_space.spec.IntDomain` / ``FloatDomain`` or its dict) moved to the table's nearest
    value (:func:`nearest`, in log space where the domain is log); a choice must match exactly. Two
    proposals may land on one row: each is a configuration of its own to the searcher (a user with a
    continuous domain trains both), so each is trained, and charged, as the table's row."""

    def __init__(self, table: Table, params: Mapping[str, Any]):
        self.table = table
        domains = table.domains()
        self.numeric: dict[str, tuple[list[Any], bool]] = {}  # name -> (the table's values, log)
        for name, domain in params.items():
            plain = domain if isinstance(domain, Mapping) else getattr(domain, "__dict__", {})  # a spec's domain
            if ("int" in plain or "float" in plain) and name in domains:
                self.numeric[name] = (domains[name], bool(plain.get("log", False)))

    def snapped(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` with each numeric parameter at the table's nearest value."""
        moved = dict(params)
        for name, (values, log) in self.numeric.items():
            if _number(moved.get(name)):
                moved[name] = nearest(values, moved[name], log)
        return moved

    def index(self, params: Mapping[str, Any]) -> int | None:
        """The row ``params`` is evaluated as (None: the table has no configuration there)."""
        return self.table.index_of(self.snapped(params))
