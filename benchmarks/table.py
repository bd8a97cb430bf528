"""A tabular benchmark: every configuration of a discrete space evaluated once, every epoch.

The format (``benchmarks/tables/README.md``) is a CSV, optionally gzip-compressed: one row per
configuration and epoch. Reserved columns: ``config_id``, ``epoch`` (1..E), ``top1`` (validation
top-1 after that epoch, %), ``epoch_s`` (seconds that epoch took), and per configuration
``flops``, ``params``, ``throughput`` (constant over its epochs). Every other column is a searched
parameter; its distinct values are its domain. ``benchmarks.search_quality`` replays search
methods against such a table (NAS-Bench-201 and Syne Tune's tabulated blackboxes work this way).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trials.errors import DataError

RESERVED = ("config_id", "epoch", "top1", "epoch_s", "flops", "params", "throughput")
PER_CONFIG = ("flops", "params", "throughput")  # known before training: constant over a configuration's epochs
COST_OBJECTIVES = PER_CONFIG  # objectives a search knows before the first epoch


class TableError(DataError, ValueError):
    """A table that does not follow the format; the message names the column or row."""


@dataclass
class Table:
    """A loaded table: per configuration its parameters, its cost, and its per-epoch curve."""

    path: str
    param_names: list[str]
    params: list[dict[str, Any]]  # by configuration index
    top1: np.ndarray  # (configs, epochs): validation top-1 after each epoch
    epoch_s: np.ndarray  # (configs, epochs)
    cost: dict[str, np.ndarray]  # flops, params, throughput: (configs,)
    config_ids: list[Any] = field(default_factory=list)
    _index: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def epochs(self) -> int:
        return int(self.top1.shape[1])

    def __len__(self) -> int:
        return len(self.params)

    def domains(self) -> dict[str, list[Any]]:
        """Each parameter's distinct values, sorted: the space the table covers."""
        return {name: sorted({p[name] for p in self.params}, key=_sort_key) for name in self.param_names}

    def index_of(self, params: dict[str, Any]) -> int | None:
        """The configuration with these parameter values (None: the table has no such configuration)."""
        if not self._index:
            self._index = {_key(p, self.param_names): i for i, p in enumerate(self.params)}
        return self._index.get(_key(params, self.param_names))

    def metric(self, name: str, epoch: int | None = None) -> np.ndarray:
        """One value per configuration: ``top1`` after ``epoch`` (the last by default), or a cost."""
        if name == "top1":
            return self.top1[:, (epoch or self.epochs) - 1]
        if name in self.cost:
            return self.cost[name]
        raise TableError(f"unknown objective {name!r}: a table has top1, {', '.join(PER_CONFIG)}")


def _sort_key(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def _key(params: dict[str, Any], names: list[str]) -> str:
    return json.dumps([_plain(params.get(n)) for n in names])


def _plain(value: Any) -> Any:
    """A parameter value as the table holds it: integral floats as ints, so 2 and 2.0 are one value."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def load_table(path: str | Path) -> Table:
    """Read and check a table (see the module docstring); a TableError names what is wrong."""
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise TableError(f"{path}: no such file") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, EOFError) as error:
        raise TableError(f"{path}: not a CSV table ({error})") from None
    missing = [c for c in RESERVED if c not in frame.columns]
    if missing:
        reserved = ", ".join(RESERVED)
        raise TableError(f"{path}: missing column(s) {', '.join(missing)}; the reserved columns are {reserved}")
    names = [c for c in frame.columns if c not in RESERVED]
    if not names:
        raise TableError(f"{path}: no parameter columns (every column but {', '.join(RESERVED)} is a parameter)")
    for column in ("epoch", "top1", "epoch_s", *PER_CONFIG):
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = frame.index[values.isna() & frame[column].notna()]
        if len(bad):
            value = frame[column][bad[0]]
            raise TableError(f"{path}: column {column!r}, row {int(bad[0]) + 2}: {value!r} is not a number")
        frame[column] = values
    if frame[["epoch", "top1", "epoch_s", "flops"]].isna().any().any():
        row = int(frame.index[frame[["epoch", "top1", "epoch_s", "flops"]].isna().any(axis=1)][0]) + 2
        raise TableError(f"{path}: row {row}: epoch, top1, epoch_s and flops must all be given")
    groups = frame.sort_values(["config_id", "epoch"]).groupby("config_id", sort=True)
    epochs = {len(g) for _, g in groups}
    if len(epochs) != 1:
        raise TableError(f"{path}: every configuration needs the same epochs 1..E; found {sorted(epochs)[:5]} epochs")
    count = epochs.pop()
    params, top1, epoch_s, ids = [], [], [], []
    cost = {name: [] for name in PER_CONFIG}
    for config_id, group in groups:
        if list(group["epoch"]) != list(range(1, count + 1)):
            raise TableError(f"{path}: config_id {config_id}: epochs must be 1..{count}, got {list(group['epoch'])}")
        for name in (*PER_CONFIG, *names):
            if group[name].nunique(dropna=False) != 1:
                raise TableError(f"{path}: config_id {config_id}: column {name!r} changes between epochs")
        first = group.iloc[0]
        params.append({name: _plain(first[name]) for name in names})
        for name in PER_CONFIG:
            cost[name].append(float(first[name]) if pd.notna(first[name]) else math.nan)
        top1.append(group["top1"].to_numpy(float))
        epoch_s.append(group["epoch_s"].to_numpy(float))
        ids.append(config_id)
    table = Table(
        path=str(path),
        param_names=names,
        params=params,
        top1=np.vstack(top1),
        epoch_s=np.vstack(epoch_s),
        cost={name: np.asarray(values) for name, values in cost.items()},
        config_ids=ids,
    )
    seen: dict[str, Any] = {}
    for config_id, p in zip(ids, params, strict=True):
        key = _key(p, names)
        if key in seen:
            raise TableError(f"{path}: config_id {config_id} has the same parameters as config_id {seen[key]}")
        seen[key] = config_id
    return table


def restrict(table: Table, fixed: dict[str, Any]) -> Table:
    """The configurations of ``table`` whose parameters take the ``fixed`` values, those parameters dropped:
    a sub-space of the table as a table of its own (e.g. the 8-epoch table at ``lr`` 3e-3, to set beside a
    table that searched only that sub-space). A name the table does not search is ignored; a value outside
    its domain is a TableError (the sub-space would be empty)."""
    fixed = {name: _plain(value) for name, value in fixed.items() if name in table.param_names}
    domains = table.domains()
    for name, value in fixed.items():
        if value not in domains[name]:
            raise TableError(f"{table.path}: {name}={value!r} is not a value of the table (it has {domains[name]})")
    keep = [i for i, p in enumerate(table.params) if all(p[n] == v for n, v in fixed.items())]
    suffix = ",".join(f"{n}={v}" for n, v in fixed.items())
    return subset(table, keep, drop=list(fixed), path=f"{table.path}[{suffix}]" if suffix else table.path)


def subset(table: Table, keep: list[int], drop: list[str] | tuple[str, ...] = (), path: str | None = None) -> Table:
    """The configurations ``keep`` (indices) of ``table`` as a table, the parameters ``drop`` left out."""
    names = [n for n in table.param_names if n not in drop]
    return Table(
        path=path or table.path,
        param_names=names,
        params=[{n: table.params[i][n] for n in names} for i in keep],
        top1=table.top1[keep],
        epoch_s=table.epoch_s[keep],
        cost={name: values[keep] for name, values in table.cost.items()},
        config_ids=[table.config_ids[i] for i in keep],
    )
