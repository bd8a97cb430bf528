"""Reading the store into pandas DataFrames: studies with their trial counts, trials (sorted and
limited in SQL, so the top of a 100k-trial study decodes only the rows it returns), lean outcome
frames for Pareto queries, sampled config columns, learning curves and counts. Metrics are named
as the user knows them (a cost column, an objective, a key of the final-metrics JSON) and resolved
to SQL expressions here. Reads never write: a study whose driver is gone is *shown* ``interrupted``
by :meth:`Queries.studies`, and recorded so only by the explicit ``mark_interrupted()`` of the liveness
part (the CLI's commands call it), as Optuna fails stale trials by an explicit call, never by a read.
Together these methods implement :class:`dashboards.reader.StudyReader`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
from sqlalchemy import func, select

from dashboards.reader import StudyCounts

from .base import StoreBase, _now
from .errors import StoreError
from .liveness import HEARTBEAT_STALE_S, _driver_gone
from .schema import (
    EPOCH_FIELDS,
    MEASUREMENT_FIELDS,
    NUMERIC_MEASUREMENT_FIELDS,
    TRIAL_STATUSES,
    EpochRecord,
    Measurement,
    Study,
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


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


class Queries(StoreBase):
    """Every read of studies and trials, each returning a DataFrame, a list, a dict or a
    :class:`StudyCounts`; none writes (:class:`dashboards.reader.StudyReader`'s contract)."""

    def study(self, name: str) -> dict[str, Any]:
        """The study's record as a dict (spec, objectives, status, times, version, hardware)."""
        study_id = self._study_id(name)
        with self.engine.connect() as conn:
            row = conn.execute(select(Study.__table__).where(Study.id == study_id)).mappings().one()
        return dict(row)

    def objectives(self, name: str) -> dict[str, str]:
        """The study's objectives as ``{metric: "max" | "min"}``, in the order the spec gave them."""
        objectives = _decoded(self.study(name).get("objectives")) or []
        return {o["name"]: o["direction"] for o in objectives if isinstance(o, dict)}

    def studies(self):
        """One row per study: name, status (and why), objectives, times, version, trial counts by status.

        A ``running`` study whose driver is gone is shown ``interrupted`` (with why), so the status
        shown is true, but nothing is recorded: a read never writes. ``mark_interrupted()`` records it.
        """
        now = _now()
        with self.engine.connect() as conn:
            studies = conn.execute(select(Study.__table__).order_by(Study.id)).mappings().all()
            counts = conn.execute(
                select(Trial.study_id, Trial.status, func.count()).group_by(Trial.study_id, Trial.status)
            ).all()
        by_study: dict[int, dict[str, int]] = {}
        for study_id, status, n in counts:
            by_study.setdefault(study_id, {})[status] = n
        rows = []
        for s in studies:
            status_counts = {status: by_study.get(s["id"], {}).get(status, 0) for status in TRIAL_STATUSES}
            shown_status, message = s["status"], s["status_message"]
            running = shown_status == "running"
            gone = _driver_gone(s["driver"], s["updated_at"], now, HEARTBEAT_STALE_S) if running else None
            if gone:  # shown as it is, without recording it
                shown_status, message = "interrupted", gone
            rows.append(
                {
                    "name": s["name"],
                    "status": shown_status,
                    "objectives": ",".join(f"{o['name']}:{o['direction']}" for o in s["objectives"]),
                    "trials": sum(status_counts.values()),
                    **status_counts,
                    "created_at": s["created_at"],
                    "updated_at": s["updated_at"],
                    "archsearch_version": s["archsearch_version"],
                    "message": message,
                }
            )
        columns = ["name", "status", "objectives", "trials", *TRIAL_STATUSES, "created_at", "updated_at"]
        return pd.DataFrame(rows, columns=[*columns, "archsearch_version", "message"])

    def _trial_rows(
        self,
        study: str,
        columns: list,
        *,
        order_by: Any = None,
        limit: int | None = None,
        expand_final: bool = True,
        statuses: Sequence[str] | None = None,
    ) -> Any:
        """DataFrame of ``columns`` (trials outer-joined with measurements) for one study, by number
        (or ``order_by``, then number), at most ``limit`` rows, with the ``final`` metrics JSON expanded
        into columns (a measured cost column wins a clash) unless ``expand_final`` is false."""
        study_id = self._study_id(study)
        trial, meas = Trial.__table__, Measurement.__table__
        selected = [trial.c.number, *([trial.c.final] if expand_final else []), *columns]
        query = (
            select(*selected)
            .select_from(trial.outerjoin(meas, meas.c.trial_id == trial.c.id))
            .where(trial.c.study_id == study_id)
            .order_by(*([order_by] if order_by is not None else []), trial.c.number)
        )
        if statuses is not None:
            query = query.where(trial.c.status.in_(list(statuses)))
        if limit is not None:
            query = query.limit(limit)
        with self.engine.connect() as conn:
            result = conn.execute(query)
            # Plain tuples: DataFrame construction from Row objects is ~10x slower.
            frame = pd.DataFrame([tuple(row) for row in result], columns=list(result.keys()))
        if not expand_final:
            return frame
        finals = pd.DataFrame([_decoded(f) or {} for f in frame.pop("final")], index=frame.index)
        finals = finals.drop(columns=[c for c in finals.columns if c in frame.columns])
        return pd.concat([frame, finals], axis=1)

    def _trial_columns(self) -> list:
        trial, meas = Trial.__table__, Measurement.__table__
        return [
            trial.c.status,
            trial.c.config,
            trial.c.parameters,
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
            *[meas.c[name].label("cost_device" if name == "device" else name) for name in MEASUREMENT_FIELDS],
        ]

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
        study comes back in a fraction of a second.
        """
        if limit is not None and limit < 0:
            raise StoreError(f"limit must be >= 0, got {limit}")
        order_by = None
        if sort is not None:
            expression = self._metric_expression(study, sort)
            order_by = (expression.desc() if descending else expression.asc()).nulls_last()
        frame = self._trial_rows(study, self._trial_columns(), order_by=order_by, limit=limit, statuses=statuses)
        return self._with_configs(frame, flatten_config)

    def _with_configs(self, frame, flatten: bool):
        """Decode the config (and the parameter values, when selected): flattened into ``config.*``
        (and ``sampled.*``, ``fixed.*``) columns, or kept as ``config`` (and ``parameters``) dicts."""
        if frame.empty:
            return frame.drop(columns=[c for c in ("config", "parameters") if c in frame])
        frame = frame.assign(config=[_decoded(c) or {} for c in frame["config"]])
        if "parameters" in frame:
            frame = frame.assign(parameters=[_decoded(p) or {} for p in frame["parameters"]])
        return flatten_configs(frame) if flatten else frame

    _SORTABLE_TRIAL_COLUMNS = ("number", "seed", "optuna_number", "started_at", "ended_at", "diverged_at_step")

    def _metric_expression(self, study: str, name: str):
        """The SQL expression of a metric: a trial column, a cost column, or a key of the final metrics."""
        trial, meas = Trial.__table__, Measurement.__table__
        if name in self._SORTABLE_TRIAL_COLUMNS:
            return trial.c[name]
        if name in MEASUREMENT_FIELDS:
            return meas.c[name]
        if name in self.final_metric_names(study) or name in self._objective_names(study):
            # An objective is a metric of the study before its first trial has recorded it.
            return trial.c.final[name].as_float()
        known = sorted({*self._SORTABLE_TRIAL_COLUMNS, *self.metric_names(study)})
        raise StoreError(f"unknown metric {name!r}; known: {', '.join(known)}")

    def metric_names(self, study: str) -> list[str]:
        """Every metric a query can name for this study: cost columns, its objectives, recorded final metrics."""
        return sorted({*NUMERIC_MEASUREMENT_FIELDS, *self._objective_names(study), *self.final_metric_names(study)})

    def _objective_names(self, study: str) -> list[str]:
        return [name for name in self.objectives(study) if name not in MEASUREMENT_FIELDS]

    def final_metric_names(self, study: str, sample: int = 1000) -> list[str]:
        """Names of the final metrics recorded for a study's trials (from a sample of the latest trials)."""
        study_id = self._study_id(study)
        trial = Trial.__table__
        query = (
            select(trial.c.final)
            .where(trial.c.study_id == study_id, trial.c.final.is_not(None))
            .order_by(trial.c.number.desc())
            .limit(sample)
        )
        names: dict[str, None] = {}
        with self.engine.connect() as conn:
            for final in conn.execute(query).scalars():
                for key, value in (_decoded(final) or {}).items():
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
        (a study whose trials all failed has recorded no accuracy yet).
        """
        trial, meas = Trial.__table__, Measurement.__table__
        cost = ("params", "flops", "throughput", "latency_ms")
        columns = [trial.c.status, trial.c.ended_at, *[meas.c[name] for name in cost]]
        for key in config_keys:
            path = key.removeprefix("config.").split(".")
            columns.append(trial.c.config[tuple(path)].label(key))
        if metrics is None:
            return self._trial_rows(study, columns)
        unknown = []
        for metric in dict.fromkeys(metrics):
            if metric in cost:
                continue
            try:
                columns.append(self._metric_expression(study, metric).label(metric))
            except StoreError:
                if strict:
                    raise
                unknown.append(metric)
        frame = self._trial_rows(study, columns, expand_final=False)
        return frame.assign(**dict.fromkeys(unknown, float("nan"))) if unknown else frame

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
            query = select(trial.c.config).where(trial.c.study_id == study_id)
            if stride > 1:
                query = query.where(trial.c.number % stride == 0)
            configs = [_decoded(c) or {} for c in conn.execute(query.limit(sample * 2)).scalars()]
        if not configs:
            return []
        return [f"config.{c}" for c in pd.json_normalize(configs, sep=".").columns]

    def configs(self, study: str, numbers: Iterable[int]):
        """The flattened configs (``number`` + ``config.*`` columns) of the trials ``numbers`` only."""
        study_id = self._study_id(study)
        trial = Trial.__table__
        wanted = sorted({int(n) for n in numbers})
        rows: list[tuple[int, Any]] = []
        with self.engine.connect() as conn:
            for start in range(0, len(wanted), 500):  # bounded IN lists on every backend
                chunk = wanted[start : start + 500]
                query = select(trial.c.number, trial.c.config).where(
                    trial.c.study_id == study_id, trial.c.number.in_(chunk)
                )
                rows.extend(tuple(r) for r in conn.execute(query))
        rows.sort()
        numbers_column = pd.Series([n for n, _ in rows], name="number", dtype="int64")
        if not rows:
            return pd.DataFrame({"number": numbers_column})
        flat = pd.json_normalize([_decoded(c) or {} for _, c in rows], sep=".").add_prefix("config.")
        return pd.concat([numbers_column, flat], axis=1)

    def trial_records(
        self, study: str, numbers: Iterable[int] | None = None, *, statuses: Sequence[str] | None = None
    ) -> dict[int, dict[str, Any]]:
        """Whole records of the trials ``numbers`` (None: every trial) with one of ``statuses`` (None:
        any): status, config, parameters, final, measurement and epochs (what a warm start copies into another
        study). Three queries whatever the number of trials: a warm start reads every completed
        trial of the earlier study, 100k of them in seconds."""
        trial = Trial.__table__
        measured = [Measurement.__table__.c[name] for name in MEASUREMENT_FIELDS]
        frame = self._trial_rows(
            study,
            [trial.c.status, trial.c.config, trial.c.parameters, trial.c.final, *measured],
            expand_final=False,
            statuses=statuses,
        )
        if numbers is not None:
            frame = frame[frame["number"].isin({int(n) for n in numbers})]
        if frame.empty:
            return {}
        wanted = [int(n) for n in frame["number"]]
        # A few trials: their epochs by number. Many: the study's epochs in one scan (an IN list of
        # every number would be slower, and beyond SQLite's bound-parameter limit at 32,766).
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
                "config": _decoded(row["config"]) or {},
                "parameters": _decoded(row["parameters"]),  # None for trials of older versions
                "final": _decoded(row["final"]) or {},
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
            return pd.DataFrame([tuple(row) for row in result], columns=list(result.keys()))

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
            return pd.DataFrame([tuple(row) for row in result], columns=list(result.keys()))

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
