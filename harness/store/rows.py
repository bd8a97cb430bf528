"""The store's read boundary: every JSON column a read uses is parsed here, and only here, into a
typed record, with its nesting bounded; a value that does not parse is that row's problem.

The store holds whatever was written to it, by this version, an older one, or a hand-edited UPDATE:
a spec that is a JSON string, objectives lacking a direction, a trial config that is not JSON or a
list nested 10^5 deep, a ``final`` that is a string, a ``flops`` held as text. Each read takes the
JSON columns as text (:func:`json_text`: SQLAlchemy's JSON type would decode them inside the fetch,
where one bad row fails the whole query) and parses them with the functions below, which return a
record or raise :class:`~harness.store.errors.DamagedRow` naming the study, the trial and the column
in one line. The queries leave such a trial out of what they list and note it; the study beside it
is never hidden.

Reads that extract values in SQL (a final metric as a number, a config key, a sort order) stay in
SQL, for speed on 10^5-trial studies: the expressions built here are guarded so a damaged value
reads as NULL instead of failing the query (SQLite's JSON functions raise "malformed JSON";
PostgreSQL's ``jsonb`` column is always JSON, but of any shape), and :func:`trial_json_ok` is one
boolean per row saying whether its JSON has the shape the read needs. Only the rows it flags are
read again as text and parsed here, to say exactly what is wrong.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Text, and_, case, cast, false, func, literal_column, null, or_, type_coerce
from sqlalchemy.sql.elements import ColumnElement

from trials.training.predictions import PredictionsError, TestPredictions

from .errors import DamagedRow

MAX_DEPTH = 32  # levels of nesting a stored JSON value may have (a trial config has 3 or 4, a spec 5)
DIRECTIONS = ("max", "min")
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}


# One decoder, made once. It reads NaN and Infinity as Python wrote them (SQLAlchemy's JSON type
# writes a NaN in a config so): a row the product wrote is never damaged, though SQLite's JSON
# functions call it malformed (outcomes() then reads that row here, see trial_json_ok).
_DECODER = json.JSONDecoder()
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')  # linear on valid JSON, the only text it is run on
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _kind(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a number"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _too_deep(text: str) -> bool:
    """Whether valid JSON text nests deeper than :data:`MAX_DEPTH`, found without recursion. Fast
    path: a text with fewer brackets than the bound cannot exceed it (a trial config: two C-level
    counts)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth = 0
    for bracket in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        else:
            depth -= 1
    return False


class _Bad(Exception):
    """What is wrong with one column's value (the caller adds the study, the trial and the column)."""


def _loads(raw: Any) -> Any:
    """The value of a JSON column as read (text, or already decoded by a driver), or :class:`_Bad`."""
    if raw is None or (raw.__class__ is float and math.isnan(raw)):  # SQL NULL (pandas holds it as NaN)
        return None
    if isinstance(raw, (dict, list, int, float, bool)):
        return raw
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raise _Bad("is not JSON (it holds bytes)")
    if not isinstance(raw, str):
        raise _Bad(f"is not JSON (it holds {type(raw).__name__})")
    try:
        value = _DECODER.decode(raw)
    except RecursionError:  # nested past the interpreter's own limit (10^5 deep): refused, not a crash
        raise _Bad(f"is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise _Bad("is not JSON") from None
    if _too_deep(raw):  # deeper than the bound, though Python could parse it: later code recurses on it
        raise _Bad(f"is nested deeper than {MAX_DEPTH} levels")
    return value


def _object(value: Any, what: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{what}is {_kind(value)}, not a JSON object")
    return value


@dataclass(frozen=True)
class Objective:
    """One objective of a study: a metric and whether larger (``max``) or smaller (``min``) is better."""

    name: str
    direction: str


def _objectives(value: Any) -> tuple[Objective, ...]:
    shape = "a list of {name, direction}"
    if not isinstance(value, list):
        raise _Bad(f"is {_kind(value)}, not {shape}")
    found = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise _Bad(f"item {i} is {_kind(item)}, not {{name, direction}}")
        name, direction = item.get("name"), item.get("direction")
        for key, text in (("name", name), ("direction", direction)):
            if key not in item:
                raise _Bad(f"item {i} has no {key!r}")
            if not isinstance(text, str) or not text:
                raise _Bad(f"item {i}'s {key} is {_kind(text)}, not a name")
        if direction not in DIRECTIONS:
            raise _Bad(f"item {i}'s direction {str(direction)[:20]!r} is not max or min")
        found.append(Objective(str(name), str(direction)))
    return tuple(found)


def _parameters(value: Any) -> dict[str, dict[str, Any]] | None:
    """``{"sampled": {name: value}, "fixed": {name: value}}`` (null for trials of older versions)."""
    if value is None:
        return None
    for kind, values in _object(value).items():
        if not isinstance(values, dict):
            raise _Bad(f"{str(kind)[:20]!r} is {_kind(values)}, not an object of parameter values")
    return value


def _final(value: Any, numeric: Iterable[str] = ()) -> dict[str, Any]:
    """The final (and best) metrics: an object (or null, as {}); the metrics named in ``numeric``,
    where present, are numbers (or null)."""
    if value is None:
        return {}
    _object(value)
    for name in numeric:
        metric = value.get(name)
        if metric is not None and _kind(metric) != "a number":
            raise _Bad(f"holds {name!r} as {_kind(metric)}, not a number")
    return value


def _number(value: Any) -> Any:
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    raise _Bad(f"is {_kind(value) if isinstance(value, (str, bool)) else type(value).__name__}, not a number")


# -- the records ----------------------------------------------------------------------------------


def _parsed(study: str, trial: object, column: str, parse, raw: Any, *args: Any) -> Any:
    try:
        return parse(_loads(raw), *args)
    except _Bad as bad:
        raise DamagedRow(study, trial, column, str(bad)) from None


def objectives_of(study: str, raw: Any) -> tuple[Objective, ...]:
    """The study's ``objectives`` column as :class:`Objective` records, in the spec's order."""
    return _parsed(study, None, "objectives", _objectives, raw)


def study_object(study: str, column: str, raw: Any, *, nullable: bool = True) -> dict[str, Any] | None:
    """A study's JSON-object column (``spec``, ``hardware``): a dict (None where null and ``nullable``)."""

    def parse(value: Any) -> dict[str, Any] | None:
        return None if value is None and nullable else _object(value)

    return _parsed(study, None, column, parse, raw)


@dataclass(frozen=True)
class TrialJSON:
    """A trial's JSON columns, parsed: the config it trained, the parameter values the search drew
    and those the spec fixed (None for older trials), the final and best metrics."""

    config: dict[str, Any]
    parameters: dict[str, dict[str, Any]] | None
    final: dict[str, Any]


CONFIG_SECTIONS = ("model", "data", "training", "measure", "distributed")  # each an object where present


def _config(value: Any) -> dict[str, Any]:
    """A config object whose sections are objects: ``{"model": 7}`` is damage, said at this seam, not
    an AttributeError wherever a view reads ``config["model"]`` as a mapping."""
    if value is None:
        return {}
    config = _object(value)
    for section in CONFIG_SECTIONS:
        if section in config and not isinstance(config[section], dict):
            raise _Bad(f"has {section!r} as {_kind(config[section])}, not a JSON object")
    return config


def trial_config(study: str, number: object, raw: Any) -> dict[str, Any]:
    """A trial's config: an object (a JSON null, as {})."""
    return _parsed(study, number, "config", _config, raw)


def trial_parameters(study: str, number: object, raw: Any) -> dict[str, dict[str, Any]] | None:
    """The parameter values a trial took: ``{"sampled": {...}, "fixed": {...}}``, None for older trials."""
    return _parsed(study, number, "parameters", _parameters, raw)


def trial_final(study: str, number: object, raw: Any, numeric: Iterable[str] = ()) -> dict[str, Any]:
    """A trial's final and best metrics (null as {}); those named in ``numeric`` numbers where present."""
    return _parsed(study, number, "final", _final, raw, tuple(numeric))


def trial_json(study: str, number: object, config: Any, parameters: Any, final: Any) -> TrialJSON:
    """The three JSON columns of one trial as a :class:`TrialJSON`, or the first that does not parse."""
    return TrialJSON(
        trial_config(study, number, config),
        trial_parameters(study, number, parameters),
        trial_final(study, number, final),
    )


_TRIAL_SHAPES = {"config": _config, "parameters": _parameters, "final": _final}
# What a trial's final always records as numbers (trials.runner.final_metrics); it may hold text too
# (``notes``), so only these, and the metrics a read names, are checked.
FINAL_NUMBERS = ("top1", "top5", "eval_loss", "train_loss", "train_eval_loss", "best_top1", "epochs", "steps")


def trial_column(
    study: str, column: str, numbers: Sequence[Any], raws: Sequence[Any], numeric: Sequence[str] = ()
) -> tuple[list[Any], dict[int, DamagedRow]]:
    """One JSON column (``config``, ``parameters``, ``final``) of many trials, parsed in one tight
    loop (a study's 10^5 configs): the values (None where damaged) and the problems by position.
    ``numeric``: the final metrics that must be numbers where present."""
    shape = _TRIAL_SHAPES[column]
    extra = (tuple(numeric),) if column == "final" else ()
    values: list[Any] = []
    problems: dict[int, DamagedRow] = {}
    for position, (number, raw) in enumerate(zip(numbers, raws, strict=True)):
        try:
            values.append(shape(_loads(raw), *extra))
        except _Bad as bad:
            problems[position] = DamagedRow(study, number, column, str(bad))
            values.append(None)
    return values, problems


def value_at(config: dict[str, Any], path: Sequence[str]) -> Any:
    """The value at ``path`` of a parsed config (None where absent), as SQL's extraction reads it."""
    value: Any = config
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def json_value(study: str, number: object, column: str, raw: Any) -> Any:
    """One JSON value extracted in SQL (a config key's value, as text), parsed: any shape, bounded depth."""
    return _parsed(study, number, column, lambda value: value, raw)


def number_of(study: str, number: object, column: str, value: Any) -> int | float | None:
    """A numeric column's value (a cost, a seed, an epoch's metric): a number or null, never text."""
    try:
        return _number(value)
    except _Bad as bad:
        raise DamagedRow(study, number, column, str(bad)) from None


def not_numbers(values: Sequence[Any]) -> list[bool]:
    """For each value read where a number belongs: whether it is something else (text, JSON text,
    :data:`NOT_JSON`, bytes); None and NaN are missing numbers, not damage."""
    return [v is not None and v.__class__ not in (int, float) for v in values]


def numbers_damaged(study: str, numbers: Sequence[Any], column: str, values: Sequence[Any]) -> dict[int, DamagedRow]:
    """The rows of one numeric column that hold something else (text, bytes), as problems by
    position. The caller skips this for a column pandas holds as numbers (a C-level dtype check)."""
    found = {}
    for position, (number, value) in enumerate(zip(numbers, values, strict=True)):
        if isinstance(value, float) and math.isnan(value):
            continue
        try:
            number_of(study, number, column, value)
        except DamagedRow as problem:
            found[position] = problem
    return found


def test_predictions(
    study: str, number: object, classes: Any, images: Any, labels: Any, predictions: Any
) -> TestPredictions:
    """A trial's row of per-image test predictions as its record: base64 text of whole indices
    (length bounded before decoding), as many labels and predictions as its ``images`` says, every
    one a class below ``classes`` (:meth:`TestPredictions.decode`); else a :class:`DamagedRow`."""
    try:
        record = TestPredictions.decode({"classes": classes, "labels": labels, "predictions": predictions})
    except PredictionsError as bad:
        raise DamagedRow(study, number, "test_predictions", str(bad)) from None
    if not isinstance(images, int) or isinstance(images, bool) or record.count != images:
        raise DamagedRow(study, number, "test_predictions", f"holds {record.count:,} images, not {str(images)[:20]}")
    return record


# -- SQL: JSON columns as text, and guarded extraction ----------------------------------------------
#
# SQLite's JSON functions (3.40 here) parse the text again at every call and raise "malformed JSON"
# on a damaged value; each guard (json_valid) is one more parse per row, so the reads that scan a
# whole study use as few as they can: a metric is read as stored (one json_valid, one json_extract),
# NOT_JSON where its column is not JSON, and anything but a number is flagged by the caller in
# Python, with a shape check by the first character (no parse). PostgreSQL's jsonb is stored
# parsed: its checks cost next to nothing, and are made in SQL.

NOT_JSON = "\x00not JSON"  # what a metric read on SQLite holds where its column is not JSON: never a number
_JSON_SPACE = " \t\n\r"


def json_text(column: Any, label: str | None = None) -> ColumnElement[str]:
    """A JSON column read as its text (parsed by this module, not inside the driver's fetch)."""
    return cast(column, Text).label(label or column.name)


def _sqlite_path(path: Sequence[str]) -> str:
    return "$" + "".join(f'."{part}"' for part in path)


def _sqlite_valid(column: Any) -> ColumnElement[bool]:
    return func.coalesce(func.json_valid(column), 0) == 1


def _sqlite_starts(column: Any, firsts: Sequence[str]) -> ColumnElement[bool]:
    """The JSON text's first character is one of ``firsts`` (``{``: an object, ``n``: null), unparsed."""
    first = func.substr(func.ltrim(type_coerce(column, Text), _JSON_SPACE, type_=Text), 1, 1, type_=Text)
    return first.in_(firsts)


def _within_depth(column: Any, dialect: str) -> ColumnElement[bool]:
    """The value cannot nest deeper than :data:`MAX_DEPTH`. SQLite: at most that many opening
    brackets in its text (string operations, no parse; Python's parse decides the others).
    PostgreSQL: nothing at level MAX_DEPTH below the root (a jsonpath walk of the parsed value,
    exactly Python's bound)."""
    if dialect == "sqlite":
        text_ = type_coerce(column, Text)
        stripped = func.replace(func.replace(text_, "[", "", type_=Text), "{", "", type_=Text)
        return func.length(text_) - func.length(stripped) <= MAX_DEPTH
    deeper = literal_column(f"'lax $.**{{{MAX_DEPTH} to last}}'::jsonpath")
    return ~func.coalesce(func.jsonb_path_exists(column, deeper), false())


def _pg_type(column: Any, path: Sequence[str] = ()) -> ColumnElement[str]:
    if not path:
        return func.jsonb_typeof(column)
    return func.jsonb_typeof(column[tuple(path)] if len(path) > 1 else column[path[0]])


def json_number(column: Any, key: str, dialect: str) -> ColumnElement[Any]:
    """``column[key]`` as a number in SQL, NULL where the column is not JSON, not an object, lacks the
    key or holds anything else there: an order (``--sort top1``) that a damaged row never fails
    (SQLite raises "malformed JSON" on it; PostgreSQL's cast raises on a string)."""
    if dialect == "sqlite":
        path = _sqlite_path([key])
        numeric = func.json_type(column, path).in_(("integer", "real"))
        return case((~_sqlite_valid(column), null()), (numeric, func.json_extract(column, path)), else_=null())
    return case((_pg_type(column, [key]) == "number", column[key].as_float()), else_=null())


def json_metric(column: Any, key: str, dialect: str) -> ColumnElement[Any]:
    """``column[key]`` for a read of a whole study: on SQLite the value as stored (a number, or text
    and JSON text where it holds something else, or :data:`NOT_JSON` where the column is not JSON),
    which the caller flags in Python unless it is a number; on PostgreSQL the number or NULL, its
    type checked by :func:`trial_json_ok`."""
    if dialect == "sqlite":
        value = func.json_extract(column, _sqlite_path([key]))
        return case((column.is_(None), null()), (_sqlite_valid(column), value), else_=NOT_JSON)
    return json_number(column, key, dialect)


def json_path_text(column: Any, path: Sequence[str], dialect: str) -> ColumnElement[str]:
    """The JSON text of the value at ``path`` (parse it with :func:`json_value`), NULL where absent
    or where the column is not JSON."""
    if dialect == "sqlite":
        value = func.json_quote(func.json_extract(column, _sqlite_path(path)))
        return type_coerce(case((~_sqlite_valid(column), null()), else_=value), Text)
    return cast(column[tuple(path)], Text)


def trial_json_ok(trial: Any, dialect: str, *, numeric_final: Sequence[str] = ()) -> ColumnElement[bool]:
    """One boolean per trial row: its config is a JSON object (or null) that cannot nest past
    :data:`MAX_DEPTH` (:func:`_within_depth`); where ``numeric_final``
    metrics are read, its final is an object or null, holding them as numbers where present (on
    SQLite that last part, and the final being JSON, is the caller's check of the :func:`json_metric`
    values). False rows are read again and parsed by :func:`trial_config`/:func:`trial_final`: what
    is wrong is said, and a row that parses after all (a NaN Python wrote, which SQLite's JSON
    functions refuse) is read from that parse."""
    config, final = trial.c.config, trial.c.final
    if dialect == "sqlite":
        valid = _sqlite_valid(config)
        sections = [
            func.coalesce(case((valid, func.json_type(config, _sqlite_path([name]))), else_="object"), "object")
            == "object"
            for name in CONFIG_SECTIONS
        ]
        config_ok = and_(valid, _sqlite_starts(config, ("{", "n")), _within_depth(config, dialect), *sections)
        final_ok = or_(final.is_(None), _sqlite_starts(final, ("{", "n")))
    else:
        sections = [func.coalesce(_pg_type(config, [name]), "object") == "object" for name in CONFIG_SECTIONS]
        config_ok = and_(
            func.coalesce(_pg_type(config).in_(("object", "null")), false()), _within_depth(config, dialect), *sections
        )
        numbers = [func.coalesce(_pg_type(final, [name]), "null").in_(("number", "null")) for name in numeric_final]
        shape = func.coalesce(_pg_type(final).in_(("object", "null")), false())
        final_ok = or_(final.is_(None), and_(shape, *numbers))
    return and_(config_ok, final_ok) if numeric_final else config_ok
