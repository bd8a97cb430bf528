"""Which config columns a table shows: the searched parameters, always, whatever the front holds.

A front of one member, or members that agree on a knob, would otherwise hide what was searched
(the report and the command line differed on this). The spec's ``params`` keys name the knobs:
``embed_dim`` (a model field), ``lr`` (a training field), ``data.batch_size`` (a dotted path),
``depths[3]`` (one stage of a list-valued field, shown as the whole list).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_INDEX = re.compile(r"\[\d+\]$")
_DRAWN = {"int", "float", "choice"}


def searched_config_columns(spec: Mapping[str, Any] | None, columns: Iterable[str]) -> list[str]:
    """The ``config.*`` columns of the spec's searched parameters (its fixed ones are not searched), in
    the spec's order, without repeats."""
    present = list(columns)
    available = set(present)
    found: list[str] = []
    for key, domain in ((spec or {}).get("params", {}) or {}).items():
        if not _searched(domain):
            continue
        base = _INDEX.sub("", str(key))
        candidates = [f"config.{base}"] if "." in base else [f"config.model.{base}", f"config.training.{base}"]
        candidates.append(f"config.{base}")
        column = next((c for c in candidates if c in available), None)
        if column is not None and column not in found:
            found.append(column)
    return found


def _searched(domain: Any) -> bool:
    """A domain the search draws from (``int``, ``float``, ``choice``); ``{fixed: v}`` and a bare value
    are the spec's constants, said once under a table, not a column of it."""
    return isinstance(domain, Mapping) and bool(_DRAWN & set(domain))


def log_scaled_columns(spec: Mapping[str, Any] | None, columns: Iterable[str]) -> list[str]:
    """The ``config.*`` columns of the parameters the spec declares ``log: true`` (``lr``): drawn on log axes,
    and log-scaled in parameter importance, as the sampler searched them."""
    params = (spec or {}).get("params", {}) or {}
    present = list(columns)
    logged = []
    for key, domain in params.items():
        if isinstance(domain, Mapping) and domain.get("log"):
            logged.extend(searched_config_columns({"params": {key: domain}}, present))
    return list(dict.fromkeys(logged))
