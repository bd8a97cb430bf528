"""Store benchmark: how fast trials' numbers get in, and how fast a big study comes back out.

1. Write throughput of per-epoch metrics: ``record_epoch`` (one transaction per row, what a
   running trial does after every epoch) with 1 writer process and with 8 at once on one study,
   against the batched path (``finish_trial`` with many epochs in one transaction) and, for
   reference, the same epoch upsert done as one SQLAlchemy executemany (not a store API: it shows
   what the batched path could reach).
2. Loading a 100,000-trial study for a Pareto query: ``Store.trials`` (the DataFrame with the
   flattened config) against a lean query of just (number, status, top1, flops, throughput),
   median of 3 loads, and where the time of ``Store.trials`` goes (SQL fetch, JSON decode,
   pandas json_normalize).

Both on SQLite (a temporary file) and on PostgreSQL (a temporary database created on the server
and dropped afterwards). Writers are separate processes, each with its own ``Store``, as trial
workers are.

    .venv/bin/python -m benchmarks.store [--postgres ADMIN_URL | --no-postgres] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy
from sqlalchemy import Text, cast, create_engine, insert, select, text
from sqlalchemy.engine import make_url

from benchmarks.hostinfo import cpu_model, load_average
from harness.output import render_table
from harness.store import Store
from harness.store.schema import EPOCH_FIELDS, MEASUREMENT_FIELDS, EpochRecord, Measurement, Trial

DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SPAWN = multiprocessing.get_context("spawn")
OBJECTIVES = {"top1": "max", "flops": "min"}
FAMILIES = ("cait", "coatnet")


@dataclass(frozen=True)
class Sizes:
    """Work per benchmark; ``--quick`` shrinks every one of them for a smoke run."""

    per_row_trials: int  # record_epoch, 1 writer: trials x epochs rows
    per_row_epochs: int
    per_row_trials_each: int  # record_epoch, each of 8 writers
    batched_trials: int  # finish_trial, 1 writer
    batched_trials_each: int  # finish_trial, each of 8 writers
    batched_epochs: int
    load_trials: int
    loads: int = 3


FULL = Sizes(40, 100, 10, 20, 4, 1000, 100_000)
QUICK = Sizes(5, 50, 2, 2, 1, 500, 10_000)


# -- write throughput -----------------------------------------------------------------------------


def epoch_metrics(epoch: int) -> dict[str, Any]:
    return {
        "epoch": epoch,
        "step": 100 * epoch,
        "train_loss": 2.0 / epoch,
        "eval_loss": 2.1 / epoch,
        "top1": 50 + epoch / 10,
        "top5": 80 + epoch / 20,
        "lr": 1e-3,
        "images_per_s": 1234.5,
        "epoch_time": 31.4,
        "wall_time": 31.4 * epoch,
        "data_wait_fraction": 0.01,
    }


def small_config(number: int) -> dict[str, Any]:
    rng = random.Random(number)
    family = FAMILIES[number % 2]
    layout = "".join(rng.choice("CT") for _ in range(4)) if family == "coatnet" else None
    return {
        "model": {
            "family": family,
            "depth": rng.randrange(4, 25),
            "embed_dim": rng.choice((192, 256, 384, 512, 768)),
            "layout": layout,
        },
        "training": {"lr": round(10 ** rng.uniform(-4, -2.5), 6), "epochs": 100},
        "seed": number,
    }


def _epochs_executemany(store: Store, trial_id: int, epochs: list[dict[str, Any]]) -> None:
    """The epoch upsert as ONE executemany of one statement (insertmanyvalues), in one transaction."""

    def write(conn: Any) -> None:
        if conn.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as dialect_insert
        else:
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        stmt = dialect_insert(EpochRecord.__table__)
        updates = {name: stmt.excluded[name] for name in EPOCH_FIELDS if name != "epoch"}
        stmt = stmt.on_conflict_do_update(index_elements=["trial_id", "epoch"], set_=updates)
        conn.execute(stmt, [{"trial_id": trial_id, **{f: m.get(f) for f in EPOCH_FIELDS}} for m in epochs])

    store._write(write)


def _writer(url: str, mode: str, study: str, worker: int, trials: int, epochs: int, barrier: Any, results: Any) -> None:
    """One writer process: set up untimed, wait for the others, write its share, report its clock.

    ``time.monotonic`` is the system-wide CLOCK_MONOTONIC on Linux, so the parent can take the wall
    time of all writers together as (last end - first start).
    """
    try:
        with Store.open(url) as store:
            numbers = [worker * trials + i for i in range(trials)]
            if mode in ("record_epoch", "executemany"):
                for n in numbers:
                    store.start_trial(study, n, small_config(n), seed=n, host=f"writer-{worker}")
            trial_ids = {}
            if mode == "executemany":
                with store.engine.connect() as conn:
                    query = select(Trial.number, Trial.id).where(
                        Trial.study_id == store._study_id(study), Trial.number.in_(numbers)
                    )
                    trial_ids = dict(conn.execute(query).all())
            curve = [epoch_metrics(e) for e in range(1, epochs + 1)]
            barrier.wait(timeout=300)
            start = time.monotonic()
            for n in numbers:
                if mode == "record_epoch":
                    for metrics in curve:
                        store.record_epoch(study, n, metrics)
                elif mode == "finish_trial":
                    store.finish_trial(study, n, status="completed", config=small_config(n), epochs=curve)
                else:
                    _epochs_executemany(store, trial_ids[n], curve)
            end = time.monotonic()
        results.put({"ok": True, "start": start, "end": end, "rows": len(numbers) * epochs})
    except BaseException as error:
        results.put({"ok": False, "error": f"{type(error).__name__}: {error}"})
        raise


def measure_writes(url: str, mode: str, writers: int, trials: int, epochs: int) -> dict[str, Any]:
    """rows, seconds and rows/s of ``writers`` processes writing ``trials`` x ``epochs`` rows each."""
    study = f"writes-{mode}-{writers}-{uuid.uuid4().hex[:6]}"
    with Store.open(url) as store:
        store.create_study(study, {"benchmark": "writes"}, OBJECTIVES)
    barrier, results = SPAWN.Barrier(writers), SPAWN.Queue()
    args = (url, mode, study)
    procs = [
        SPAWN.Process(target=_writer, args=(*args, w, trials, epochs, barrier, results), daemon=True)
        for w in range(writers)
    ]
    for p in procs:
        p.start()
    reports = [results.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    failed = [r["error"] for r in reports if not r["ok"]]
    if failed or any(p.exitcode for p in procs):
        raise RuntimeError(f"a writer failed ({mode}, {writers} writers): {failed}")
    with Store.open(url) as store:
        stored = store.study_counts(study).epochs
    rows = sum(r["rows"] for r in reports)
    if stored != rows:
        raise RuntimeError(f"{mode}: wrote {rows} epoch rows but the store holds {stored}")
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    return {
        "rows": rows,
        "seconds": round(seconds, 3),
        "rows/s": round(rows / seconds),
        "ms/row": round(seconds / rows * 1e3, 3),
    }


def write_benchmarks(backend: str, url: str, sizes: Sizes) -> list[dict[str, Any]]:
    cases = [
        ("record_epoch (1 tx/row)", "record_epoch", 1, sizes.per_row_trials, sizes.per_row_epochs),
        ("record_epoch (1 tx/row)", "record_epoch", 8, sizes.per_row_trials_each, sizes.per_row_epochs),
        ("finish_trial (batched)", "finish_trial", 1, sizes.batched_trials, sizes.batched_epochs),
        ("finish_trial (batched)", "finish_trial", 8, sizes.batched_trials_each, sizes.batched_epochs),
        ("executemany upsert (reference)", "executemany", 1, sizes.batched_trials, sizes.batched_epochs),
    ]
    rows = []
    for label, mode, writers, trials, epochs in cases:
        print(f"  {backend}: {label}, {writers} writer(s) ...", file=sys.stderr, flush=True)
        result = measure_writes(url, mode, writers, trials, epochs)
        rows.append(
            {"backend": backend, "path": label, "writers": writers, "epochs/tx": _per_tx(mode, epochs), **result}
        )
    return rows


def _per_tx(mode: str, epochs: int) -> int:
    return 1 if mode == "record_epoch" else epochs


# -- loading a big study --------------------------------------------------------------------------


def populate(url: str, study: str, n: int) -> float:
    """Bulk-insert ``n`` finished trials with a measurement and final metrics; return the seconds.

    Straight into the store's tables with SQLAlchemy core executemany: setup only, not timed.
    """
    started = time.perf_counter()
    with Store.open(url) as store:
        study_id = store.create_study(study, {"benchmark": "pareto load"}, OBJECTIVES)
        engine = store.engine
        now = datetime.now(timezone.utc)
        rng = random.Random(0)
        statuses = ["completed"] * 17 + ["pruned", "failed", "diverged"]
        trials, measurements = [], []
        for number in range(n):
            config = small_config(number)
            depth, dim = config["model"]["depth"], config["model"]["embed_dim"]
            params = depth * 12 * dim * dim
            top1 = 60 + 20 * rng.random()
            trials.append(
                {
                    "study_id": study_id,
                    "number": number,
                    "status": statuses[number % len(statuses)],
                    "config": config,
                    "final": {
                        "top1": top1,
                        "top5": top1 + 15,
                        "best_top1": top1 + rng.random(),
                        "train_loss": rng.random(),
                        "eval_loss": rng.random(),
                        "epochs": 100,
                    },
                    "seed": number,
                    "host": f"node-{number % 16}",
                    "device": "cuda:0",
                    "started_at": now,
                    "ended_at": now,
                }
            )
            measurements.append(
                {
                    "params": params,
                    "flops": params * 197,
                    "flops_source": "fvcore",
                    "throughput": 1e12 / (params * 197) * (0.8 + 0.4 * rng.random()),
                    "latency_ms": 5 + 10 * rng.random(),
                    "batch_size": 64,
                    "image_size": 224,
                    "dtype": "bf16",
                    "device": "cuda:0",
                }
            )
        with engine.begin() as conn:
            conn.execute(insert(Trial.__table__), trials)
            ids = dict(conn.execute(select(Trial.number, Trial.id).where(Trial.study_id == study_id)).all())
            for number, row in enumerate(measurements):
                row["trial_id"] = ids[number]
            conn.execute(insert(Measurement.__table__), measurements)
    return time.perf_counter() - started


def lean_pareto_frame(store: Store, study: str) -> pd.DataFrame:
    """Just what a Pareto front needs, with top1 extracted from the JSON in SQL (no JSON decode)."""
    trial, meas = Trial.__table__, Measurement.__table__
    study_id = store._study_id(study)
    query = (
        select(
            trial.c.number,
            trial.c.status,
            trial.c.final["top1"].as_float().label("top1"),
            meas.c.flops,
            meas.c.throughput,
        )
        .select_from(trial.outerjoin(meas, meas.c.trial_id == trial.c.id))
        .where(trial.c.study_id == study_id)
        .order_by(trial.c.number)
    )
    with store.engine.connect() as conn:
        result = conn.execute(query)
        # Plain tuples: pandas builds a frame from SQLAlchemy Row objects ~10x slower.
        return pd.DataFrame([tuple(row) for row in result], columns=list(result.keys()))


def trials_breakdown(store: Store, study: str) -> dict[str, float]:
    """``Store.trials`` redone stage by stage (same query, JSON fetched as text) to see what dominates."""
    trial, meas = Trial.__table__, Measurement.__table__
    study_id = store._study_id(study)
    columns = [
        trial.c.number,
        trial.c.status,
        cast(trial.c.config, Text).label("config"),
        cast(trial.c.final, Text).label("final"),
        trial.c.error,
        trial.c.seed,
        trial.c.optuna_number,
        trial.c.host,
        trial.c.started_at,
        trial.c.ended_at,
        trial.c.diverged_at_step,
        *[meas.c[name] for name in MEASUREMENT_FIELDS],
    ]
    query = (
        select(*columns)
        .select_from(trial.outerjoin(meas, meas.c.trial_id == trial.c.id))
        .where(trial.c.study_id == study_id)
        .order_by(trial.c.number)
    )
    stages: dict[str, float] = {}
    t = time.perf_counter()
    with store.engine.connect() as conn:
        result = conn.execute(query)
        keys = list(result.keys())
        rows = [tuple(row) for row in result]
    stages["SQL fetch (JSON as text)"] = time.perf_counter() - t
    t = time.perf_counter()
    frame = pd.DataFrame(rows, columns=keys)
    stages["DataFrame of rows"] = time.perf_counter() - t
    t = time.perf_counter()
    configs = [json.loads(c) for c in frame.pop("config")]
    finals = [json.loads(f) if f else {} for f in frame.pop("final")]
    stages["JSON decode (config, final)"] = time.perf_counter() - t
    t = time.perf_counter()
    flat = pd.json_normalize(configs, sep=".").set_index(frame.index).add_prefix("config.")
    stages["pandas json_normalize (config)"] = time.perf_counter() - t
    t = time.perf_counter()
    pd.concat([frame, flat, pd.DataFrame(finals, index=frame.index)], axis=1)
    stages["finals DataFrame + concat"] = time.perf_counter() - t
    return stages


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[list[float], Any]:
    times, value = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t)
    return times, value


def load_benchmarks(backend: str, url: str, sizes: Sizes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    study = "pareto-load"
    print(f"  {backend}: inserting {sizes.load_trials} trials ...", file=sys.stderr, flush=True)
    setup = populate(url, study, sizes.load_trials)
    rows, stages_rows = [], []
    with Store.open(url) as store:
        store.trials(study)  # warm: the first load pays imports and the server's cold cache
        full_times, frame = _timed(lambda: store.trials(study), sizes.loads)
        lean_times, lean = _timed(lambda: lean_pareto_frame(store, study), sizes.loads)
        assert len(frame) == len(lean) == sizes.load_trials
        assert (frame["top1"].to_numpy() == lean["top1"].to_numpy()).all()
        for label, times, result in (
            ("Store.trials (flattened config)", full_times, frame),
            ("lean: number,status,top1,flops,throughput", lean_times, lean),
        ):
            rows.append(
                {
                    "backend": backend,
                    "query": label,
                    "trials": len(result),
                    "columns": result.shape[1],
                    "median s": round(statistics.median(times), 3),
                    "min s": round(min(times), 3),
                    "max s": round(max(times), 3),
                    "setup insert s": round(setup, 1),
                }
            )
        breakdowns = [trials_breakdown(store, study) for _ in range(sizes.loads)]
    total = sum(statistics.median(b[k] for b in breakdowns) for k in breakdowns[0])
    for stage in breakdowns[0]:
        seconds = statistics.median(b[stage] for b in breakdowns)
        stages_rows.append(
            {
                "backend": backend,
                "stage of Store.trials": stage,
                "median s": round(seconds, 3),
                "share": _pct(seconds, total),
            }
        )
    return rows, stages_rows


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


# -- backends -------------------------------------------------------------------------------------


@contextmanager
def sqlite_store() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="archsearch-bench-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'store.db'}"


@contextmanager
def postgres_store(admin_url: str) -> Iterator[str]:
    """A fresh database on the server, dropped afterwards whatever happens."""
    name = f"archsearch_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def postgres_description(admin_url: str) -> str:
    engine = create_engine(admin_url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar()
            settings = [
                f"{name}={conn.execute(text(f'SHOW {name}')).scalar()}"
                for name in ("synchronous_commit", "fsync", "shared_buffers")
            ]
    finally:
        engine.dispose()
    host = make_url(admin_url).host
    return f"PostgreSQL {version} at {host} ({', '.join(settings)})"


def header(postgres: str | None, sizes: Sizes) -> str:
    import psycopg

    cpu, load = cpu_model(), load_average()
    lines = [
        f"host: {platform.node()} | {cpu} | {os.cpu_count()} CPUs | load average {load} | {platform.platform()}",
        f"python {platform.python_version()} | SQLAlchemy {sqlalchemy.__version__} | pandas {pd.__version__} | "
        f"psycopg {psycopg.__version__}",
        f"SQLite {sqlite3.sqlite_version} (temporary file in {tempfile.gettempdir()}; WAL, synchronous=NORMAL)",
        postgres_description(postgres) if postgres else "PostgreSQL: skipped",
        f"sizes: {sizes}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="admin URL; a temporary database is made there")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    postgres = None if args.no_postgres else args.postgres
    print(header(postgres, sizes), flush=True)

    backends: list[tuple[str, Any]] = [("sqlite", sqlite_store)]
    if postgres:
        backends.append(("postgresql", lambda: postgres_store(postgres)))
    writes, loads, stages = [], [], []
    for backend, make in backends:
        with make() as url:
            writes += write_benchmarks(backend, url, sizes)
        with make() as url:
            load_rows, stage_rows = load_benchmarks(backend, url, sizes)
            loads += load_rows
            stages += stage_rows

    print("\nPer-epoch metric writes (wall time of all writers together)")
    print(render_table(writes))
    print(f"\nLoading a {sizes.load_trials}-trial study (median of {sizes.loads} loads, after one warm-up)")
    print(render_table(loads))
    print("\nWhere Store.trials spends its time (same query and steps, timed one by one)")
    print(render_table(stages))
    for backend in dict.fromkeys(row["backend"] for row in stages):
        top = max((r for r in stages if r["backend"] == backend), key=lambda r: r["median s"])
        print(f"{backend}: {top['stage of Store.trials']} dominates ({top['share']} of the stages)")


if __name__ == "__main__":
    main()
