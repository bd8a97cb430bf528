"""Configuration as data: frozen dataclasses loaded from plain mappings (YAML) with path-named errors.

Each config dataclass validates itself in ``__post_init__`` and raises :class:`ConfigError`
naming the field. :func:`from_mapping` builds nested dataclasses from a mapping, rejects unknown
keys, and prefixes every error with the path of the offending key (``training.lr: ...``), so a
user can find the line in their YAML. Standard library only: a trial runs with torch alone.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from trials.errors import ArchsearchError, cut_at_word

T = TypeVar("T")


class ConfigError(ArchsearchError, ValueError):
    """Invalid configuration. ``field`` is the dotted path of the offending key."""

    kind = "spec"

    MAX_MESSAGE = 400  # one readable line: a huge offending value is cut (at a word), never printed whole

    def __init__(self, field: str, message: str):
        field = cut_at_word(field, 200)
        message = cut_at_word(message, self.MAX_MESSAGE)
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def under(self, prefix: str) -> ConfigError:
        """The same error, located under ``prefix`` (``lr`` -> ``training.lr``)."""
        field = f"{prefix}.{self.field}" if prefix and self.field else (prefix or self.field)
        return ConfigError(field, self.message)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _dataclass_in(annotation: Any) -> type | None:
    """The dataclass type inside ``X`` or ``X | None``, if any."""
    if dataclasses.is_dataclass(annotation):
        return annotation  # type: ignore[return-value]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if dataclasses.is_dataclass(arg):
                return arg
    return None


def check_fields(owner: type, data: Mapping[str, Any], path: str) -> None:
    """Reject keys that are not fields of ``owner``, naming the first one and the valid keys."""
    known = [f.name for f in dataclasses.fields(owner) if f.init]
    for key in data:
        if key not in known:
            raise ConfigError(_join(path, str(key)), f"unknown key; valid keys are {', '.join(known)}")


def from_mapping(cls: type[T], data: Any, path: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; nested dataclass fields are built recursively.

    Lists become tuples where the field's default is a tuple. Errors name the full key path.
    """
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"must be a mapping, got {type(data).__name__} {data!r}")
    check_fields(cls, data, path)
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        value = data[f.name]
        _require_finite(value, _join(path, f.name))
        nested = _dataclass_in(hints.get(f.name))
        if nested is not None and isinstance(value, Mapping):
            value = from_mapping(nested, value, _join(path, f.name))
        elif isinstance(value, list) and isinstance(f.default, tuple):
            value = tuple(value)
        values[f.name] = value
    try:
        return cls(**values)
    except ConfigError as error:
        raise error.under(path) from None


def _require_finite(value: Any, path: str) -> None:
    """The one rule for numbers in a config: every float is finite (``.inf`` and ``.nan`` are YAML
    floats that every per-key range check would otherwise have to remember)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(path, f"must be a finite number, got {value!r}")
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _require_finite(item, f"{path}[{index}]")


def to_mapping(config: Any) -> dict[str, Any]:
    """Plain dict of a (nested) config dataclass; tuples become lists (JSON/YAML friendly)."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return to_mapping(value)
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    if not (dataclasses.is_dataclass(config) and not isinstance(config, type)):
        return plain(config)
    if hasattr(config, "to_dict"):
        return config.to_dict()
    return {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config)}


# Small validators shared by the config dataclasses.


def require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ConfigError(field, message)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
