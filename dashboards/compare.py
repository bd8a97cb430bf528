"""What differs between studies whose trials are read together (``pareto A B``, ``report A B``).

A front over several studies is only one front when its trials were measured alike: CoAtNet's
top-1 on synthetic data and CaiT's on MNIST are different quantities that happen to share a
name. These pure functions read each study's stored spec and name the differences that make the
fronts incomparable (dataset, image size, training budget, objectives; the family for context),
so the commands can say so in one line instead of silently merging them. No store access here:
callers pass ``{study: store.study(study)["spec"]}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trials.config.data_config import NATIVE_IMAGE_SIZE

NOT_RECORDED = "not recorded"  # a spec (an older or hand-written one) without the key
# Spec keys that differ between any two studies and say nothing about comparability.
_IGNORED_KEYS = ("name",)


@dataclass(frozen=True)
class Difference:
    """One headline quantity the studies disagree on: ``values`` maps each study to its shown value."""

    label: str
    values: dict[str, str]
    unit: str = ""  # shared by every value (``epochs``), so the line reads ``1 vs 20 epochs``


def decode_spec(spec: Any) -> dict[str, Any]:
    """A stored spec as a dict: the store hands back JSON text on some backends, a dict on others."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError:
            return {}
    return dict(spec) if isinstance(spec, Mapping) else {}


def _section(spec: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = spec.get(key)
    return value if isinstance(value, Mapping) else {}


def _image_size(spec: Mapping[str, Any]) -> str | None:
    """The side length trials were trained at: the data's own, else the dataset's native size."""
    data = _section(spec, "data")
    if data.get("image_size") is not None:
        return str(data["image_size"])
    if _section(spec, "base_model").get("image_size") is not None:
        return str(spec["base_model"]["image_size"])
    native = NATIVE_IMAGE_SIZE.get(str(data.get("name")))
    return str(native) if native is not None else None


def _budget(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """(amount, unit): training steps when the spec counts them, else epochs."""
    training = _section(spec, "training")
    if training.get("steps") is not None:
        return str(training["steps"]), "steps"
    if training.get("epochs") is not None:
        return str(training["epochs"]), "epochs"
    return None


def _objectives(spec: Mapping[str, Any]) -> str | None:
    objectives = spec.get("objectives")
    if isinstance(objectives, Mapping) and objectives:
        return ",".join(f"{metric}:{direction}" for metric, direction in objectives.items())
    return None


def spec_differences(specs: Mapping[str, Any]) -> list[Difference]:
    """The headline differences between the studies' specs (``{study: stored spec}``), in reading order.

    Empty for one study, or when every headline agrees. A key no spec records is no difference;
    a key only some record is one (``not recorded`` for the others), because the reader cannot
    tell the two apart either.
    """
    decoded = {name: decode_spec(spec) for name, spec in specs.items()}
    if len(decoded) < 2:
        return []
    found: list[Difference] = []

    def add(label: str, values: dict[str, str | None], unit: str = "") -> None:
        if all(v is None for v in values.values()) or len(set(values.values())) < 2:
            return
        found.append(Difference(label, {k: NOT_RECORDED if v is None else v for k, v in values.items()}, unit))

    add("family", {k: (str(s["family"]) if s.get("family") is not None else None) for k, s in decoded.items()})
    add("dataset", {k: _dataset(s) for k, s in decoded.items()})
    add("image size", {k: _image_size(s) for k, s in decoded.items()})
    budgets = {k: _budget(s) for k, s in decoded.items()}
    units = {b[1] for b in budgets.values() if b is not None}
    if len(units) == 1 and all(b is not None for b in budgets.values()):
        add("budget", {k: b[0] for k, b in budgets.items() if b is not None}, unit=units.pop())
    else:  # epochs against steps (or unrecorded): each value carries its unit
        add("budget", {k: (f"{b[0]} {b[1]}" if b is not None else None) for k, b in budgets.items()})
    add("objectives", {k: _objectives(s) for k, s in decoded.items()})
    return found


def _dataset(spec: Mapping[str, Any]) -> str | None:
    name = _section(spec, "data").get("name")
    return str(name) if name is not None else None


def _values_text(difference: Difference, name_studies: bool) -> str:
    """``synthetic (A) vs mnist5k (B)``: studies sharing a value grouped, in first-seen order."""
    groups: dict[str, list[str]] = {}
    for study, value in difference.values.items():
        groups.setdefault(value, []).append(study)
    parts = [f"{value} ({', '.join(studies)})" if name_studies else value for value, studies in groups.items()]
    return " vs ".join(parts) + (f" {difference.unit}" if difference.unit else "")


def differences_line(differences: Sequence[Difference]) -> str | None:
    """One line naming every difference, or None when there is none.

    The first difference names the studies; the later ones too when there are more than two
    studies (with two, the values are in the same order as the first's, so names would be noise).
    """
    if not differences:
        return None
    many = len(differences[0].values) > 2
    parts = [f"{d.label} {_values_text(d, name_studies=(i == 0 or many))}" for i, d in enumerate(differences)]
    return "studies differ: " + "; ".join(parts) + ": their fronts are not comparable as one"


def flatten_spec(spec: Any) -> dict[str, Any]:
    """A stored spec as dotted keys (``data.name``, ``training.epochs``); lists stay whole values."""
    flat: dict[str, Any] = {}

    def walk(mapping: Mapping[str, Any], prefix: str) -> None:
        for key, value in mapping.items():
            if isinstance(value, Mapping) and value:
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value

    walk(decode_spec(spec), "")
    return flat


def differing_spec_keys(specs: Mapping[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """(dotted key, {study: value as text}) for every spec key whose values differ, in spec order.

    A key missing from a study's spec shows as ``not recorded``; the spec's own ``name`` is
    left out (it differs between studies by construction).
    """
    flat = {study: flatten_spec(spec) for study, spec in specs.items()}
    if len(flat) < 2:
        return []
    keys = list(dict.fromkeys(key for values in flat.values() for key in values))
    parents = {key.rsplit(".", 1)[0] for key in keys if "." in key}
    parents |= {prefix for key in parents for prefix in _prefixes(key)}
    rows = []
    for key in keys:
        if key in _IGNORED_KEYS or key in parents:  # a section off in one spec, set in another: its keys say it
            continue
        shown = {study: _shown(values, key) for study, values in flat.items()}
        if len(set(shown.values())) > 1:
            rows.append((key, shown))
    return rows


def _prefixes(key: str) -> list[str]:
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _shown(values: Mapping[str, Any], key: str) -> str:
    """A key's value in one spec; where the spec has the key's section switched off (``null``, e.g. no
    ``search.early_stopping``), that section's value, named: the key is not "not recorded", it is off."""
    if key in values:
        return _text(values[key])
    for prefix in reversed(_prefixes(key)):
        if prefix in values:
            return f"{_text(values[prefix])} ({prefix})"
    return NOT_RECORDED


def _text(value: Any) -> str:
    """A spec value as the table shows it: JSON for lists, dicts and null, so types stay visible."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)
