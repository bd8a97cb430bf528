"""The public Python API over a stored study: ``load_study(name)`` -> a read-only :class:`Study`.

What an Optuna user reaches for (``optuna.load_study(...).best_trials``), here over archsearch's
store: the front on the study's own objectives (verified values beside the in-trial ones where
``archsearch verify`` stored them), the trials, learning curves, hypervolume progress, the spec, and
any trial's config as ``trials.runner.run_trial`` takes it, so a front member can be trained longer.

Why the store is found through an entry point: ``dashboards`` sits below ``harness`` (the layer rule
of ARCHITECTURE.md, checked by ``tests/test_imports.py``) and reads studies through the
:class:`dashboards.reader.StudyReader` protocol only. Opening a store by URL is ``harness``'s job, so
the store registers its read-only opener in the package metadata (``pyproject.toml``:
``[project.entry-points."archsearch.study_readers"] sql = "harness.store:open_study_reader"``), the
way SQLAlchemy finds its dialects. ``load_study`` looks the opener up by name and calls it with the
URL; the opener resolves it exactly as the CLI resolves ``--store`` (the URL given, else
``$ARCHSEARCH_STORE``, else ``sqlite:///archsearch.db``) and opens the store read-only, as the
read commands do. Nothing here names ``harness``, and any object that implements the protocol (a
store already open, a fake in a test) can be passed as ``store`` instead of a URL.

Reading never writes: the store is opened read-only, and a study whose driver died is only shown
``interrupted``.

A damaged row (a JSON column or a number of the store that does not parse into its record) is the
project's typed error, never a bare ``ValueError``: the study's objectives or spec raise the store's
``DamagedRow`` (an :class:`~trials.errors.ArchsearchError`, the store kind), so does
:meth:`Study.trial_config` of a damaged trial; the frames leave damaged trials out with a
:class:`DamagedRowsLeftOut` warning naming each.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from difflib import get_close_matches
from importlib.metadata import distributions
from typing import Any

import pandas as pd

from dashboards.filters import Filter, Where, filter_mask, parse_filters
from dashboards.pareto import hypervolume_progress, parse_objectives, query_front, resolve_where
from dashboards.reader import StudyCounts, StudyReader
from dashboards.verified import compare_fronts
from search_space.url_secrets import sqlite_url_of_path
from trials.config.trial_config import TrialConfig, load_trial_config
from trials.configio import ConfigError
from trials.errors import ArchsearchError, DataError, capped
from trials.lazy import lazy_import
from trials.status import TrialStatus

fidelity_api = lazy_import("dashboards.fidelity")  # scipy: only when a fidelity is asked for

READER_GROUP = "archsearch.study_readers"  # the entry-point group a store registers its opener in
READER_NAME = "sql"  # the store of this project (harness.store.open_study_reader)

__all__ = [
    "READER_GROUP",
    "READER_NAME",
    "DamagedRowsLeftOut",
    "InfeasibleTrial",
    "Study",
    "StudyNotFound",
    "load_study",
]


def filter_trials(frame: pd.DataFrame, filters: Sequence[Filter], study: str) -> pd.DataFrame:
    """The rows of a trials frame (flat ``config.*`` columns) that pass every filter (parsed
    ``--where``); a key is a config key or a column of the frame. One rule for ``Study.trials(where=)``
    and ``archsearch trials --where``."""
    if not filters:
        return frame
    config = [c for c in frame.columns if c.startswith("config.")]
    other = [c for c in frame.columns if not c.startswith(("config.", "sampled.", "fixed."))]
    keys = resolve_where(filters, {study: config}, {study: other})
    return frame[filter_mask(frame, filters, keys, study)].reset_index(drop=True)


class StudyNotFound(DataError, LookupError):
    """The store has no study of that name: a one-line message naming the nearest names it has, then
    the others (:func:`unknown_study_message`)."""


class InfeasibleTrial(DataError):
    """The trial was infeasible (never trained) and its stored config does not build: the message says why."""


KNOWN_SHOWN = 20  # studies an unknown name's message lists (as the command line's)
NEAR_SHOWN = 3  # names like the one asked for, offered first


def unknown_study_message(name: str, known: Sequence[str]) -> str:
    """One line, however long the name or however many studies: the names nearest the one asked for
    first (those it begins, as ``quickstart`` begins ``quickstart-20250101-120000``, then look-alikes),
    then the studies the store has. Optuna's ``load_study`` takes exact names only, and so does this."""
    names = [str(k) for k in known]
    if not names:
        return f"study {capped(name)!r} not found: the store has no studies yet"
    near = [k for k in reversed(names) if k.startswith(name) and name] + get_close_matches(name, names, n=NEAR_SHOWN)
    near = list(dict.fromkeys(near))[:NEAR_SHOWN]
    hint = f"did you mean {' or '.join(repr(capped(k)) for k in near)}? " if near else ""
    more = f" and {len(names) - KNOWN_SHOWN} more" if len(names) > KNOWN_SHOWN else ""
    return (
        f"study {capped(name)!r} not found (study names are exact); {hint}"
        f"known studies: {', '.join(capped(k) for k in names[:KNOWN_SHOWN])}{more}"
    )


class DamagedRowsLeftOut(UserWarning):
    """A read of the study left out a trial whose stored JSON or numbers do not parse (one warning
    per trial and column, naming them)."""


def _opener(name: str = READER_NAME) -> Callable[[str | None], StudyReader]:
    """The registered opener ``name`` of the entry-point group :data:`READER_GROUP`.

    Every installed distribution is searched, not only the first of each name (as
    ``importlib.metadata.entry_points`` does): a stale ``archsearch.egg-info`` left in the working
    directory by an older build would otherwise hide the installed metadata that registers the opener.
    """
    found = [ep for dist in distributions() for ep in dist.entry_points if ep.group == READER_GROUP and ep.name == name]
    if not found:
        raise DataError(
            f"no store opener {name!r} is registered under the entry points {READER_GROUP!r}: "
            "install archsearch (pip install -e .) so its metadata names harness.store.open_study_reader, "
            "or pass an open store as load_study(..., store=STORE)"
        )
    return found[0].load()


def load_study(name: str, store: str | os.PathLike | StudyReader | None = None) -> Study:
    """The study ``name`` of a store, read-only.

    ``store``: a URL (``sqlite:///PATH``, ``postgresql://USER@HOST/DB``), a path to a SQLite store
    (``pathlib.Path``), None for what the CLI would use (``$ARCHSEARCH_STORE``, else
    ``sqlite:///archsearch.db``), or a store already open (anything implementing
    :class:`StudyReader`, which the returned study then does not close); any other type is a
    ``TypeError`` naming the argument, as is a ``name`` that is not a string.
    """
    if not isinstance(name, str):
        raise TypeError(f"load_study: name must be a study name (str), not {type(name).__name__}")
    if isinstance(store, StudyReader):
        reader, owned = store, False
    else:
        reader, owned = _opener()(store_url_of(store, "load_study")), True
    try:
        known = reader.study_names()
        if name not in known:
            raise StudyNotFound(unknown_study_message(name, known))
    except BaseException:
        if owned:
            _close(reader)
        raise
    return Study(name, reader, owns_reader=owned)


def store_url_of(store: Any, caller: str) -> str | None:
    """The URL of ``store`` given as a URL (str), a path to a SQLite file (``os.PathLike``), or None
    (the default store). Anything else is refused with a :class:`TypeError` naming the argument: a
    wrong type must not surface later as an unrelated error deep in the store."""
    if store is None or isinstance(store, str):
        return store
    if isinstance(store, os.PathLike):
        return sqlite_url_of_path(store)
    raise TypeError(
        f"{caller}: store must be a store URL (str), a path to a SQLite file or an open store, "
        f"not {type(store).__name__}"
    )


def _close(reader: StudyReader) -> None:
    close = getattr(reader, "close", None)  # the protocol does not require one: a fake has nothing to close
    if callable(close):
        close()


def _damaged(reader: StudyReader, name: str) -> list[Exception]:
    """The damaged rows of study ``name`` the reader has found (a store notes them; a reader that
    does not, none)."""
    damaged_rows = getattr(reader, "damaged_rows", None)
    return list(damaged_rows(name)) if callable(damaged_rows) else []


class Study:
    """A stored study, read-only: every method reads the store when called (a running search's
    latest trials show up), and none writes. Use as a context manager, or call :meth:`close`, to
    release a store that :func:`load_study` opened."""

    def __init__(self, name: str, reader: StudyReader, *, owns_reader: bool = False) -> None:
        self.name = name
        self._reader = reader
        self._owns_reader = owns_reader
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        try:
            objectives: Any = self.objectives
        except ArchsearchError:  # a damaged objectives column: repr never raises
            objectives = "damaged"
        return f"Study({self.name!r}, objectives={objectives})"

    def _warn_left_out(self) -> None:
        """A :class:`DamagedRowsLeftOut` warning for each trial the reads so far left out, once each."""
        for problem in _damaged(self._reader, self.name):
            if getattr(problem, "trial", None) is not None and str(problem) not in self._warned:
                self._warned.add(str(problem))
                warnings.warn(f"{problem}; left out", DamagedRowsLeftOut, stacklevel=3)

    def __enter__(self) -> Study:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the store, where :func:`load_study` opened it (one passed in stays open)."""
        if self._owns_reader:
            _close(self._reader)
            self._owns_reader = False

    @property
    def record(self) -> dict[str, Any]:
        """The stored record: status (as recorded), message, times, version, hardware, spec, objectives."""
        return self._reader.study(self.name)

    @property
    def spec(self) -> dict[str, Any]:
        """The spec the study ran (as a dict, the YAML's structure); the store's ``DamagedRow``
        where the stored spec does not parse."""
        record = self.record
        damaged = (record.get("damaged") or {}).get("spec")
        if damaged is not None:
            raise damaged
        spec = record.get("spec")
        if isinstance(spec, str):  # a reader that hands back JSON text
            try:
                spec = json.loads(spec)
            except (ValueError, RecursionError):
                raise DataError(f"study {self.name!r}: its stored spec is not JSON") from None
        if spec is not None and not isinstance(spec, dict):
            raise DataError(f"study {self.name!r}: its stored spec is not a JSON object")
        return spec or {}

    @property
    def objectives(self) -> dict[str, str]:
        """``{metric: "max" | "min"}``, the spec's order."""
        return self._reader.objectives(self.name)

    @property
    def counts(self) -> StudyCounts:
        """Trials by status, epoch rows and trials in all."""
        return self._reader.study_counts(self.name)

    def _objectives(self, objectives: Mapping[str, str] | str | None) -> dict[str, str]:
        if objectives is None:
            return self.objectives
        return parse_objectives(objectives) if isinstance(objectives, str) else dict(objectives)

    def front(self, objectives: Mapping[str, str] | str | None = None) -> pd.DataFrame:
        """The Pareto front of the completed trials, best first by the first objective, with configs.

        ``objectives``: the study's own by default, or ``{"top1": "max", "flops": "min"}`` /
        ``"top1:max,flops:min"``. Where ``archsearch verify`` re-measured the front, each member's
        verified throughput/latency sit beside the in-trial values (``throughput_verified``, ...)
        with ``on_verified_front``: whether it stays on the front on the verified values.
        Empty (with the objective columns) while no trial has been recorded.
        """
        wanted = self._objectives(objectives)
        if not self._reader.study_counts(self.name).total:
            return pd.DataFrame(columns=["study", "number", "status", *wanted])
        front = query_front(self._reader, [self.name], wanted).front.reset_index(drop=True)
        self._warn_left_out()
        verified = self._reader.verified(self.name)
        if front.empty or verified.empty or not set(front["number"]) & set(verified["number"]):
            return front
        table = compare_fronts(front, verified.set_index("number"), wanted)
        extra = [c for c in table.columns if c.endswith("_verified") or c == "on_verified_front"]
        return front.merge(table[["number", *extra]], on="number", how="left")

    def trials(self, status: str | Sequence[str] | None = None, where: Where = None) -> pd.DataFrame:
        """One row per trial (of ``status``, one or several, when given): number, status, costs,
        final metrics and the config as ``config.*`` columns (``sampled.*``/``fixed.*``: the values
        the search drew and those the spec fixed).

        ``where``: filters as ``pareto --where`` takes them, ANDed: ``"lr>0.002"``, a list of them
        (``["params<1e6", "layout in CCTT,CTTT"]``), or ``{"layout": "CCTT"}``; a key is a config key
        (``layout``, ``config.model.layout``, ``depths[3]``) or a column of the frame (``params``, ``top1``)."""
        statuses = [status] if isinstance(status, str) else (list(status) if status is not None else None)
        filters = parse_filters(where)
        frame = self._reader.trials(self.name, statuses=statuses)
        self._warn_left_out()
        return filter_trials(frame, filters, self.name)

    def learning_curves(self, numbers: Iterable[int] | None = None) -> pd.DataFrame:
        """Per-epoch metrics (one row per epoch: number, status, epoch, top1, losses, ...) of every
        trial, or of the trials ``numbers``."""
        frame = self._reader.learning_curves(self.name, None if numbers is None else [int(n) for n in numbers])
        self._warn_left_out()
        return frame

    def hypervolume_progress(self, objectives: Mapping[str, str] | str | None = None) -> pd.DataFrame:
        """Hypervolume of the front after each finished trial (``n_finished``, ``hypervolume``), in
        finish order, against a fixed reference (the worst completed value of each objective)."""
        wanted = self._objectives(objectives)
        outcomes = self._reader.outcomes(self.name, list(wanted), strict=False)
        self._warn_left_out()
        return hypervolume_progress(outcomes, wanted)

    def trial_config(self, number: int) -> TrialConfig:
        """Trial ``number``'s config as it trained (the stored config: sampled and fixed values
        applied), a frozen :class:`TrialConfig` that ``trials.runner.run_trial`` takes. To train it
        longer: ``dataclasses.replace(config, training=dataclasses.replace(config.training, epochs=N))``.

        An infeasible trial's config is the one it would have trained: returned where it builds (it broke
        a constraint), else :class:`InfeasibleTrial` says so with the reason."""
        records = self._reader.trial_records(self.name, [int(number)])
        if int(number) not in records:
            for problem in _damaged(self._reader, self.name):
                if getattr(problem, "trial", None) == int(number):
                    raise problem  # the store's DamagedRow: the trial is there, a column of it does not parse
            raise DataError(f"study {self.name!r} has no trial {number}")
        record = records[int(number)]
        try:
            return load_trial_config(record["config"])
        except ConfigError as error:
            if record["status"] != TrialStatus.INFEASIBLE:
                raise
            raise InfeasibleTrial(
                f"trial {number} of study {self.name!r} was infeasible and never trained: its config does not "
                f"build ({error})"
            ) from None

    def fidelity(
        self,
        expensive: str | None = None,
        *,
        rule: Any = None,
        where: Where = None,
        resamples: int | None = None,
    ) -> Any:
        """Does a cheap signal predict the expensive one (``archsearch fidelity``, :mod:`dashboards.fidelity`)?

        Without ``expensive``: per epoch with enough completed trials, Kendall's tau and Spearman's rho
        between that epoch's accuracy and the final one (bootstrap 95% intervals), and the final-front members
        the study's early-stopping rule keeps deciding there: a ``StudyFidelity`` (``.frame()``, ``.verdict``).
        ``rule``: a ``RungRule`` or a spec -> rule function (default: the one registered by archsearch).

        With ``expensive`` (another study of the same store, this one the cheap one): tau on the
        configurations both completed, the expensive front members this front holds, the expensive
        hypervolume it recovers: a ``CrossFidelity``. ``where``: filters, as ``pareto --where`` and
        :meth:`trials` take them."""
        kwargs: dict[str, Any] = {"where": where}
        if resamples is not None:
            kwargs["resamples"] = int(resamples)
        if expensive is not None:
            if expensive not in self._reader.study_names():
                raise StudyNotFound(unknown_study_message(expensive, self._reader.study_names()))
            result = fidelity_api.cross_fidelity(self._reader, self.name, expensive, **kwargs)
        else:
            result = fidelity_api.study_fidelity(self._reader, self.name, rule, **kwargs)
        self._warn_left_out()
        return result
