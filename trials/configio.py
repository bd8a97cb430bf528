"""Configuration as data: frozen dataclasses loaded from plain mappings (YAML) with path-named errors.

Each config dataclass validates itself in ``__post_init__`` and raises :class:`ConfigError`
naming the field. A field's simple rule (an integer in a range, a bounded number, a flag, one of a few
choices, a seed) is declared beside the field (:func:`integer`, :func:`number`, ...: a :class:`Rule`
in the field's metadata) and run by :func:`check_declared`; only cross-field and special rules stay as
code in ``__post_init__``. :func:`from_mapping` builds nested dataclasses from a mapping, rejects unknown
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
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

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


# Declared rules: what a field may hold, written beside the field, so that the rule, its error and the
# field's searchability live in one place (no hand-kept list elsewhere mirrors them).

RULE = "archsearch.rule"  # the key of a field's Rule in its dataclasses.field metadata
RuleKind = Literal["int", "number", "bool", "choice", "text"]


@dataclass(frozen=True)
class Rule:
    """What one config field may hold, checked by :func:`check_declared`.

    ``int``: an integer >= ``low`` (else ``message``) and <= ``high`` (else ``over``, the documented
    maximum). ``number``: an int or a finite float within ``low``/``high``, each bound exclusive where
    ``low_open``/``high_open``. ``bool``: true or false. ``choice``: one of ``choices`` (a bool choice
    matches a bool only: ``1`` is not ``true``). ``text``: a string, blank refused unless ``blank_ok``.
    ``message`` and ``over`` are the error lines, ``{value}`` standing for the offending value; they are
    spelled per field because users and tests read them. ``optional``: None is allowed (unset).
    ``searchable``: a search space may vary the field by its bare name (``params: {lr: ...}``).
    """

    kind: RuleKind
    message: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] = ()
    optional: bool = False
    searchable: bool = False
    blank_ok: bool = False
    over: str = ""

    def check(self, value: Any, field: str) -> None:
        """Raise ConfigError(``field``, ...) unless ``value`` is one this rule allows."""
        if value is None and self.optional:
            return
        if self.kind == "number" and is_number(value) and not math.isfinite(value):
            raise ConfigError(field, f"must be a finite number, got {value!r}")
        if not self._admits(value):
            raise ConfigError(field, self.message.replace("{value}", _shown(value)))
        if self.kind == "int" and self.high is not None and value > self.high:
            raise ConfigError(field, self.over.replace("{value}", _shown(value)))

    def _admits(self, value: Any) -> bool:
        if self.kind == "int":
            return is_int(value) and (self.low is None or value >= self.low)
        if self.kind == "number":
            return is_number(value) and _within(value, self.low, self.low_open, self.high, self.high_open)
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "choice":
            return any(isinstance(value, bool) == isinstance(c, bool) and value == c for c in self.choices)
        return isinstance(value, str) and (self.blank_ok or value.strip() != "")


def _within(value: float, low: float | None, low_open: bool, high: float | None, high_open: bool) -> bool:
    above = low is None or (value > low if low_open else value >= low)
    below = high is None or (value < high if high_open else value <= high)
    return above and below


def _shown(value: Any) -> str:
    """A value as an error line repeats it: ``repr``, an integer capped (:func:`shown_int`)."""
    return shown_int(value) if is_int(value) else repr(value)


def declared(default: Any, rule: Rule) -> Any:
    """A dataclass field with ``default`` and its declared ``rule`` (see :func:`check_declared`)."""
    return dataclasses.field(default=default, metadata={RULE: rule})


def integer(
    default: int | None, low: int, high: int, must: str = "", *, optional: bool = False, over: str = "",
    searchable: bool = False,
) -> Any:  # fmt: skip
    """An integer field in ``low..high``. ``must``: what a value below ``low`` (or no integer) is told,
    ``must be an integer >= LOW`` unless given; ``over``: what one above ``high`` is told, the limit."""
    must = must or f"must be an integer >= {low}"
    over = over or f"must be at most {high:,}"
    rule = Rule("int", f"{must}, got {{value}}", low=low, high=high, optional=optional, searchable=searchable,
                over=f"{over}, got {{value}}")  # fmt: skip
    return declared(default, rule)


def number(
    default: float | None, *, gt: float | None = None, ge: float | None = None, lt: float | None = None,
    le: float | None = None, must: str = "", optional: bool = False, searchable: bool = False,
) -> Any:  # fmt: skip
    """A number field bounded by ``gt``/``ge`` below and ``lt``/``le`` above. ``must`` defaults to the
    bounds as written (``must be > 0``, ``must be in [0, 1)``)."""
    low, high = (gt if gt is not None else ge), (lt if lt is not None else le)
    if not must and low is not None and high is not None:
        must = f"must be in {'(' if gt is not None else '['}{low}, {high}{')' if lt is not None else ']'}"
    elif not must and low is not None:
        must = f"must be {'>' if gt is not None else '>='} {low}"
    elif not must and high is not None:
        must = f"must be {'<' if lt is not None else '<='} {high}"
    rule = Rule(
        "number", f"{must or 'must be a number'}, got {{value}}", low=low, high=high, low_open=gt is not None,
        high_open=lt is not None, optional=optional, searchable=searchable,
    )  # fmt: skip
    return declared(default, rule)


def flag(default: bool | None, *, optional: bool = False) -> Any:
    """A true/false field (None too where ``optional``: unset, decided later)."""
    return declared(default, Rule("bool", "must be true or false, got {value}", optional=optional))


def one_of(default: Any, choices: tuple[Any, ...], message: str = "") -> Any:
    """A field that holds one of ``choices``; ``message`` (with ``{value}``) is the error line."""
    message = message or f"must be one of {', '.join(map(str, choices))}; got {{value}}"
    return declared(default, Rule("choice", message, choices=choices))


def text(default: str | None, message: str, *, optional: bool = False, blank_ok: bool = False) -> Any:
    """A string field; ``message`` (with ``{value}`` where it echoes it) is the error line."""
    return declared(default, Rule("text", message, optional=optional, blank_ok=blank_ok))


def seed_field(default: int = 0) -> Any:
    """A seed: an integer in 0..2**32 - 1 (:data:`MAX_SEED`, what numpy's RandomState takes)."""
    return integer(default, 0, MAX_SEED, f"must be an integer in 0..{MAX_SEED:,} (2**32 - 1)")


def rule_of(field: dataclasses.Field) -> Rule | None:
    """The rule declared for a dataclass field, if any."""
    return field.metadata.get(RULE)


def check_declared(config: Any) -> None:
    """Check every declared field of dataclass instance ``config`` in declaration order, so an error
    names the first bad key as a file lists them. Raises :class:`ConfigError` naming the field."""
    for f in dataclasses.fields(config):
        rule = rule_of(f)
        if rule is not None:
            rule.check(getattr(config, f.name), f.name)


def searchable_fields(cls: type) -> tuple[str, ...]:
    """The fields of dataclass ``cls`` declared ``searchable``, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(cls) if (rule := rule_of(f)) is not None and rule.searchable)
