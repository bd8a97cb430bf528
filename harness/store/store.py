"""The SQL store: one object, opened from a URL, holding studies, trials, costs and learning curves.

Writes are idempotent upserts keyed by (study, trial number) and (trial, epoch), each in one
transaction: a trial's final record (status, cost, every epoch, final metrics) is either fully
there or not there, and writing the same epoch twice updates it. SQLite runs in WAL mode with a
busy timeout and takes its write lock up front (``BEGIN IMMEDIATE``), so concurrent writers
queue instead of failing with "database is locked"; PostgreSQL serialises schema migrations
with an advisory lock. Queries return pandas DataFrames.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event, func, inspect, select, text, update
from sqlalchemy.exc import DBAPIError, OperationalError

from .errors import StoreError
from .schema import (
    EPOCH_FIELDS,
    MEASUREMENT_FIELDS,
    NUMERIC_MEASUREMENT_FIELDS,
    STUDY_STATUSES,
    TRIAL_STATUSES,
    VERSION_TABLE,
    EpochRecord,
    Measurement,
    Study,
    Trial,
)
from .urls import mask_url, normalise_url, resolve_store_url

T = TypeVar("T")

_MIGRATIONS = Path(__file__).with_name("migrations")
_PG_MIGRATION_LOCK = 0x41524348  # "ARCH": one advisory lock id for schema migrations
_RETRYABLE_PG_CODES = {"40001", "40P01"}  # serialization failure, deadlock detected
_SQLITE_BUSY_TIMEOUT_MS = 60_000
HEARTBEAT_S = 30.0  # a running search's driver touches its study this often
HEARTBEAT_STALE_S = 600.0  # a driver on another host silent this long is taken as gone


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _first_line(error: BaseException) -> str:
    cause = getattr(error, "orig", None) or error
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


def _git_commit() -> str | None:
    """The commit of the archsearch checkout that is running, when it runs from one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _alembic_config(connection=None):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def schema_revisions() -> tuple[str, list[str]]:
    """(head revision, every revision this archsearch knows)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_alembic_config())
    return script.get_current_head(), [r.revision for r in script.walk_revisions()]


def _read_only_sqlite_url(url):
    """The same SQLite file opened with ``mode=ro``: SQLite itself refuses every write, and no
    journal-mode switch touches a file that may not even be a store.

    On a read-only mount SQLite cannot create the shared-memory file a WAL database's readers
    use, so there the file is opened ``immutable`` (no locks, no -shm): nothing can change it.
    """
    import os
    from urllib.parse import quote

    path = Path(url.database).resolve()
    flags = "mode=ro" if os.access(path.parent, os.W_OK) else "mode=ro&immutable=1"
    return url.set(database=f"file:{quote(str(path))}?{flags}", query={**url.query, "uri": "true"})


def _make_engine(url, read_only: bool = False) -> Engine:
    if url.get_backend_name() == "sqlite":
        if read_only and url.database and url.database != ":memory:":
            url = _read_only_sqlite_url(url)
        engine = create_engine(url, connect_args={"timeout": _SQLITE_BUSY_TIMEOUT_MS / 1000})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (below)
            cursor = dbapi_connection.cursor()
            if not read_only:  # a reader never changes the file's journal mode
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(connection) -> None:
            # Writers take the lock at BEGIN and wait for it (busy timeout) instead of failing
            # later when a read transaction tries to upgrade: no "database is locked" surprises.
            immediate = connection.get_execution_options().get("archsearch_write", False)
            connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine
    # A reader's transactions are READ ONLY on the server: a query can never write, whatever it is.
    options = {"postgresql_readonly": True} if read_only else {}
    return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 10}, execution_options=options)


class Store:
    """Studies, trials, measurements and learning curves in SQLite or PostgreSQL."""

    def __init__(self, engine: Engine, url: str, read_only: bool = False):
        self.engine = engine
        self.url = mask_url(url)  # never keep a printable copy with the password
        self.read_only = read_only
        self._study_ids: dict[str, int] = {}

    # -- opening -----------------------------------------------------------------------------------
    @classmethod
    def open(cls, url: str | None = None, *, create: bool = True, read_only: bool = False) -> Store:
        """Open (and create or migrate) the store at ``url`` (see :func:`resolve_store_url`).

        ``create=False``: a store that does not exist yet is an error (no SQLite file is created).
        ``read_only=True`` (the commands that only read: studies, trials, pareto, report): the
        database is opened read-only (SQLite ``mode=ro``, PostgreSQL READ ONLY transactions), so it
        works on a read-only mount and leaves any file, a store or not, byte-for-byte unchanged; a
        store of an older schema is read as it is, not migrated.
        """
        raw = resolve_store_url(url)
        parsed = normalise_url(raw)
        masked = mask_url(raw)
        create = create and not read_only
        if parsed.get_backend_name() == "sqlite" and not create:
            path = parsed.database
            if path and path != ":memory:" and not Path(path).exists():
                raise StoreError(f"no store at {masked}: the file does not exist (nothing has been recorded there)")
        engine = _make_engine(parsed, read_only)
        try:
            with engine.connect():
                pass
        except (OperationalError, DBAPIError) as error:
            engine.dispose()
            raise StoreError(f"cannot connect to the store at {masked}: {_first_line(error)}") from None
        store = cls(engine, raw, read_only)
        try:
            store._check_schema() if read_only else store._migrate(create)
        except Exception:
            engine.dispose()
            raise
        return store

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _migrate(self, create: bool) -> None:
        head, known = schema_revisions()
        with self._write_connection() as conn, conn.begin():
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
            current = None
            if inspect(conn).has_table(VERSION_TABLE):
                current = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
            if current == head:
                return
            if current is not None and current not in known:
                raise StoreError(
                    f"the store at {self.url} has schema version {current}, newer than this archsearch "
                    f"knows (up to {head}): upgrade archsearch to open it"
                )
            if current is None and not create:
                raise StoreError(f"no archsearch store at {self.url}: it has no archsearch tables yet")
            from alembic import command

            command.upgrade(_alembic_config(conn), "head")

    def _check_schema(self) -> None:
        """What ``_migrate`` checks, without writing: an archsearch store of a schema we can read."""
        head, known = schema_revisions()
        try:
            current = self.schema_version()
        except DBAPIError as error:  # e.g. a file that is not a database at all
            raise StoreError(f"no archsearch store at {self.url}: {_first_line(error)}") from None
        if current is None:
            raise StoreError(f"no archsearch store at {self.url}: it has no archsearch tables")
        if current not in known:
            raise StoreError(
                f"the store at {self.url} has schema version {current}, newer than this archsearch "
                f"knows (up to {head}): upgrade archsearch to open it"
            )

    def schema_version(self) -> str | None:
        with self.engine.connect() as conn:
            if not inspect(conn).has_table(VERSION_TABLE):
                return None
            return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()

    # -- transactions ------------------------------------------------------------------------------
    def _write_connection(self):
        return self.engine.connect().execution_options(archsearch_write=True)

    def _write(self, fn: Callable[[Any], T], attempts: int = 8) -> T:
        """Run ``fn(connection)`` in one write transaction, retrying lock contention and deadlocks."""
        for attempt in range(attempts):
            try:
                with self._write_connection() as conn, conn.begin():
                    return fn(conn)
            except DBAPIError as error:
                if attempt == attempts - 1 or not self._retryable(error):
                    raise
                time.sleep(min(2.0, 0.05 * 2**attempt))
        raise AssertionError("unreachable")

    @staticmethod
    def _retryable(error: DBAPIError) -> bool:
        code = getattr(getattr(error, "orig", None), "sqlstate", None)
        message = str(getattr(error, "orig", error)).lower()
        return code in _RETRYABLE_PG_CODES or "database is locked" in message or "database is busy" in message

    def _insert(self, conn, model):
        if conn.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        return insert(model)

    def _upsert(
        self,
        conn,
        model,
        rows: Sequence[dict[str, Any]],
        keys: Sequence[str],
        returning=None,
        keep: Sequence[str] = (),
    ):
        """INSERT ... ON CONFLICT (keys) DO UPDATE for ``rows`` (all with the same columns).

        Columns in ``keep`` keep the stored value when there is one (a first start time outlives a
        retry). The statement carries no values, so SQLAlchemy compiles it once and caches it; the
        rows go as parameters (executemany for several rows).
        """
        stmt = self._insert(conn, model)
        table = model.__table__
        updates = {
            name: func.coalesce(table.c[name], stmt.excluded[name]) if name in keep else stmt.excluded[name]
            for name in rows[0]
            if name not in keys
        }
        stmt = stmt.on_conflict_do_update(index_elements=list(keys), set_=updates)
        if returning is not None:
            return conn.execute(stmt.returning(returning), rows[0])
        return conn.execute(stmt, list(rows))

    # -- studies -----------------------------------------------------------------------------------
    def create_study(
        self,
        name: str,
        spec: Mapping[str, Any],
        objectives: Sequence[Mapping[str, str]] | Mapping[str, str],
        *,
        hardware: Mapping[str, Any] | None = None,
        exist_ok: bool = True,
    ) -> int:
        """Create a study (or return the existing one of that name when ``exist_ok``)."""
        from harness import __version__

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

    def set_study_status(
        self, name: str, status: str, *, message: str | None = None, driver: str | None = None
    ) -> None:
        """Set a study's status (with the one-line reason, when it failed or stopped).

        ``running`` records ``driver`` (this process, by default: see :func:`driver_identity`) so
        that a later command can tell a live search from one whose driver died; any other status
        clears it.
        """
        if status not in STUDY_STATUSES:
            raise StoreError(f"unknown study status {status!r}; use one of {', '.join(STUDY_STATUSES)}")
        study_id = self._study_id(name)
        owner = (driver or driver_identity()) if status == "running" else None
        values = {"status": status, "updated_at": _now(), "driver": owner, "status_message": message}
        self._write(lambda conn: conn.execute(Study.__table__.update().where(Study.id == study_id).values(**values)))

    def claim_study(self, name: str, stale_after_s: float = HEARTBEAT_STALE_S) -> None:
        """Take the study's driver lease for this process, or refuse (:class:`StoreError`) while another
        live driver holds it: one driver per study, whatever the store.

        One write transaction: the study row is locked (``FOR UPDATE`` on PostgreSQL; SQLite's write
        transactions begin with ``BEGIN IMMEDIATE``), its holder checked (alive by PID on this host, by
        heartbeat from another) and replaced. A lease whose driver is gone is taken over.
        """
        study_id = self._study_id(name)
        me = driver_identity()
        table = Study.__table__

        def claim(conn) -> None:
            query = select(table.c.status, table.c.driver, table.c.updated_at).where(table.c.id == study_id)
            row = conn.execute(query.with_for_update()).one()
            holder = row.driver
            held = row.status == "running" and holder and holder != me
            if held and _driver_gone(holder, row.updated_at, _now(), stale_after_s) is None:
                host, pid = ([*holder.split(), "?", "?"])[:2]
                raise StoreError(
                    f"study {name!r} is being run by another driver (pid {pid} on {host}): wait for it to "
                    "end, or stop it (Ctrl-C there) and resume it with --resume"
                )
            conn.execute(
                table.update()
                .where(table.c.id == study_id)
                .values(status="running", driver=me, status_message=None, updated_at=_now())
            )

        self._write(claim)

    def heartbeat(self, name: str) -> None:
        """A running study's driver says it is alive (``updated_at``); see :meth:`mark_interrupted`."""
        study_id = self._study_id(name)
        self._write(
            lambda conn: conn.execute(
                Study.__table__.update()
                .where(Study.id == study_id, Study.status == "running")
                .values(updated_at=_now())
            )
        )

    def gone_drivers(self, stale_after_s: float = HEARTBEAT_STALE_S) -> dict[str, str]:
        """``running`` studies whose driver is gone, with why (what :meth:`mark_interrupted` would record)."""
        table = Study.__table__
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(table.c.name, table.c.driver, table.c.updated_at).where(table.c.status == "running")
            ).all()
        now = _now()
        reasons = {name: _driver_gone(driver, updated_at, now, stale_after_s) for name, driver, updated_at in rows}
        return {name: reason for name, reason in reasons.items() if reason is not None}

    def mark_interrupted(self, stale_after_s: float = HEARTBEAT_STALE_S) -> list[str]:
        """Studies marked ``running`` whose driver is gone become ``interrupted``; returns their names.

        A driver on this host is checked directly (its process, by PID and start time); one on
        another host is taken as gone when it has not sent a heartbeat for ``stale_after_s``.
        """
        table = Study.__table__
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(table.c.id, table.c.name, table.c.driver, table.c.updated_at).where(table.c.status == "running")
            ).all()
        gone = []
        now = _now()
        for study_id, name, driver, updated_at in rows:
            reason = _driver_gone(driver, updated_at, now, stale_after_s)
            if reason is None:
                continue

            def write(conn, study_id=study_id, reason=reason) -> None:
                conn.execute(
                    table.update()
                    .where(table.c.id == study_id, table.c.status == "running")
                    .values(status="interrupted", driver=None, status_message=reason, updated_at=_now())
                )

            self._write(write)
            gone.append(name)
        return gone

    def _study_id(self, name: str) -> int:
        if name not in self._study_ids:
            with self.engine.connect() as conn:
                study_id = conn.execute(select(Study.id).where(Study.name == name)).scalar()
            if study_id is None:
                raise StoreError(self._unknown_study_message(name))
            self._study_ids[name] = study_id
        return self._study_ids[name]

    def _unknown_study_message(self, name: str) -> str:
        known = self.study_names()
        hint = f"known studies: {', '.join(known)}" if known else "the store has no studies yet"
        return f"study {name!r} not found in {self.url}; {hint}"

    def study_names(self) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(Study.name).order_by(Study.id)).scalars())

    def study(self, name: str) -> dict[str, Any]:
        """The study's record as a dict (spec, objectives, status, times, version, hardware)."""
        study_id = self._study_id(name)
        with self.engine.connect() as conn:
            row = conn.execute(select(Study.__table__).where(Study.id == study_id)).mappings().one()
        return dict(row)

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
    ) -> None:
        """Record a trial as running (idempotent: a retried start keeps one row and its first start time)."""
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
        self._write(lambda conn: self._upsert(conn, Trial, [row], ("study_id", "number"), keep=("started_at",)))

    def interrupt_running_trials(self, study: str) -> int:
        """The search was stopped on purpose: its ``running`` trials become ``interrupted`` (resumable)."""
        study_id = self._study_id(study)
        values = {"status": "interrupted", "ended_at": _now()}
        statement = (
            update(Trial).where(Trial.study_id == study_id, Trial.status == "running").values(**values)
        )
        return self._write(lambda conn: conn.execute(statement).rowcount)

    def record_epoch(self, study: str, number: int, metrics: Mapping[str, Any]) -> None:
        """Write (or rewrite) one epoch of a running trial's learning curve."""
        study_id = self._study_id(study)

        def write(conn) -> None:
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
    ) -> None:
        """Write a trial's whole final record in ONE transaction: all of it lands, or none of it."""
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
        optional["started_at"] = started_at
        row.update({key: value for key, value in optional.items() if value is not None})

        def write(conn) -> None:
            trial_id = self._upsert(conn, Trial, [row], ("study_id", "number"), returning=Trial.id).scalar_one()
            if measurement:
                values = {k: measurement.get(k) for k in MEASUREMENT_FIELDS}
                self._upsert(conn, Measurement, [{"trial_id": trial_id, **values}], ("trial_id",))
            if epoch_list:
                rows = [_epoch_row(trial_id, m) for m in epoch_list]
                self._upsert(conn, EpochRecord, rows, ("trial_id", "epoch"))
            conn.execute(Study.__table__.update().where(Study.id == study_id).values(updated_at=_now()))

        self._write(write)

    def write_result(self, study: str, number: int, result: Any, **metadata: Any) -> None:
        """Record a :class:`trials.runner.TrialResult` (or its ``to_dict()``) as trial ``number``."""
        data = result.to_dict() if hasattr(result, "to_dict") else dict(result)
        cost = data.get("cost") or None
        self.finish_trial(
            study,
            number,
            status=data["status"],
            config=data["config"],
            measurement=cost,
            epochs=data.get("epochs", ()),
            final=data.get("final"),
            error=data.get("error"),
            diverged_at_step=data.get("diverged_at_step"),
            device=metadata.pop("device", cost.get("device") if cost else None),
            seed=metadata.pop("seed", data["config"].get("seed") if isinstance(data.get("config"), dict) else None),
            **metadata,
        )

    # -- queries -----------------------------------------------------------------------------------
    def studies(self):
        """One row per study: name, status (and why), objectives, times, version, trial counts by status.

        Studies whose driver died are marked ``interrupted`` first, so the status shown is true.
        """
        import pandas as pd

        gone = self.gone_drivers() if self.read_only else {name: None for name in self.mark_interrupted()}
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
            if gone.get(s["name"]):  # read-only: shown as it is, without recording it
                shown_status, message = "interrupted", gone[s["name"]]
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
        import pandas as pd

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
        import pandas as pd

        if frame.empty:
            return frame.drop(columns=["config"])
        configs = [_decoded(c) or {} for c in frame.pop("config")]
        if not flatten:
            return frame.assign(config=configs)
        flat = pd.json_normalize(configs, sep=".").set_index(frame.index).add_prefix("config.")
        return pd.concat([frame, flat], axis=1)

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
        objectives = _decoded(self.study(study).get("objectives")) or []
        return [o["name"] for o in objectives if isinstance(o, dict) and o.get("name") not in MEASUREMENT_FIELDS]

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
        import pandas as pd

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
        import pandas as pd

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
        import pandas as pd

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

    def counts(self, study: str, *, epochs: bool = True) -> dict[str, int]:
        """Number of trials by status, and of epoch rows (unless ``epochs=False``: the trial counts
        alone are one indexed query, cheap enough to poll), for one study."""
        study_id = self._study_id(study)
        with self.engine.connect() as conn:
            by_status = dict(
                conn.execute(
                    select(Trial.status, func.count()).where(Trial.study_id == study_id).group_by(Trial.status)
                ).all()
            )
            if not epochs:
                return {s: by_status.get(s, 0) for s in TRIAL_STATUSES}
            n_epochs = conn.execute(
                select(func.count())
                .select_from(EpochRecord.__table__.join(Trial.__table__, Trial.id == EpochRecord.trial_id))
                .where(Trial.study_id == study_id)
            ).scalar_one()
        return {**{s: by_status.get(s, 0) for s in TRIAL_STATUSES}, "epochs": n_epochs}


def driver_identity(pid: int | None = None) -> str:
    """``"HOST PID START"`` of a process (this one by default): START (the process's start time in
    clock ticks since boot, from /proc) tells a live driver from a new process that reused its PID."""
    import os
    import socket

    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()} {pid} {_process_start(pid) or 0}"


def _process_start(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22 of proc(5), counted after the command name


def _pid_alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _driver_gone(driver: str | None, updated_at: datetime | None, now: datetime, stale_after_s: float) -> str | None:
    """Why a ``running`` study's driver is known to be gone, or None while it may be alive."""
    import socket

    host, pid, start = [*driver.split(), "", "", ""][:3] if driver else ("", "", "")
    if host == socket.gethostname() and pid.isdigit():
        alive = _pid_alive(int(pid)) and str(_process_start(int(pid)) or 0) == start
        return None if alive else f"interrupted: its driver (pid {pid} on {host}) stopped before the search ended"
    if updated_at is not None:
        if updated_at.tzinfo is None:  # SQLite returns naive datetimes (stored in UTC)
            updated_at = updated_at.replace(tzinfo=timezone.utc)
        idle = (now - updated_at).total_seconds()
        if idle > stale_after_s:
            where = f" on {host}" if host else ""
            return f"interrupted: no heartbeat from its driver{where} for {idle / 60:.0f} minutes"
    return None


def _last_per_epoch(epochs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One record per epoch number, the last one winning (as separate ``record_epoch`` calls would).

    Records without a number are kept, to be rejected by :func:`_epoch_row`.
    """
    by_epoch: dict[Any, Mapping[str, Any]] = {}
    for i, metrics in enumerate(epochs):
        key = metrics.get("epoch")
        by_epoch[key if key is not None else ("missing", i)] = metrics
    return list(by_epoch.values())


def _decoded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


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
