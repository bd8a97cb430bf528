"""Deleting and renaming a study (``archsearch studies --delete`` / ``--rename``), ours and Optuna's
rows together.

Optuna keeps its studies in the same database as ours (its tables have no prefix: ``studies``,
``trials``, ``trial_params``, ...; see :mod:`harness.store.schema`). Going through
``optuna.delete_study`` would commit on Optuna's own connection, so a failure after it would leave
our rows without Optuna's or the reverse. Instead both are changed in ONE write transaction of ours:
Optuna's rows through plain SQL on its tables, which are found by reflection on the open
connection (the tables referring to ``studies`` and to ``trials`` by foreign key), so a newer
Optuna that adds a table of trial or study attributes is still covered, and a schema this code
does not understand (a table one more level down) is refused rather than half deleted.

A study whose search driver is alive is refused: its driver would keep writing rows for a study
that no longer exists.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import MetaData, Table, delete, inspect, select, update

from trials.status import StudyStatus

from .base import _now
from .errors import StoreError
from .liveness import (
    HEARTBEAT_STALE_S,
    Liveness,
    describe_driver,
    driver_columns,
    driver_gone,
    driver_identity,
    driver_record,
)
from .schema import EpochRecord, Measurement, Study, TestPrediction, Trial, VerifiedMeasurement

OPTUNA_STUDIES = "studies"  # Optuna's study table (name column ``study_name``, key ``study_id``)
OPTUNA_TRIALS = "trials"  # Optuna's trial table (key ``trial_id``, ``study_id`` refers to its study)


def _refuse_live_driver(conn, name: str, study_id: int, action: str, lock_held: bool | None) -> dict[str, Any]:
    """The study row, locked for the transaction; a live driver (not this process) is refused.
    ``lock_held``: what the store knows of the study's driver lock (:meth:`StoreBase.driver_lock_held`)."""
    table = Study.__table__
    query = select(table.c.status, *driver_columns(table)).where(table.c.id == study_id)
    row = conn.execute(query.with_for_update()).one()
    record = driver_record(row, lock_held)
    foreign = row.status == StudyStatus.RUNNING and record.driver and record.driver != driver_identity()
    if foreign and driver_gone(record, HEARTBEAT_STALE_S) is None:
        raise StoreError(
            f"cannot {action} study {name!r}: its search is running (driver {describe_driver(record.driver)}); "
            "stop it first (Ctrl-C there)"
        )
    return dict(row._mapping)


def _optuna_tables(conn) -> tuple[list[Table], list[Table], Table, Table] | None:
    """(tables referring to Optuna's trials, tables referring to its studies, trials, studies), or
    None where the database has no Optuna tables (a study that never reached Optuna)."""
    names = set(inspect(conn).get_table_names())
    if OPTUNA_STUDIES not in names or OPTUNA_TRIALS not in names:
        return None
    metadata = MetaData()
    optuna_names = [n for n in names if not n.startswith("archsearch_") and n != "alembic_version"]
    metadata.reflect(conn, only=optuna_names)
    trial_children, study_children = [], []
    for table in metadata.tables.values():
        referred = {key.column.table.name for key in table.foreign_keys}
        if table.name == OPTUNA_TRIALS:
            continue
        if OPTUNA_TRIALS in referred:
            trial_children.append(table)
        elif OPTUNA_STUDIES in referred:
            study_children.append(table)
    for table in [*trial_children, *study_children]:
        below = [t.name for t in metadata.tables.values() if any(k.column.table is table for k in t.foreign_keys)]
        if below:
            raise StoreError(
                f"Optuna's table {table.name} has tables referring to it ({', '.join(below)}): an Optuna schema "
                "this archsearch does not know; nothing was changed"
            )
    return trial_children, study_children, metadata.tables[OPTUNA_TRIALS], metadata.tables[OPTUNA_STUDIES]


def delete_optuna_rows(conn, name: str) -> int:
    """Delete Optuna's study ``name`` and everything of it, on ``conn`` (inside its transaction);
    returns how many Optuna studies went (0: Optuna never had it)."""
    tables = _optuna_tables(conn)
    if tables is None:
        return 0
    trial_children, study_children, trials, studies = tables
    study_id = conn.execute(select(studies.c.study_id).where(studies.c.study_name == name)).scalar()
    if study_id is None:
        return 0
    trial_ids = select(trials.c.trial_id).where(trials.c.study_id == study_id)
    for table in trial_children:
        conn.execute(delete(table).where(table.c.trial_id.in_(trial_ids)))
    conn.execute(delete(trials).where(trials.c.study_id == study_id))
    for table in study_children:
        conn.execute(delete(table).where(table.c.study_id == study_id))
    conn.execute(delete(studies).where(studies.c.study_id == study_id))
    return 1


def rename_optuna_study(conn, old: str, new: str) -> int:
    """Rename Optuna's study ``old`` to ``new`` on ``conn``; returns how many were renamed (0 or 1)."""
    tables = _optuna_tables(conn)
    if tables is None:
        return 0
    studies = tables[3]
    if conn.execute(select(studies.c.study_id).where(studies.c.study_name == new)).scalar() is not None:
        raise StoreError(f"cannot rename to {new!r}: Optuna already has a study of that name in this database")
    return conn.execute(update(studies).where(studies.c.study_name == old).values(study_name=new)).rowcount


class StudyAdmin(Liveness):
    """Deleting and renaming whole studies, each in one write transaction (see the module docstring),
    and the results-dir entry each study owns."""

    def study_experiment(self, name: str) -> str:
        """The results-dir entry study ``name`` created its Ray experiment under (kept across renames;
        a study created without one, by a test or an older archsearch, owns its current name)."""
        study_id = self._study_id(name)
        with self.engine.connect() as conn:
            recorded = conn.execute(select(Study.experiment).where(Study.id == study_id)).scalar()
        return name if recorded is None else str(recorded)  # '' is damage: refused as a name by the caller

    def study_results(self, name: str) -> tuple[str | None, str | None]:
        """(the absolute results dir, the experiment directory's identity "DEVICE:INODE") study ``name``
        recorded when it created its experiment; (None, None) for a study of an older archsearch."""
        study_id = self._study_id(name)
        if "results_root" not in self.present_columns(Study.__table__):  # an older store, read as it is
            return (None, None)
        with self.engine.connect() as conn:
            row = conn.execute(select(Study.results_root, Study.results_identity).where(Study.id == study_id)).one()
        return (row[0] or None, row[1] or None)

    def record_results(self, name: str, root: str, identity: str | None) -> None:
        """Record where study ``name``'s results are (an older study, on resume; see :meth:`study_results`)."""
        study_id = self._study_id(name)
        values = {"results_root": root, "results_identity": identity}
        self._write(lambda conn: conn.execute(update(Study).where(Study.id == study_id).values(**values)))

    def recorded_experiments(self) -> set[str]:
        """Every results-dir entry a study of this store owns (a new study never takes one of them)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(Study.name, Study.experiment)).all()
        return {name if experiment is None else experiment for name, experiment in rows}

    def delete_study(self, name: str) -> dict[str, int]:
        """Delete the study ``name``: its trials, costs, epochs, verifications and Optuna's rows, all
        or nothing. Returns the rows deleted per kind. Refused while its driver is alive."""
        study_id = self._study_id(name)
        trial_ids = select(Trial.id).where(Trial.study_id == study_id)
        held = self.driver_lock_held(study_id)

        def write(conn) -> dict[str, int]:
            _refuse_live_driver(conn, name, study_id, "delete", held)
            deleted = {}
            for label, model in (("verified", VerifiedMeasurement), ("epochs", EpochRecord),
                                 ("measurements", Measurement), ("test_predictions", TestPrediction)):  # fmt: skip
                deleted[label] = conn.execute(delete(model).where(model.trial_id.in_(trial_ids))).rowcount
            deleted["trials"] = conn.execute(delete(Trial).where(Trial.study_id == study_id)).rowcount
            deleted["studies"] = conn.execute(delete(Study).where(Study.id == study_id)).rowcount
            deleted["optuna_studies"] = delete_optuna_rows(conn, name)
            return deleted

        try:
            return self._write(write)
        finally:
            self._study_ids.pop(name, None)

    def rename_study(self, old: str, new: str) -> None:
        """Rename the study ``old`` to ``new`` (ours and Optuna's), or refuse: ``new`` taken, or a live driver."""
        study_id = self._study_id(old)
        if old == new:
            raise StoreError(f"study {old!r} already has that name")
        held = self.driver_lock_held(study_id)

        def write(conn) -> None:
            _refuse_live_driver(conn, old, study_id, "rename", held)
            if conn.execute(select(Study.id).where(Study.name == new)).scalar() is not None:
                raise StoreError(f"cannot rename {old!r} to {new!r}: a study of that name exists in {self.url}")
            conn.execute(update(Study).where(Study.id == study_id).values(name=new, updated_at=_now()))
            rename_optuna_study(conn, old, new)

        try:
            self._write(write)
        finally:
            self._study_ids.pop(old, None)
            self._study_ids.pop(new, None)
