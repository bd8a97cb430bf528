"""The store under real concurrency and real crashes, against SQLite AND PostgreSQL.

A search runs many trial workers on one store at once, and a worker can die at any moment (OOM
killer, preemption, Ctrl-C of a Ray cluster). The store's promises, checked here with separate
OS processes (never threads sharing one engine; ``spawn`` so that no child inherits a parent's
connection pool), are: concurrent writers neither lose nor duplicate rows and never surface
"database is locked"; a trial's final record lands entirely or not at all, even when its writer
is SIGKILLed halfway through the transaction; the store accepts writes after such a death.

The child process functions live at module level so that ``spawn`` can import them: they use
only the store (no torch), and report back through a queue before re-raising any exception, so
that a failure in a child shows up as its traceback in the parent's assertion message.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, func, select, text

from harness.store import Store, StoreError
from harness.store.schema import EpochRecord, Measurement, Study, Trial
from harness.store.store import schema_revisions
from harness.store.urls import normalize_url

SPAWN = multiprocessing.get_context("spawn")

STUDY = "concurrency"
SPEC = {"name": STUDY, "search_space": "cait"}
OBJECTIVES = {"top1": "max", "flops": "min"}

WRITERS = 8
TRIALS_PER_WRITER = 200
EPOCHS = (1, 2, 3)
FINISH_TWICE_EVERY = 10  # every 10th trial is finished twice (a retried worker): must stay one record

TRIAL_A, TRIAL_B = 1, 2
KILLED_EPOCHS = 200_000  # trial B's single transaction: seconds long even with a much faster store
KILLED_APP_NAME = "archsearch-killed-writer"
CHILD_TIMEOUT_S = 600


# -- what every writer writes (children and parent agree on it) -----------------------------------


def trial_config(number: int) -> dict[str, Any]:
    return {
        "model": {"family": "cait", "depth": 4 + number % 8, "embed_dim": 64 * (1 + number % 4)},
        "training": {"lr": 1e-3 * (1 + number % 5)},
        "seed": number,
    }


def measurement(number: int) -> dict[str, Any]:
    return {"params": 1_000 + number, "flops": 10_000 + number, "throughput": 100.0 + number, "device": "cpu"}


def epoch_metrics(number: int, epoch: int, provisional: bool = False) -> dict[str, Any]:
    """The metrics of one epoch; ``provisional`` values are written first and must be overwritten."""
    top1 = -1.0 if provisional else number + epoch / 10
    return {"epoch": epoch, "step": 10 * epoch, "train_loss": 1.0 / epoch, "top1": top1, "lr": 1e-3}


def final_metrics(number: int) -> dict[str, Any]:
    return {"top1": number + 0.3, "best_top1": number + 0.3, "train_loss": 1 / 3}


def finish(store: Store, number: int, epochs: list[dict[str, Any]] | None = None) -> None:
    store.finish_trial(
        STUDY,
        number,
        status="completed",
        config=trial_config(number),
        measurement=measurement(number),
        epochs=[epoch_metrics(number, e) for e in EPOCHS] if epochs is None else epochs,
        final=final_metrics(number),
    )


def write_trial(store: Store, number: int, worker: int) -> None:
    """One trial as a worker writes it: start, epochs as they finish (epoch 2 rewritten), final record."""
    store.start_trial(STUDY, number, trial_config(number), seed=number, host=f"writer-{worker}")
    store.record_epoch(STUDY, number, epoch_metrics(number, 1))
    store.record_epoch(STUDY, number, epoch_metrics(number, 2, provisional=True))
    store.record_epoch(STUDY, number, epoch_metrics(number, 2))
    store.record_epoch(STUDY, number, epoch_metrics(number, 3))
    for _ in range(2 if number % FINISH_TWICE_EVERY == 0 else 1):
        finish(store, number)


# -- child processes ------------------------------------------------------------------------------


def _spy_on_database_errors(seen: list[str]) -> None:
    """Record every database error the store meets: it retries lock errors and deadlocks silently,
    so a writer that merely *succeeded* could still have hit "database is locked" on the way."""
    original = Store._retryable

    def spy(error: Any) -> bool:
        seen.append((str(getattr(error, "orig", error)).strip().splitlines() or [type(error).__name__])[0])
        return original(error)

    Store._retryable = staticmethod(spy)  # this child process only (spawned: a private copy of the class)


def _writer_process(url: str, worker: int, barrier: Any, results: Any) -> None:
    """Write TRIALS_PER_WRITER trials of the shared study; report, or report the error and re-raise."""
    try:
        seen: list[str] = []
        _spy_on_database_errors(seen)
        with Store.open(url) as store:
            barrier.wait(timeout=CHILD_TIMEOUT_S)  # every writer starts at once: maximal contention
            started = time.perf_counter()
            study_id = store.create_study(STUDY, SPEC, OBJECTIVES)  # exists (the parent made it): same id
            for i in range(TRIALS_PER_WRITER):
                write_trial(store, worker * TRIALS_PER_WRITER + i, worker)
            seconds = time.perf_counter() - started
        results.put({"worker": worker, "ok": True, "study_id": study_id, "db_errors": seen, "seconds": seconds})
    except BaseException:
        results.put({"worker": worker, "ok": False, "error": traceback.format_exc()})
        raise


def _opener_process(url: str, worker: int, barrier: Any, results: Any) -> None:
    """Open a store that may not exist yet and create the study, all at once with the others."""
    try:
        seen: list[str] = []
        _spy_on_database_errors(seen)
        barrier.wait(timeout=CHILD_TIMEOUT_S)
        with Store.open(url) as store:
            study_id = store.create_study(STUDY, SPEC, OBJECTIVES)
            version = store.schema_version()
        results.put({"worker": worker, "ok": True, "study_id": study_id, "version": version, "db_errors": seen})
    except BaseException:
        results.put({"worker": worker, "ok": False, "error": traceback.format_exc()})
        raise


def _killed_writer_process(url: str, results: Any) -> None:
    """Write trial A, then start trial B's huge single transaction and wait to be SIGKILLed in it."""
    try:
        store = Store.open(url)
        if store.engine.dialect.name == "sqlite":
            # A small page cache spills B's uncommitted pages into the WAL file long before commit,
            # so that the kill leaves uncommitted frames on disk for recovery to discard.
            from sqlalchemy import event

            @event.listens_for(store.engine, "connect")
            def _small_cache(dbapi_connection: Any, _record: Any) -> None:
                dbapi_connection.execute("PRAGMA cache_size=-256")

            store.engine.dispose()
        finish(store, TRIAL_A)
        big = [epoch_metrics(TRIAL_B, e) for e in range(1, KILLED_EPOCHS + 1)]
        wal = _wal_path(url)
        results.put({"ready": True, "wal_bytes": wal.stat().st_size if wal and wal.exists() else 0})
        finish(store, TRIAL_B, epochs=big)
        results.put({"ready": False, "error": "trial B's transaction committed before the kill"})
    except BaseException:
        results.put({"ready": False, "error": traceback.format_exc()})
        raise


# -- parent helpers -------------------------------------------------------------------------------


def _wal_path(url: str) -> Path | None:
    parsed = normalize_url(url)
    return Path(f"{parsed.database}-wal") if parsed.get_backend_name() == "sqlite" else None


@contextlib.contextmanager
def _engine(url: str) -> Iterator[Engine]:
    """A plain engine on the store's database: checks that do not go through the store's own queries."""
    engine = create_engine(normalize_url(url))
    try:
        yield engine
    finally:
        engine.dispose()


def _run_children(target: Any, url: str, n: int) -> list[dict[str, Any]]:
    """Start ``n`` children of ``target(url, worker, barrier, results)``; return their reports.

    Every child must report and exit 0: a child that raised, died without a word or outlived the
    deadline fails the test with what it said.
    """
    barrier = SPAWN.Barrier(n)
    results = SPAWN.Queue()
    procs = [SPAWN.Process(target=target, args=(url, w, barrier, results), daemon=True) for w in range(n)]
    reports: list[dict[str, Any]] = []
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while len(reports) < n and time.monotonic() < deadline:
            try:
                reports.append(results.get(timeout=1.0))
            except queue.Empty:
                if not any(p.is_alive() for p in procs) and results.empty():
                    break  # some child died without reporting (killed from outside?)
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    errors = [r["error"] for r in reports if not r["ok"]]
    assert not errors, "a child failed:\n" + "\n".join(errors)
    assert len(reports) == n, f"only {len(reports)} of {n} children reported; exit codes {[p.exitcode for p in procs]}"
    assert [p.exitcode for p in procs] == [0] * n
    return reports


def _sqlite_integrity(url: str) -> str:
    with _engine(url) as engine, engine.connect() as conn:
        return conn.exec_driver_sql("PRAGMA integrity_check").scalar()


def _pg_backend(url: str, app_name: str) -> tuple[int, str | None] | None:
    """(pid, backend_xid) of the server process serving ``app_name``, or None when it is gone."""
    with _engine(url) as engine, engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT pid, backend_xid::text FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = :app"
            ),
            {"app": app_name},
        ).first()
    return None if row is None else (row[0], row[1])


def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting until {what}"
        time.sleep(0.02)


# -- concurrent writers ---------------------------------------------------------------------------


@pytest.mark.slow
def test_eight_processes_writing_one_study_lose_and_duplicate_nothing(store_url):
    with Store.open(store_url) as store:
        study_id = store.create_study(STUDY, SPEC, OBJECTIVES)

    started = time.perf_counter()
    reports = _run_children(_writer_process, store_url, WRITERS)
    elapsed = time.perf_counter() - started
    slowest = max(r["seconds"] for r in reports)
    print(f"{WRITERS} writers x {TRIALS_PER_WRITER} trials: {elapsed:.1f} s (slowest writer {slowest:.1f} s)")

    assert {r["study_id"] for r in reports} == {study_id}
    # The store retries lock errors and deadlocks; none should even happen (BEGIN IMMEDIATE +
    # busy timeout on SQLite; no lock-order inversions on PostgreSQL).
    seen = [e for r in reports for e in r["db_errors"]]
    assert not [e for e in seen if "locked" in e.lower()], seen
    assert seen == []

    n = WRITERS * TRIALS_PER_WRITER
    with _engine(store_url) as engine, engine.connect() as conn:
        trials = Trial.__table__
        epochs = EpochRecord.__table__
        assert conn.execute(select(func.count()).select_from(Study.__table__)).scalar_one() == 1
        assert conn.execute(select(func.count()).select_from(trials)).scalar_one() == n
        assert conn.execute(select(func.count(trials.c.number.distinct()))).scalar_one() == n
        assert conn.execute(select(func.count()).select_from(Measurement.__table__)).scalar_one() == n
        assert conn.execute(select(func.count()).select_from(epochs)).scalar_one() == n * len(EPOCHS)
        duplicate_trials = conn.execute(
            select(trials.c.study_id, trials.c.number)
            .group_by(trials.c.study_id, trials.c.number)
            .having(func.count() > 1)
        ).all()
        assert duplicate_trials == []
        duplicate_epochs = conn.execute(
            select(epochs.c.trial_id, epochs.c.epoch)
            .group_by(epochs.c.trial_id, epochs.c.epoch)
            .having(func.count() > 1)
        ).all()
        assert duplicate_epochs == []

    with Store.open(store_url, create=False) as store:
        counts = store.study_counts(STUDY)
        assert counts.by_status == {**dict.fromkeys(counts.by_status, 0), "completed": n}
        assert counts.epochs == len(EPOCHS) * n and counts.total == n
        frame = store.trials(STUDY)
        assert frame["number"].tolist() == list(range(n))
        assert (frame["status"] == "completed").all()
        assert (frame["params"] == 1_000 + frame["number"]).all()
        assert (frame["top1"] == frame["number"] + 0.3).all()
        assert (frame["config.model.depth"] == 4 + frame["number"] % 8).all()
        assert (frame["host"] == "writer-" + (frame["number"] // TRIALS_PER_WRITER).astype(str)).all()
        curves = store.learning_curves(STUDY)
        assert len(curves) == len(EPOCHS) * n
        assert all(epochs == EPOCHS for epochs in curves.groupby("number")["epoch"].apply(tuple))
        assert (curves["top1"] == curves["number"] + curves["epoch"] / 10).all()  # no provisional -1 left


@pytest.mark.slow
def test_processes_racing_to_open_a_new_store_and_create_a_study_get_the_same_study(store_url):
    """Eight first runs of a search at once: one migration, one study, every process gets its id."""
    reports = _run_children(_opener_process, store_url, WRITERS)
    assert len({r["study_id"] for r in reports}) == 1
    assert {r["version"] for r in reports} == {schema_revisions()[0]}
    assert [e for r in reports for e in r["db_errors"] if "locked" in e.lower()] == []
    with _engine(store_url) as engine, engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Study.__table__)).scalar_one() == 1


def test_create_study_without_exist_ok_refuses_a_study_created_concurrently(store_url):
    """A racing second creator of the same study must get "already exists", not the winner's id.

    Deterministic: another connection has inserted the study and not committed yet; the store's
    call starts, blocks behind it, then the other connection commits.
    """
    with Store.open(store_url) as store, _engine(store_url) as other:
        outcome: dict[str, Any] = {}

        def loser() -> None:
            try:
                outcome["id"] = store.create_study(STUDY, SPEC, OBJECTIVES, exist_ok=False)
            except StoreError as error:
                outcome["error"] = str(error)

        with other.connect() as conn:
            transaction = conn.begin()
            now = conn.execute(select(func.current_timestamp())).scalar_one()
            conn.execute(
                Study.__table__.insert().values(
                    name=STUDY,
                    spec=SPEC,
                    objectives=[],
                    status="running",
                    created_at=now,
                    updated_at=now,
                    archsearch_version="0",
                )
            )
            began = threading.Event()

            def _mark_begin(_conn, _cursor, statement, *_args) -> None:
                if statement.startswith("BEGIN") and threading.current_thread() is thread:
                    began.set()

            thread = threading.Thread(target=loser)
            event.listen(store.engine, "before_cursor_execute", _mark_begin)
            thread.start()
            if conn.dialect.name == "postgresql":
                # Commit only once the store's INSERT is blocked on our uncommitted row.
                _wait_for(lambda: _pg_waiting_on_a_lock(store_url), 30, "create_study blocks on the row")
            else:
                # SQLite: commit once the store's write transaction has started (its BEGIN IMMEDIATE
                # then waits for our lock); whichever comes first, its INSERT meets the committed row.
                assert began.wait(30), "create_study never began its write transaction"
            transaction.commit()
            event.remove(store.engine, "before_cursor_execute", _mark_begin)
            thread.join(timeout=90)
        assert "already exists" in outcome.get("error", ""), outcome


def _pg_waiting_on_a_lock(url: str) -> bool:
    with _engine(url) as engine, engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        )


def test_the_same_epoch_twice_in_one_final_record_keeps_the_last(store_url):
    """A final record that lists an epoch twice (a resumed run that re-emits it) must not be lost:
    within one call as across calls, the later write of an epoch wins."""
    with Store.open(store_url) as store:
        store.create_study(STUDY, SPEC, OBJECTIVES)
        epochs = [epoch_metrics(0, 1), epoch_metrics(0, 2, provisional=True), epoch_metrics(0, 2)]
        finish(store, 0, epochs=epochs)
        curves = store.learning_curves(STUDY)
        assert curves["epoch"].tolist() == [1, 2]
        assert curves["top1"].tolist() == [0.1, 0.2]


# -- a writer killed inside its transaction -------------------------------------------------------


@pytest.mark.slow
def test_a_writer_killed_inside_a_final_record_leaves_nothing_of_it(store_url):
    postgres = store_url.startswith("postgresql")
    child_url = f"{store_url}?application_name={KILLED_APP_NAME}" if postgres else store_url
    with Store.open(store_url) as store:
        store.create_study(STUDY, SPEC, OBJECTIVES)

    results = SPAWN.Queue()
    proc = SPAWN.Process(target=_killed_writer_process, args=(child_url, results), daemon=True)
    proc.start()
    try:
        ready = results.get(timeout=CHILD_TIMEOUT_S)
        assert ready["ready"], ready.get("error")
        # Kill only once B's transaction has certainly written something that is not committed.
        if postgres:
            _wait_for(
                lambda: not proc.is_alive() or (_pg_backend(store_url, KILLED_APP_NAME) or (0, None))[1] is not None,
                60,
                "trial B's transaction has written (a backend_xid)",
            )
        else:
            wal = _wal_path(store_url)
            _wait_for(
                lambda: not proc.is_alive() or wal.stat().st_size > ready["wal_bytes"] + 256 * 1024,
                60,
                "trial B's uncommitted pages spill into the WAL",
            )
        assert proc.is_alive(), f"the writer ended before the kill: {results.get(timeout=5)}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=30)
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode == -signal.SIGKILL
    assert results.empty(), results.get()  # B never reported that it committed

    if postgres:  # the server notices the dead client and rolls its transaction back
        _wait_for(lambda: _pg_backend(store_url, KILLED_APP_NAME) is None, 30, "the dead writer's backend is gone")
    else:  # the uncommitted frames are on disk: recovery has to ignore them
        assert _wal_path(store_url).stat().st_size > ready["wal_bytes"]

    with Store.open(store_url, create=False) as store:
        counts = store.study_counts(STUDY)
        assert (counts.by_status["completed"], counts.epochs) == (1, len(EPOCHS))
        frame = store.trials(STUDY)
        assert frame["number"].tolist() == [TRIAL_A]
        assert frame["params"].tolist() == [measurement(TRIAL_A)["params"]]
        assert store.learning_curves(STUDY)["epoch"].tolist() == list(EPOCHS)
        with _engine(store_url) as engine, engine.connect() as conn:  # nothing of B anywhere, orphans included
            assert conn.execute(select(func.count()).select_from(Trial.__table__)).scalar_one() == 1
            assert conn.execute(select(func.count()).select_from(Measurement.__table__)).scalar_one() == 1
            assert conn.execute(select(func.count()).select_from(EpochRecord.__table__)).scalar_one() == len(EPOCHS)

        # The store still takes writes, B's number included (no lock of the dead writer left on it).
        finish(store, TRIAL_B)
        store.start_trial(STUDY, 3, trial_config(3))
        store.record_epoch(STUDY, 3, epoch_metrics(3, 1))
        counts = store.study_counts(STUDY)
        by_status = counts.by_status
        assert (by_status["completed"], by_status["running"], counts.epochs) == (2, 1, 2 * len(EPOCHS) + 1)
    if not postgres:
        assert _sqlite_integrity(store_url) == "ok"
