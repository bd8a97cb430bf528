"""Writing studies, trials and learning curves. Every write is one transaction (retried on lock
contention, see :class:`~harness.store.base.StoreBase`) and an idempotent upsert keyed by (study,
trial number) and (trial, epoch): a trial's final record (status, cost, every epoch, final metrics)
is either fully there or not there, a retried start keeps the first start time, and writing the
same epoch twice updates it. JSON has no NaN or infinity, so such final metrics are stored as null.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from harness import __version__
from trials.status import StudyStatus, TrialStatus
from trials.training.predictions import TestPredictions

from . import driver_lock
from .base import StoreBase, _now
from .errors import StoreError
from .liveness import check_lease, driver_identity
from .schema import (
    EPOCH_FIELDS,
    MEASUREMENT_FIELDS,
    STUDY_STATUSES,
    TRIAL_STATUSES,
    EpochRecord,
    Measurement,
    Study,
    TestPrediction,
    Trial,
    VerifiedMeasurement,
)

VERIFIED_FIELDS = tuple(
    c.name for c in VerifiedMeasurement.__table__.columns if c.name not in ("id", "trial_id", "measured_at")
)


def _git_commit() -> str | None:
    """The commit of the archsearch checkout that is running, when it runs from one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


class Writes(StoreBase):
    """Creating studies and setting their status; starting, updating and finishing trials."""

    # -- studies -----------------------------------------------------------------------------------
    def create_study(
        self,
        name: str,
        spec: Mapping[str, Any],
        objectives: Sequence[Mapping[str, str]] | Mapping[str, str],
        *,
        hardware: Mapping[str, Any] | None = None,
        exist_ok: bool = True,
        experiment: str | None = None,
        results_root: str | None = None,
        results_identity: str | None = None,
    ) -> int:
        """Create a study (or return the existing one of that name when ``exist_ok``).

        ``experiment``: the results-dir entry its Ray experiment is created under (the name, or the
        next free entry where a leftover holds it); rename, delete, purge and resume act on it.
        ``results_root``/``results_identity``: the absolute results dir and the experiment directory's
        identity (:meth:`StudyAdmin.study_results`)."""
        if isinstance(objectives, Mapping):
            objectives = [{"name": k, "direction": v} for k, v in objectives.items()]
        now = _now()
        row = {
            "name": name,
            "spec": dict(spec),
            "objectives": [dict(o) for o in objectives],
            "status": "running",
            "driver": driver_identity(),
            "created_at": now,
            "updated_at": now,
            "archsearch_version": __version__,
            "git_commit": _git_commit(),
            "hardware": dict(hardware) if hardware else None,
            "experiment": experiment or name,
            "results_root": results_root,
            "results_identity": results_identity,
        }

        def write(conn) -> int:
            stmt = self._insert(conn, Study).on_conflict_do_nothing(index_elements=["name"]).returning(Study.id)
            created = conn.execute(stmt, row).scalar()
            if created is not None:
                return created
            if not exist_ok:  # the name was taken, possibly by a concurrent creator a moment ago
                raise StoreError(f"study {name!r} already exists in {self.url}")
            return conn.execute(select(Study.id).where(Study.name == name)).scalar_one()

        study_id = self._write(write)
        self._study_ids[name] = study_id
        return study_id

    def restart_study(
        self,
        name: str,
        spec: Mapping[str, Any],
        objectives: Mapping[str, str],
        *,
        hardware: Mapping[str, Any] | None = None,
    ) -> None:
        """A study whose earlier attempt ran no trial starts again: the stored spec, objectives and
        version become this run's (the store never keeps a spec other than the one that ran)."""
        values = {
            "spec": dict(spec),
            "objectives": [{"name": k, "direction": v} for k, v in objectives.items()],
            "status": "running",
            "status_message": None,
            "archsearch_version": __version__,
            "git_commit": _git_commit(),
            "hardware": dict(hardware) if hardware else None,
            "updated_at": _now(),
        }
        statement = update(Study).where(Study.id == self._study_id(name)).values(**values)
        self._write(lambda conn: conn.execute(statement))

    def set_study_status(
        self,
        name: str,
        status: str,
        *,
        message: str | None = None,
        driver: str | None = None,
    ) -> None:
        """Set a study's status (with the one-line reason, when it failed or stopped).

        ``running`` records ``driver`` (this process, by default: see :func:`driver_identity`) so
        that a later command can tell a live search from one whose driver died; any other status
        clears it. A store that holds the study's lease (:meth:`Liveness.hold_lease`) writes
        only while the lease is still its own (:class:`~harness.store.liveness.LeaseLost` otherwise).
        """
        if status not in STUDY_STATUSES:
            raise StoreError(f"unknown study status {status!r}; use one of {', '.join(STUDY_STATUSES)}")
        study_id = self._study_id(name)
        owner = (driver or driver_identity()) if status == StudyStatus.RUNNING else None
        values = {"status": status, "updated_at": _now(), "driver": owner, "status_message": message}

        def write(conn) -> None:
            check_lease(conn, study_id, name, self.lease_of(name))
            conn.execute(Study.__table__.update().where(Study.id == study_id).values(**values))

        self._write(write)
        path = self.sqlite_file()
        if status != StudyStatus.RUNNING and path is not None:  # its search has ended here: its driver lock goes
            driver_lock.release(path, study_id)

    # -- trials ------------------------------------------------------------------------------------
    def start_trial(
        self,
        study: str,
        number: int,
        config: Mapping[str, Any],
        *,
        seed: int | None = None,
        optuna_number: int | None = None,
        host: str | None = None,
        device: str | None = None,
        parameters: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a trial as running (idempotent: a retried start keeps one row and its first start time).

        ``parameters``: ``{"sampled": ..., "fixed": ...}`` (see ``search_space.sampling.split_params``)."""
        row = {
            "study_id": self._study_id(study),
            "number": number,
            "status": "running",
            "config": dict(config),
            "seed": seed,
            "optuna_number": optuna_number,
            "host": host,
            "device": device,
            "started_at": _now(),
        }
        if parameters is not None:
            row["parameters"] = dict(parameters)

        def write(conn) -> None:
            check_lease(conn, row["study_id"], study, self.lease_of(study))
            self._upsert(conn, Trial, [row], ("study_id", "number"), keep=("started_at",))

        self._write(write)

    def interrupt_running_trials(self, study: str) -> int:
        """The search was stopped on purpose: its ``running`` trials become ``interrupted`` (resumable)."""
        study_id = self._study_id(study)
        values = {"status": "interrupted", "ended_at": _now()}
        statement = (
            update(Trial).where(Trial.study_id == study_id, Trial.status == TrialStatus.RUNNING).values(**values)
        )

        def write(conn) -> int:
            check_lease(conn, study_id, study, self.lease_of(study))
            return conn.execute(statement).rowcount

        return self._write(write)

    def record_verified(self, study: str, number: int, values: Mapping[str, Any]) -> None:
        """Add one verification of a trial's throughput and latency (``archsearch verify``); the
        in-trial measurement stays as it was."""
        study_id = self._study_id(study)
        unknown = sorted(set(values) - set(VERIFIED_FIELDS))
        if unknown:
            raise StoreError(f"unknown verified field(s) {', '.join(unknown)}; use {', '.join(VERIFIED_FIELDS)}")

        def write(conn) -> None:
            trial_id = conn.execute(
                select(Trial.id).where(Trial.study_id == study_id, Trial.number == number)
            ).scalar_one_or_none()
            if trial_id is None:
                raise StoreError(f"study {study!r} has no trial {number}")
            row = {"trial_id": trial_id, "measured_at": _now(), **dict(values)}
            conn.execute(VerifiedMeasurement.__table__.insert().values(**row))

        self._write(write)

    def record_epoch(self, study: str, number: int, metrics: Mapping[str, Any]) -> None:
        """Write (or rewrite) one epoch of a running trial's learning curve."""
        study_id = self._study_id(study)

        def write(conn) -> None:
            check_lease(conn, study_id, study, self.lease_of(study))
            trial_id = conn.execute(select(Trial.id).where(Trial.study_id == study_id, Trial.number == number)).scalar()
            if trial_id is None:
                raise StoreError(f"trial {number} of study {study!r} has not been started")
            self._upsert(conn, EpochRecord, [_epoch_row(trial_id, metrics)], ("trial_id", "epoch"))

        self._write(write)

    def finish_trial(
        self,
        study: str,
        number: int,
        *,
        status: str,
        config: Mapping[str, Any],
        measurement: Mapping[str, Any] | None = None,
        epochs: Iterable[Mapping[str, Any]] = (),
        final: Mapping[str, Any] | None = None,
        error: str | None = None,
        diverged_at_step: int | None = None,
        seed: int | None = None,
        optuna_number: int | None = None,
        host: str | None = None,
        device: str | None = None,
        started_at: datetime | None = None,
        parameters: Mapping[str, Any] | None = None,
        test_predictions: TestPredictions | None = None,
    ) -> None:
        """Write a trial's whole final record in ONE transaction: all of it lands, or none of it.

        ``test_predictions``: a completed trial's per-image test predictions and labels, kept in
        their own table (compact, ``TestPredictions.encode()``), read by ``Store.test_predictions``."""
        if status not in TRIAL_STATUSES:
            raise StoreError(f"unknown trial status {status!r}; use one of {', '.join(TRIAL_STATUSES)}")
        study_id = self._study_id(study)
        epoch_list = _last_per_epoch(epochs)
        row = {
            "study_id": study_id,
            "number": number,
            "status": status,
            "config": dict(config),
            "final": _finite_or_none(final) if final else None,
            "error": error,
            "diverged_at_step": diverged_at_step,
            "ended_at": _now(),
        }
        # Metadata recorded at start is kept unless given again.
        optional = {"seed": seed, "optuna_number": optuna_number, "host": host, "device": device}
        optional["parameters"] = dict(parameters) if parameters is not None else None
        optional["started_at"] = started_at
        row.update({key: value for key, value in optional.items() if value is not None})

        def write(conn) -> None:
            check_lease(conn, study_id, study, self.lease_of(study))
            trial_id = self._upsert(conn, Trial, [row], ("study_id", "number"), returning=Trial.id).scalar_one()
            if measurement:
                values = {k: measurement.get(k) for k in MEASUREMENT_FIELDS}
                self._upsert(conn, Measurement, [{"trial_id": trial_id, **values}], ("trial_id",))
            if epoch_list:
                rows = [_epoch_row(trial_id, m) for m in epoch_list]
                self._upsert(conn, EpochRecord, rows, ("trial_id", "epoch"))
            if test_predictions is not None:
                encoded = test_predictions.encode()
                kept = {"trial_id": trial_id, "images": test_predictions.count, **encoded}
                self._upsert(conn, TestPrediction, [kept], ("trial_id",))
            conn.execute(Study.__table__.update().where(Study.id == study_id).values(updated_at=_now()))

        self._write(write)


def _last_per_epoch(epochs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One record per epoch number, the last one winning (as separate ``record_epoch`` calls would).

    Records without a number are kept, to be rejected by :func:`_epoch_row`.
    """
    by_epoch: dict[Any, Mapping[str, Any]] = {}
    for i, metrics in enumerate(epochs):
        key = metrics.get("epoch")
        by_epoch[key if key is not None else ("missing", i)] = metrics
    return list(by_epoch.values())


def _finite_or_none(values: Mapping[str, Any]) -> dict[str, Any]:
    """JSON has no NaN/inf: store them as null rather than as invalid JSON."""
    out = {}
    for key, value in values.items():
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            value = None
        out[key] = value
    return out


def _epoch_row(trial_id: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
    row = {name: metrics.get(name) for name in EPOCH_FIELDS}
    if row["images_per_s"] is None:
        row["images_per_s"] = metrics.get("train_images_per_s")
    if row["epoch"] is None:
        raise StoreError("an epoch record needs an 'epoch' number")
    return {"trial_id": trial_id, **row}
