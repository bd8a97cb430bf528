"""Reading the store into pandas DataFrames: studies with their trial counts, trials (sorted and
limited in SQL, so the top of a 100k-trial study decodes only the rows it returns), lean outcome
frames for Pareto queries, sampled config columns, learning curves and counts. Metrics are named
as the user knows them (a cost column, an objective, a key of the final-metrics JSON) and resolved
to SQL expressions here. Reads never write: a study whose driver is gone is *shown* ``interrupted``
by :meth:`Queries.studies`, and recorded so only by the explicit ``mark_interrupted()`` of the liveness
part (the CLI's commands call it), as Optuna fails stale trials by an explicit call, never by a read.
Together these methods implement :class:`dashboards.reader.StudyReader`.

Every JSON column is read as text and parsed by :mod:`.rows`, the one read boundary: a study whose
objectives or spec do not parse is listed with what is wrong, a trial whose JSON or numbers do not
parse is left out of what a read returns, and either is noted once as a
:class:`~harness.store.errors.DamagedRow` (:meth:`Queries.damaged_rows`) for the caller to report in
one line. One damaged row never fails a read, nor hides the rows beside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import is_numeric_dtype
from sqlalchemy import func, inspect, literal, select

from dashboards.reader import StudyCounts
from trials.status import StudyStatus, TrialStatus
from trials.training.predictions import TestPredictions

from . import rows
from .base import StoreBase
from .errors import DamagedRow, StoreError
from .liveness import HEARTBEAT_STALE_S, driver_columns, driver_gone, driver_record
from .schema import (
    EPOCH_FIELDS,
    MEASUREMENT_FIELDS,
    NUMERIC_MEASUREMENT_FIELDS,
    TRIAL_STATUSES,
    EpochRecord,
    Measurement,
    Study,
    TestPrediction,
    Trial,
    VerifiedMeasurement,
)


def flatten_configs(frame):
    """A trials frame with ``config`` (and ``parameters``) dicts -> ``config.*`` (and ``sampled.*``,
    ``fixed.*``) columns, as :meth:`Queries.trials` returns by default."""
    if frame.empty:
        return frame.drop(columns=[c for c in ("config", "parameters") if c in frame])
    frame = frame.copy()
    configs = list(frame.pop("config"))
    parameters = list(frame.pop("parameters")) if "parameters" in frame else []
    parts = [frame, pd.json_normalize(configs, sep=".").set_index(frame.index).add_prefix("config.")]
    if any(parameters):
        # One level only: a parameter's name may hold a dot (data.batch_size) and its value a list.
        flat = [{f"{kind}.{name}": value for kind, values in (p or {}).items() for name, value in values.items()}
                for p in parameters]  # fmt: skip
        parts.append(pd.DataFrame(flat, index=frame.index))
    return pd.concat(parts, axis=1)


# Columns that hold numbers (a trial's, its cost's, an epoch's): one holding text is a damaged row.
_NUMERIC_COLUMNS = frozenset({"number", "seed", "optuna_number", "diverged_at_step", *NUMERIC_MEASUREMENT_FIELDS})
_EPOCH_NUMBERS = _NUMERIC_COLUMNS | frozenset(EPOCH_FIELDS)
_STUDY_JSON = ("spec", "objectives", "hardware")


class Queries(StoreBase):
    """Every read of studies and trials, each returning a DataFrame, a list, a dict or a
    :class:`StudyCounts`; none writes (:class:`dashboards.reader.StudyReader`'s contract)."""

    # -- damaged rows: noted, never raised by a read that lists ---------------------------------------
    def _noted(self) -> dict[tuple[str, str, str], DamagedRow]:
        found = getattr(self, "_damaged_found", None)
        if found is None:
            found = self._damaged_found = {}
        return found

    def _note(self, problems: Iterable[DamagedRow]) -> None:
        noted = self._noted()
        for problem in problems:
            noted.setdefault(problem.key, problem)

    def damaged_rows(self, study: str | None = None) -> list[DamagedRow]:
        """The rows the reads of this store so far found damaged (a JSON column that does not parse
        into its record, a number held as text), each once, in the order found, of ``study`` or of
        all: what a command reports in one line each. A listing read leaves such a trial out; a study
        whose objectives are damaged is listed with the problem as its message."""
        return [p for p in self._noted().values() if study is None or p.study == study]

    def _dialect(self) -> str:
        return self.engine.dialect.name

    # -- studies -------------------------------------------------------------------------------------
    def study(self, name: str) -> dict[str, Any]:
        """The study's record as a dict (spec, objectives, status, times, version, hardware).

        ``spec`` and ``hardware`` are dicts (or None), ``objectives`` a list of ``{"name", "direction"}``;
        a JSON column that does not parse is None here, with its :class:`DamagedRow` under
        ``record["damaged"][column]`` (and noted: :meth:`damaged_rows`)."""
        study_id = self._study_id(name)
        table = Study.__table__
        present = self.present_columns(table)  # an older read-only store lacks the later columns: None
        selected = [rows.json_text(c) if c.name in _STUDY_JSON else c for c in table.columns if c.name in present]
        with self.engine.connect() as conn:
            record = dict(conn.execute(select(*selected).where(table.c.id == study_id)).mappings().one())
        record.update({c.name: None for c in table.columns if c.name not in present})
        damaged: dict[str, DamagedRow] = {}
        for column in _STUDY_JSON:
            try:
                if column == "objectives":
                    parsed = rows.objectives_of(name, record[column])
                    record[column] = [{"name": o.name, "direction": o.direction} for o in parsed]
                else:
                    record[column] = rows.study_object(name, column, record[column])
            except DamagedRow as problem:
                damaged[column] = problem
                record[column] = None
        self._note(damaged.values())
        record["damaged"] = damaged
        return record

    def objectives(self, name: str) -> dict[str, str]:
        """The study's objectives as ``{metric: "max" | "min"}``, in the order the spec gave them;
        :class:`DamagedRow` (a :class:`StoreError`) where the stored column does not parse."""
        study_id = self._study_id(name)
        query = select(rows.json_text(Study.objectives)).where(Study.id == study_id)
        with self.engine.connect() as conn:
            raw = conn.execute(query).scalar_one()
        return {o.name: o.direction for o in rows.objectives_of(name, raw)}

    def studies(self):
        """One row per study: name, status (and why), objectives, times, version, trial counts by status.

        A ``running`` study whose driver is gone is shown ``interrupted`` (with why), and so are the
        trials that driver left ``running``, so the status shown is true, but nothing is recorded: a read
        never writes. ``mark_interrupted()`` records it.
        """
        table = Study.__table__
        columns = [table.c[c] for c in ("id", "name", "status", "status_message", "created_at", "archsearch_version")]
        liveness = driver_columns(table, self.present_columns(table))
        with self.engine.connect() as conn:
            studies = conn.execute(select(*columns, *liveness, rows.json_text(table.c.objectives)).order_by(Study.id))
            studies = studies.all()
            counts = conn.execute(
                select(Trial.study_id, Trial.status, func.count()).group_by(Trial.study_id, Trial.status)
            ).all()
        by_study: dict[int, dict[str, int]] = {}
        for study_id, status, n in counts:
            by_study.setdefault(study_id, {})[status] = n
        found = []
        for row in studies:
            s = row._mapping
            status_counts = {status: by_study.get(s["id"], {}).get(status, 0) for status in TRIAL_STATUSES}
            shown_status, message = s["status"], s["status_message"]
            running = shown_status == StudyStatus.RUNNING
            record = driver_record(row, self.driver_lock_held(s["id"])) if running else None
            gone = driver_gone(record, HEARTBEAT_STALE_S) if record is not None else None
            if gone:  # shown as it is, without recording it: the study and its trials the driver left running
                shown_status, message = "interrupted", gone
                status_counts[TrialStatus.INTERRUPTED] += status_counts[TrialStatus.RUNNING]
                status_counts[TrialStatus.RUNNING] = 0
            try:
                objectives = ",".join(f"{o.name}:{o.direction}" for o in rows.objectives_of(s["name"], s["objectives"]))
            except DamagedRow as problem:  # listed with what is wrong; every other study as usual
                self._note([problem])
                objectives = None
                message = f"damaged: column {problem.column!r} {problem.problem}" + (f"; {message}" if message else "")
            found.append(
                {
                    "name": s["name"],
                    "status": shown_status,
                    "objectives": objectives,
                    "trials": sum(status_counts.values()),
                    **status_counts,
                    "created_at": s["created_at"],
                    "updated_at": s["updated_at"],
                    "archsearch_version": s["archsearch_version"],
                    "message": message,
                }
            )
        columns = ["name", "status", "objectives", "trials", *TRIAL_STATUSES, "created_at", "updated_at"]
        return pd.DataFrame(found, columns=[*columns, "archsearch_version", "message"])

    def _trial_rows(
        self,
        study: str,
        columns: list,
        *,
        json_columns: Sequence[str] = (),
        expand_final: bool = False,
        order_by: Any = None,
        limit: int | None = None,
        statuses: Sequence[str] | None = None,
        numbers: Sequence[int] | None = None,
    ) -> Any:
        """DataFrame of ``number``, the ``json_columns`` (``config``, ``parameters``, ``final``: read
        as text, parsed by :mod:`.rows`) and ``columns`` (trials outer-joined with measurements) for
        one study, by number (or ``order_by``, then number), at most ``limit`` rows, of ``statuses``
        and ``numbers`` when given. A trial whose JSON or numbers do not parse is left out and noted.
        With ``expand_final`` the final metrics become columns (a measured cost column wins a clash)."""
        study_id = self._study_id(study)
        trial, meas = Trial.__table__, Measurement.__table__
        selected = [trial.c.number, *[rows.json_text(trial.c[name]) for name in json_columns], *columns]
        joined = trial.outerjoin(meas, meas.c.trial_id == trial.c.id)
        order = [*([order_by] if order_by is not None else []), trial.c.number]
        wanted = [trial.c.study_id == study_id]
        if statuses is not None:
            wanted.append(trial.c.status.in_(list(statuses)))
        if numbers is not None:
            wanted.append(trial.c.number.in_(list(numbers)))
        query = select(*selected).select_from(joined).where(*wanted).order_by(*order)

        def limited(n: int):
            # The rows chosen first (ids: order and limit on the bare columns), their columns then:
            # PostgreSQL would otherwise turn every row's JSON into text before it sorts.
            chosen = select(trial.c.id).select_from(joined).where(*wanted).order_by(*order).limit(n)
            return query.where(trial.c.id.in_(chosen.scalar_subquery()))

        numeric_final = (*rows.FINAL_NUMBERS, *self._objective_names(study)) if "final" in json_columns else ()
        fetch = limit
        while True:  # with a limit, as many more rows as were left out damaged: the limit counts sound rows
            with self.engine.connect() as conn:
                result = conn.execute(limited(fetch) if fetch is not None else query)
                # Plain tuples: DataFrame construction from Row objects is ~10x slower.
                frame = pd.DataFrame([tuple(row) for row in result], columns=list(result.keys()))
            read = len(frame)
            frame = self._parsed(study, frame, json_columns, numeric_final=numeric_final)
            if fetch is None or len(frame) >= limit or read < fetch:
                break
            fetch += read - len(frame)
        if limit is not None and len(frame) > limit:
            frame = frame.iloc[:limit]
        if not expand_final:
            return frame
        finals = pd.DataFrame(list(frame.pop("final")), index=frame.index)
        finals = finals.drop(columns=[c for c in finals.columns if c in frame.columns])
        return pd.concat([frame, finals], axis=1)

    def _parsed(
        self, study: str, frame, json_columns: Sequence[str] = (), problems=None, numeric_final=(), numeric=None
    ):
        """``frame`` with its JSON columns parsed (:func:`rows.trial_column`; the final metrics
        ``numeric_final`` numbers where present) and its ``numeric`` columns (a trial's and its cost's,
        by default) checked; the rows that fail either (and those already in ``problems``, position ->
        problem) left out and noted."""
        numeric = _NUMERIC_COLUMNS if numeric is None else numeric
        problems = dict(problems or {})
        numbers = frame["number"].tolist()
        for column in json_columns:
            values, bad = rows.trial_column(study, column, numbers, frame[column].tolist(), numeric_final)
            frame[column] = values
            for position, problem in bad.items():
                problems.setdefault(position, problem)
        for column in frame.columns:
            if column not in numeric or is_numeric_dtype(frame[column]):  # numbers: a C-level check
                continue
            values = frame[column]
            suspects = (values.notna() & pd.to_numeric(values, errors="coerce").isna()).to_numpy().nonzero()[0]
            found = rows.numbers_damaged(study, [numbers[p] for p in suspects], column, values.iloc[suspects].tolist())
            for at, problem in found.items():
                problems.setdefault(int(suspects[at]), problem)
        if not problems:
            return frame
        self._note(problems[p] for p in sorted(problems))
        kept = frame.drop(index=frame.index[sorted(problems)]).reset_index(drop=True)
        for column in kept.columns:  # what was object only for the damaged value: numbers again
            if column in numeric and not is_numeric_dtype(kept[column]):
                kept[column] = pd.to_numeric(kept[column])
        return kept

    def _trial_columns(self) -> list:
        trial = Trial.__table__
        return [
            trial.c.status,
            trial.c.error,
            trial.c.seed,
            trial.c.optuna_number,
            trial.c.host,
            trial.c.device,
            trial.c.started_at,
            trial.c.ended_at,
            trial.c.diverged_at_step,
            # The measurement's device is where the cost was measured: "cost_device" beside
            # the trial's own "device" (where it ran).
            *[self._measurement_column(name).label("cost_device" if name == "device" else name)
              for name in MEASUREMENT_FIELDS],
        ]

    def _measurement_column(self, name: str):
        """A measurement column, or NULL where this database lacks it: a store of an older schema opened
        read-only is read as it is, and a column a later schema added (``throughput_shared``, 0011) is
        simply not there (:meth:`present_columns`)."""
        meas = Measurement.__table__
        if name in self.present_columns(meas):
            return meas.c[name]
        return literal(None, type_=meas.c[name].type)

    def trials(
        self,
        study: str,
        *,
        flatten_config: bool = True,
        sort: str | None = None,
        descending: bool = False,
        limit: int | None = None,
        statuses: Sequence[str] | None = None,
    ):
        """One row per trial (of ``statuses`` only, when given): number, status, cost, final and best
        metrics, and the config.

        The config is flattened into ``config.``-prefixed columns (``config.model.depth``,
        ``config.training.lr``), or kept as one ``config`` column of dicts. ``sort`` (a metric: a
        cost column such as ``flops``, a final metric such as ``top1``, or ``number``,
        ``started_at``, ``ended_at``) orders the rows in SQL, missing values last, and ``limit``
        keeps the first rows: only those rows' configs are decoded, so the top of a 100k-trial
        study comes back in a fraction of a second. A trial whose JSON or numbers do not parse is
        left out (:meth:`damaged_rows` says which and why).
        """
        if limit is not None and limit < 0:
            raise StoreError(f"limit must be >= 0, got {limit}")
        order_by = None
        if sort is not None:
            expression = self._metric_expression(study, sort)
            order_by = (expression.desc() if descending else expression.asc()).nulls_last()
        frame = self._trial_rows(
            study,
            self._trial_columns(),
            json_columns=("config", "parameters", "final"),
            expand_final=True,
            order_by=order_by,
            limit=limit,
            statuses=statuses,
        )
        return self._with_configs(frame, flatten_config)

    def _with_configs(self, frame, flatten: bool):
        """The parsed config (and parameter values) flattened into ``config.*`` (and ``sampled.*``,
        ``fixed.*``) columns, or kept as ``config`` (and ``parameters``) dicts; ``config`` comes
        right after ``status``, as the columns are listed."""
        if frame.empty:
            return frame.drop(columns=[c for c in ("config", "parameters") if c in frame])
        moved = [c for c in ("config", "parameters") if c in frame]
        order = [c for c in frame.columns if c not in moved]
        at = order.index("status") + 1 if "status" in order else len(order)
        frame = frame[[*order[:at], *moved, *order[at:]]]
        return flatten_configs(frame) if flatten else frame

    _SORTABLE_TRIAL_COLUMNS = ("number", "seed", "optuna_number", "started_at", "ended_at", "diverged_at_step")

    def _metric_expression(self, study: str, name: str, *, read: bool = False):
        """The SQL expression of a metric: a trial column, a cost column, or a key of the final metrics
        (a number, NULL where a trial's final does not hold one: a damaged row never fails the query;
        with ``read``, as stored, for :meth:`_json_checked` to flag: :func:`rows.json_metric`)."""
        trial = Trial.__table__
        if name in self._SORTABLE_TRIAL_COLUMNS:
            return trial.c[name]
        if name in MEASUREMENT_FIELDS:
            return self._measurement_column(name)
        if name in self.final_metric_names(study) or name in self._objective_names(study):
            # An objective is a metric of the study before its first trial has recorded it.
            final = rows.json_metric if read else rows.json_number
            return final(trial.c.final, name, self._dialect())
        known = sorted({*self._SORTABLE_TRIAL_COLUMNS, *self.metric_names(study)})
        raise StoreError(f"unknown metric {name!r}; known: {', '.join(known)}")

    def metric_names(self, study: str) -> list[str]:
        """Every metric a query can name for this study: cost columns, its objectives, recorded final metrics."""
        return sorted({*NUMERIC_MEASUREMENT_FIELDS, *self._objective_names(study), *self.final_metric_names(study)})

    def _objective_names(self, study: str) -> list[str]:
        """The study's objectives that are not cost columns; none where its objectives are damaged
        (noted: the metrics of its trials can still be named)."""
        try:
            objectives = self.objectives(study)
        except DamagedRow as problem:
            self._note([problem])
            return []
        return [name for name in objectives if name not in MEASUREMENT_FIELDS]

    def final_metric_names(self, study: str, sample: int = 1000) -> list[str]:
        """Names of the final metrics recorded for a study's trials (from a sample of the latest trials)."""
        study_id = self._study_id(study)
        trial = Trial.__table__
        query = (
            select(trial.c.number, rows.json_text(trial.c.final))
            .where(trial.c.study_id == study_id, trial.c.final.is_not(None))
            .order_by(trial.c.number.desc())
            .limit(sample)
        )
        with self.engine.connect() as conn:
            found = conn.execute(query).all()
        finals, problems = rows.trial_column(study, "final", [n for n, _ in found], [f for _, f in found])
        self._note(problems.values())
        names: dict[str, None] = {}
        for final in finals:
            for key, value in (final or {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    names.setdefault(key)
        return sorted(names)

    def outcomes(
        self, study: str, metrics: Sequence[str] | None = None, *, config_keys: Sequence[str] = (), strict: bool = True
    ):
        """Lean per-trial frame for Pareto queries: number, status, ended_at, cost columns and metrics.

        With ``metrics`` (e.g. the objectives), each is read in SQL (a cost column, or extracted
        from the final-metrics JSON) and nothing else is decoded: one query, no JSON parsing in
        Python. Without, every final metric is expanded (slower on large studies). ``config_keys``
        (``config.model.layout``, ...) adds those config values, extracted in SQL. Unknown metrics
        raise :class:`StoreError` naming them, or with ``strict=False`` come back as missing values
        (a study whose trials all failed has recorded no accuracy yet). A trial whose config or
        final metrics are damaged is left out (checked in SQL, one boolean per row; only the rows it
        flags are parsed in Python, to say what is wrong).
        """
        trial, meas = Trial.__table__, Measurement.__table__
        cost = ("params", "flops", "throughput", "latency_ms")
        columns = [trial.c.status, trial.c.ended_at, *[meas.c[name] for name in cost]]
        for key in config_keys:
            path = key.removeprefix("config.").split(".")
            columns.append(rows.json_path_text(trial.c.config, path, self._dialect()).label(key))
        if metrics is None:
            frame = self._trial_rows(study, columns, json_columns=("final",), expand_final=True)
            return self._config_values(study, frame, config_keys)
        unknown, numeric_final = [], []
        for metric in dict.fromkeys(metrics):
            if metric in cost:
                continue
            try:
                columns.append(self._metric_expression(study, metric, read=True).label(metric))
            except StoreError:
                if strict:
                    raise
                unknown.append(metric)
                continue
            if metric not in MEASUREMENT_FIELDS and metric not in self._SORTABLE_TRIAL_COLUMNS:
                numeric_final.append(metric)
        ok = rows.trial_json_ok(trial, self._dialect(), numeric_final=numeric_final).label("_json_ok")
        frame = self._trial_rows(study, [*columns, ok])
        frame = self._config_values(study, self._json_checked(study, frame, numeric_final, config_keys), config_keys)
        return frame.assign(**dict.fromkeys(unknown, float("nan"))) if unknown else frame

    def _json_checked(self, study: str, frame, numeric_final: Sequence[str], config_keys: Sequence[str]):
        """``frame`` without its ``_json_ok`` column; the rows it flags, or whose final metrics read as
        anything but numbers, parsed again by :mod:`.rows`: left out and noted where damaged, else
        (JSON that SQLite's functions refuse, as a NaN in a config) their metrics and config keys
        read from that parse."""
        flagged = ~frame.pop("_json_ok").fillna(False).astype(bool)
        for name in numeric_final:
            if not is_numeric_dtype(frame[name]):  # a C-level check; the loop only where a value is not a number
                flagged |= np.array(rows.not_numbers(frame[name].tolist()), dtype=bool)
        if not flagged.any():
            for name in numeric_final:
                frame[name] = pd.to_numeric(frame[name])
            return frame
        numbers = [int(n) for n in frame.loc[flagged, "number"]]
        trial = Trial.__table__
        found = {}
        with self.engine.connect() as conn:
            for start in range(0, len(numbers), 500):  # bounded IN lists on every backend
                query = select(trial.c.number, rows.json_text(trial.c.config), rows.json_text(trial.c.final)).where(
                    trial.c.study_id == self._study_id(study), trial.c.number.in_(numbers[start : start + 500])
                )
                found.update({n: (c, f) for n, c, f in conn.execute(query)})
        problems = {}
        for position in flagged.to_numpy().nonzero()[0]:
            number = int(frame["number"].iloc[position])
            raw_config, raw_final = found.get(number, (None, None))
            try:
                config = rows.trial_config(study, number, raw_config)
                final = rows.trial_final(study, number, raw_final, numeric_final)
            except DamagedRow as problem:
                problems[int(position)] = problem
                continue
            for name in numeric_final:  # sound after all: what SQL could not read, read from the parse
                frame.iat[position, frame.columns.get_loc(name)] = final.get(name)
            for key in config_keys:
                value = rows.value_at(config, key.removeprefix("config.").split("."))
                frame.iat[position, frame.columns.get_loc(key)] = None if value is None else json.dumps(value)
        frame = self._parsed(study, frame, problems=problems)
        for name in numeric_final:
            frame[name] = pd.to_numeric(frame[name])
        return frame

    def _config_values(self, study: str, frame, config_keys: Sequence[str]):
        """The config keys extracted in SQL (as JSON text) parsed; a trial whose value does not parse left out."""
        if not config_keys or frame.empty:
            return frame
        problems = {}
        numbers = frame["number"].tolist()
        for key in config_keys:
            values = []
            for position, (number, raw) in enumerate(zip(numbers, frame[key].tolist(), strict=True)):
                try:
                    values.append(rows.json_value(study, number, "config", raw))
                except DamagedRow as problem:
                    problems.setdefault(position, problem)
                    values.append(None)
            frame[key] = values
        return self._parsed(study, frame, problems=problems) if problems else frame

    def config_columns(self, study: str, sample: int = 500) -> list[str]:
        """Flattened config column names (``config.model.depth``, ...) seen in a sample of a study's trials.

        The sample is spread evenly over trial numbers, so a key searched from the start and one
        added late both show up, without decoding every config of a large study.
        """
        study_id = self._study_id(study)
        trial = Trial.__table__
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).where(trial.c.study_id == study_id)).scalar_one()
            stride = max(1, total // max(sample, 1))
            query = select(trial.c.number, rows.json_text(trial.c.config)).where(trial.c.study_id == study_id)
            if stride > 1:
                query = query.where(trial.c.number % stride == 0)
            found = conn.execute(query.limit(sample * 2)).all()
        configs, problems = rows.trial_column(study, "config", [n for n, _ in found], [c for _, c in found])
        self._note(problems.values())
        configs = [c for position, c in enumerate(configs) if position not in problems]
        if not configs:
            return []
        return [f"config.{c}" for c in pd.json_normalize(configs, sep=".").columns]

    def configs(self, study: str, numbers: Iterable[int]):
        """The flattened configs (``number`` + ``config.*`` columns) of the trials ``numbers`` only
        (a trial whose config does not parse left out, and noted)."""
        study_id = self._study_id(study)
        trial = Trial.__table__
        wanted = sorted({int(n) for n in numbers})
        found: list[tuple[int, Any]] = []
        with self.engine.connect() as conn:
            for start in range(0, len(wanted), 500):  # bounded IN lists on every backend
                chunk = wanted[start : start + 500]
                query = select(trial.c.number, rows.json_text(trial.c.config)).where(
                    trial.c.study_id == study_id, trial.c.number.in_(chunk)
                )
                found.extend(tuple(r) for r in conn.execute(query))
        found.sort()
        configs, problems = rows.trial_column(study, "config", [n for n, _ in found], [c for _, c in found])
        self._note(problems.values())
        kept = [
            (n, c) for position, ((n, _), c) in enumerate(zip(found, configs, strict=True)) if position not in problems
        ]
        numbers_column = pd.Series([n for n, _ in kept], name="number", dtype="int64")
        if not kept:
            return pd.DataFrame({"number": numbers_column})
        flat = pd.json_normalize([c for _, c in kept], sep=".").add_prefix("config.")
        return pd.concat([numbers_column, flat], axis=1)

    def trial_records(
        self, study: str, numbers: Iterable[int] | None = None, *, statuses: Sequence[str] | None = None
    ) -> dict[int, dict[str, Any]]:
        """Whole records of the trials ``numbers`` (None: every trial) with one of ``statuses`` (None:
        any): status, config, parameters, final, measurement and epochs (what a warm start copies into another
        study). Three queries whatever the number of trials: a warm start reads every completed
        trial of the earlier study, 100k of them in seconds. A trial whose JSON or numbers do not
        parse has no record (:meth:`damaged_rows` says why)."""
        trial = Trial.__table__
        measured = [self._measurement_column(name).label(name) for name in MEASUREMENT_FIELDS]
        wanted = None if numbers is None else sorted({int(n) for n in numbers})
        frame = self._trial_rows(
            study,
            [trial.c.status, *measured],
            json_columns=("config", "parameters", "final"),
            statuses=statuses,
            # A few trials (an export, a front): those rows only. Many: the study in one scan (an IN
            # list of every number would be slower, and beyond SQLite's bound-parameter limit at 32,766).
            numbers=wanted if wanted is not None and len(wanted) <= 1000 else None,
        )
        if wanted is not None:
            frame = frame[frame["number"].isin(wanted)]
        if frame.empty:
            return {}
        wanted = [int(n) for n in frame["number"]]
        curves = self.learning_curves(study, wanted if len(wanted) <= 1000 else None)
        epochs_of: dict[int, list[dict[str, Any]]] = {number: [] for number in wanted}
        for epoch in curves.drop(columns=["status"]).to_dict("records"):  # ordered by number, then epoch
            number = int(epoch.pop("number"))
            if number in epochs_of:
                epochs_of[number].append({k: v for k, v in epoch.items() if pd.notna(v)})
        records: dict[int, dict[str, Any]] = {}
        for row in frame.to_dict("records"):
            number = int(row["number"])
            records[number] = {
                "status": row["status"],
                "config": row["config"],
                "parameters": row["parameters"],  # None for trials of older versions
                "final": row["final"],
                "measurement": {k: row[k] for k in MEASUREMENT_FIELDS if pd.notna(row[k])},
                "epochs": epochs_of[number],
            }
        return records

    def verified(self, study: str):
        """The latest verification of each verified trial (``archsearch verify``): number, throughput
        and latency (median, min, max), rounds, device, time; empty when none was verified."""
        study_id = self._study_id(study)
        trial, verified = Trial.__table__, VerifiedMeasurement.__table__
        columns = [c for c in verified.columns if c.name not in ("id", "trial_id")]
        query = (
            select(trial.c.number, *columns)
            .select_from(verified.join(trial, trial.c.id == verified.c.trial_id))
            .where(trial.c.study_id == study_id)
            .order_by(trial.c.number, verified.c.measured_at, verified.c.id)
        )
        with self.engine.connect() as conn:
            result = conn.execute(query)
            frame = pd.DataFrame([tuple(row) for row in result], columns=list(result.keys()))
        frame = self._parsed(study, frame)
        return frame.drop_duplicates("number", keep="last").reset_index(drop=True)

    def trial_errors(self, study: str, statuses: Sequence[str], limit: int = 50) -> list[str]:
        """The errors of the latest ``limit`` trials with one of ``statuses`` (newest first)."""
        study_id = self._study_id(study)
        trial = Trial.__table__
        query = (
            select(trial.c.error)
            .where(trial.c.study_id == study_id, trial.c.status.in_(list(statuses)))
            .order_by(trial.c.number.desc())
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [e or "" for e in conn.execute(query).scalars()]

    def test_predictions(self, study: str) -> dict[int, TestPredictions]:
        """Trial number -> its per-image test predictions and labels, for the trials that have them
        (completed trials of a dataset with a test split, since schema 0008; an older read-only
        store has none). A row that does not read back is left out and noted (:func:`rows.test_predictions`)."""
        study_id = self._study_id(study)
        trial, kept = Trial.__table__, TestPrediction.__table__
        query = (
            select(trial.c.number, kept.c.classes, kept.c.images, kept.c.labels, kept.c.predictions)
            .select_from(kept.join(trial, trial.c.id == kept.c.trial_id))
            .where(trial.c.study_id == study_id)
            .order_by(trial.c.number)
        )
        with self.engine.connect() as conn:
            if not inspect(conn).has_table(kept.name):
                return {}
            found = conn.execute(query).all()
        predictions, problems = {}, []
        for number, classes, images, labels, values in found:
            try:
                predictions[int(number)] = rows.test_predictions(study, number, classes, images, labels, values)
            except DamagedRow as problem:
                problems.append(problem)
        self._note(problems)
        return predictions

    def learning_curves(self, study: str, numbers: Iterable[int] | None = None):
        """Per-epoch metrics of a study's trials (all, or those ``numbers``), one row per epoch."""
        study_id = self._study_id(study)
        trial, epochs = Trial.__table__, EpochRecord.__table__
        query = (
            select(trial.c.number, trial.c.status, *[epochs.c[name] for name in EPOCH_FIELDS])
            .select_from(epochs.join(trial, trial.c.id == epochs.c.trial_id))
            .where(trial.c.study_id == study_id)
            .order_by(trial.c.number, epochs.c.epoch)
        )
        if numbers is not None:
            query = query.where(trial.c.number.in_(list(numbers)))
        with self.engine.connect() as conn:
            result = conn.execute(query)
            frame = pd.DataFrame([tuple(row) for row in result], columns=list(result.keys()))
        return self._parsed(study, frame, numeric=_EPOCH_NUMBERS)  # an epoch holding text: left out, noted

    def data_starved_epochs(self, study: str, threshold: float):
        """Epochs whose ``data_wait_fraction`` exceeded ``threshold``: (number, status, epoch, data_wait_fraction,
        images_per_s), by trial and epoch. One filtered query: a study without starved epochs returns no rows."""
        study_id = self._study_id(study)
        trial, epochs = Trial.__table__, EpochRecord.__table__
        query = (
            select(trial.c.number, trial.c.status, epochs.c.epoch, epochs.c.data_wait_fraction, epochs.c.images_per_s)
            .select_from(epochs.join(trial, trial.c.id == epochs.c.trial_id))
            .where(trial.c.study_id == study_id, epochs.c.data_wait_fraction > threshold)
            .order_by(trial.c.number, epochs.c.epoch)
        )
        with self.engine.connect() as conn:
            result = conn.execute(query)
            frame = pd.DataFrame([tuple(row) for row in result], columns=list(result.keys()))
        return self._parsed(study, frame, numeric=_EPOCH_NUMBERS)

    def counts(self, study: str, *, epochs: bool = False) -> dict[str, int]:
        """Number of trials by status (every status, zeros included), for one study: one indexed
        query, cheap enough to poll. Statuses only: the epoch rows are :meth:`study_counts`' ``epochs``.

        ``epochs`` is accepted (False) for the callers written when the epoch rows came back here as a
        pseudo-status; ``True`` is refused rather than mixing them in again.
        """
        if epochs:
            raise StoreError("counts() returns trial statuses only: use study_counts(study).epochs for epoch rows")
        study_id = self._study_id(study)
        with self.engine.connect() as conn:
            by_status = dict(
                conn.execute(
                    select(Trial.status, func.count()).where(Trial.study_id == study_id).group_by(Trial.status)
                ).all()
            )
        return {s: by_status.get(s, 0) for s in TRIAL_STATUSES}

    def study_counts(self, study: str) -> StudyCounts:
        """Trials by status, epoch rows and trials in all, typed: what a report or a command prints
        about a study's size, with no pseudo-status to filter out."""
        by_status = self.counts(study)
        with self.engine.connect() as conn:
            n_epochs = conn.execute(
                select(func.count())
                .select_from(EpochRecord.__table__.join(Trial.__table__, Trial.id == EpochRecord.trial_id))
                .where(Trial.study_id == self._study_id(study))
            ).scalar_one()
        return StudyCounts.of(by_status, n_epochs)
