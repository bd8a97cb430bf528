"""Configuration as data: frozen dataclasses loaded from plain mappings (YAML) with path-named errors.

Each config dataclass validates itself in ``__post_init__`` and raises :class:`ConfigError`
naming the field. :func:`from_mapping` builds nested dataclasses from a mapping, rejects unknown
keys, and prefixes every error with the path of the offending key (``training.lr: ...``), so a
user can find the line in their YAML. Standard library only: a trial runs with torch alone.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from trials.errors import ArchsearchError, capped, cut_at_word

T = TypeVar("T")

# The one bound rule for integers, beside the finite-number rule: every integer of a spec or a trial
# config fits what consumes it. Any integer is a signed 64-bit one (torch, numpy and the store's SQL
# columns hold no more); a seed is below 2**32 (numpy's RandomState, under Optuna's samplers and
# ``np.random.seed``, takes no more); a budget or a size is at most its documented maximum (the
# ``MAX_*`` constants beside each field). Refused at load naming the key and the limit, exit 2.
MAX_INTEGER = 2**63 - 1
MAX_SEED = 2**32 - 1


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
            if not _looks_like_a_key(key):  # a line of some other file (a link to /etc/shadow): never echoed
                where = f"{path}: " if path else ""
                raise ConfigError(
                    "", f"{where}a key that is no config key, nor looks like one (not shown): is this the right "
                    f"file? valid keys are {', '.join(known)}",
                )  # fmt: skip
            raise ConfigError(_join(path, str(key)), f"unknown key; valid keys are {', '.join(known)}")


def _looks_like_a_key(key: Any) -> bool:
    """A config key as a person types one (``lr``, ``data_dir``, ``depths[3]``), short and without
    separators; anything else is echoed by no error, since it may be a line of another file."""
    return isinstance(key, str) and len(key) <= 64 and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\[\]-]*", key) is not None


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
        built = cls(**values)
    except ConfigError as error:
        raise error.under(path) from None
    for name, value in values.items():  # a field with a documented maximum named it above
        require_fits(value, _join(path, name))
    return built


def _require_finite(value: Any, path: str) -> None:
    """The one rule for numbers in a config: every float is finite (``.inf`` and ``.nan`` are YAML
    floats that every per-key range check would otherwise have to remember). Every integer fits in
    64 bits (:func:`require_fits`), checked once the fields' own limits have spoken."""
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


def shown_int(value: Any) -> str:
    """A value as an error line repeats it: capped, never 10,000 digits (nor Python's refusal to
    write an integer of more than 4,300)."""
    try:
        text = repr(value)
    except ValueError:
        return "an integer of over 4,300 digits"
    return capped(text, 40) if is_int(value) else capped(text)


def require_fits(value: Any, path: str) -> None:
    """An integer is a signed 64-bit one (:data:`MAX_INTEGER`), else a ConfigError at ``path``."""
    if is_int(value) and not -MAX_INTEGER - 1 <= value <= MAX_INTEGER:
        raise ConfigError(path, f"must fit a signed 64-bit integer (at most 2**63 - 1), got {shown_int(value)}")
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            require_fits(item, f"{path}[{index}]")


def require_int_in(value: Any, field: str, low: int, high: int, message: str) -> None:
    """``value`` is an integer in ``low..high``, else a ConfigError at ``field``: ``message`` (what it
    must be, e.g. ``must be a positive integer``) for a value that is no integer or below ``low``; the
    documented limit for one above ``high``."""
    if not (is_int(value) and value >= low):
        raise ConfigError(field, f"{message}, got {shown_int(value)}")
    if value > high:
        raise ConfigError(field, f"must be at most {high:,}, got {shown_int(value)}")


def require_seed(value: Any, field: str) -> None:
    """A seed: an integer in 0..2**32 - 1 (:data:`MAX_SEED`, what numpy's RandomState takes)."""
    require_int_in(value, field, 0, MAX_SEED, f"must be an integer in 0..{MAX_SEED:,} (2**32 - 1)")
