"""Dashboards benchmark: Pareto front, hypervolume, its progress, ``archsearch pareto`` and ``archsearch report``
at 1k, 10k and 100k trials, side by side with Optuna doing the same work in the same run.

For each size and backend (SQLite file; PostgreSQL when reachable) one study is filled with
``benchmarks.store``'s ``populate()`` (two objectives, top1:max and flops:min; 85% completed,
the rest pruned, failed or diverged) plus 5 epochs per trial. Then:

* in process, median of 3: the lean load of (number, status, objectives), the front
  (``dashboards.pareto.front_mask``), the hypervolume of the front, and the hypervolume progress
  over every finished trial; next to Optuna on an equivalent in-memory study (same values and
  states): ``study.best_trials`` and the data of ``plot_hypervolume_history`` (its private
  ``_get_hypervolume_history_info``, the part that is not drawing), plus the whole matplotlib plot.
  The results are checked against each other: the same front, the same final hypervolume.
* as whole processes (``archsearch pareto`` and ``archsearch report`` from the console script,
  imports included), wall time and peak resident memory (``os.wait4``).

    .venv/bin/python -m benchmarks.fronts [--sizes 1000,10000,100000] [--no-postgres] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import insert, select

from benchmarks import store as STORE_BENCH
from benchmarks.hostinfo import cpu_model, load_average
from dashboards.pareto import front_mask, hypervolume, hypervolume_progress
from harness.output import render_table
from harness.search import adapter
from harness.store import Store
from harness.store.schema import EpochRecord, Trial

OBJECTIVES = {"top1": "max", "flops": "min"}
EPOCHS_PER_TRIAL = 5
TARGETS = {
    "front+hv 100k in process": ("< 0.5 s", 0.5),
    "archsearch pareto 100k": ("< 5 s", 5.0),
    "archsearch report 10k": ("< 20 s", 20.0),
    "archsearch report 100k": ("< 90 s", 90.0),
    "report peak memory": ("< 2 GB", 2048.0),
    "hv progress 10k vs Optuna": (">= 10x faster", 10.0),
}


def add_epochs(url: str, study: str, epochs: int) -> None:
    """``epochs`` learning-curve rows per trial, in bulk (setup, not timed)."""
    with Store.open(url) as store:
        study_id = store._study_id(study)
        with store.engine.begin() as conn:
            ids = conn.execute(select(Trial.id).where(Trial.study_id == study_id)).scalars().all()
            rows = [
                {"trial_id": trial_id, "epoch": e, "train_loss": 2.0 / e, "top1": 60.0 + e, "eval_loss": 2.1 / e}
                for trial_id in ids
                for e in range(1, epochs + 1)
            ]
            for start in range(0, len(rows), 50_000):
                conn.execute(insert(EpochRecord.__table__), rows[start : start + 50_000])


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, value = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), value


def optuna_study(outcomes: pd.DataFrame):
    """An in-memory Optuna study with the same trials: values, states, finish order."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["maximize", "minimize"])
    dist = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
    states = {
        "completed": optuna.trial.TrialState.COMPLETE,
        "pruned": optuna.trial.TrialState.PRUNED,
        "failed": optuna.trial.TrialState.FAIL,
        "diverged": optuna.trial.TrialState.FAIL,
    }
    trials = []
    for status, top1, flops in outcomes[["status", "top1", "flops"]].itertuples(index=False):
        state = states[status]
        values = [float(top1), float(flops)] if state == optuna.trial.TrialState.COMPLETE else None
        trials.append(optuna.trial.create_trial(state=state, values=values, params={"x": 0.5}, distributions=dist))
    study.add_trials(trials)
    return study


def in_process(url: str, study: str, repeats: int, optuna_repeats: int) -> dict[str, Any]:
    """Front, hypervolume, progress (ours) and best_trials, hypervolume history (Optuna), with checks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna

    with Store.open(url, create=False) as store:
        load_s, outcomes = _timed(lambda: store.outcomes(study, list(OBJECTIVES)), repeats)
    front_s, mask = _timed(lambda: front_mask(outcomes, OBJECTIVES), repeats)
    front = outcomes[mask]
    points = front[list(OBJECTIVES)].to_numpy(float)
    done = outcomes[outcomes["status"] == "completed"]
    reference = [float(done["top1"].min()) - 1.0, float(done["flops"].max()) * 1.01]  # every point counts
    hv_s, hv = _timed(lambda: hypervolume(points, list(OBJECTIVES.values()), reference), repeats)
    progress_s, progress = _timed(lambda: hypervolume_progress(outcomes, OBJECTIVES, reference), repeats)

    study_o = optuna_study(outcomes)
    best_s, best = _timed(lambda: study_o.best_trials, optuna_repeats)

    def optuna_history():
        return adapter.hypervolume_history_info(study_o, np.array(reference))

    history_s, info = _timed(optuna_history, optuna_repeats)

    def optuna_plot():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ExperimentalWarning
            ax = optuna.visualization.matplotlib.plot_hypervolume_history(study_o, reference_point=reference)
        plt.close(ax.figure)

    plot_s, _ = _timed(optuna_plot, optuna_repeats)
    ours_numbers = set(front["number"].tolist())
    optuna_numbers = {t.number for t in best}
    optuna_final = float(info.values[-1]) if len(info.values) else 0.0
    return {
        "trials": len(outcomes),
        "front": len(front),
        "load_s": load_s,
        "front_s": front_s,
        "hv_s": hv_s,
        "front_hv_s": front_s + hv_s,
        "progress_s": progress_s,
        "optuna_best_trials_s": best_s,
        "optuna_hv_history_s": history_s,
        "optuna_plot_hv_history_s": plot_s,
        "same_front": ours_numbers == optuna_numbers,
        "same_final_hv": bool(np.isclose(float(progress["hypervolume"].iloc[-1]), optuna_final, rtol=1e-9)),
        "hv": hv,
    }


# Runs one command and reports its wall time and peak RSS. A child forked from this (large) benchmark
# process would inherit its memory high-water mark through fork+exec, so the command is started from
# this small wrapper instead, and measured there with os.wait4.
_MEASURE = """
import json, os, sys, time
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
elapsed = time.perf_counter() - started
with open(sys.argv[1], "w") as out:
    json.dump({"s": elapsed, "peak_mib": usage.ru_maxrss / 1024, "code": os.waitstatus_to_exitcode(status)}, out)
"""


def shaped_outcomes(n: int, shape: str, seed: int = 0) -> pd.DataFrame:
    """Trials of a search whose front keeps moving, unlike populate()'s uniform noise.

    ``improving``: accuracy rises with the trial number (a sampler that learns), so later trials
    keep replacing front members. ``tradeoff``: accuracy follows log-FLOPs closely, so a large
    share of the trials sits on or near the front (the hard case for a per-trial front update).
    """
    rng = np.random.default_rng(seed)
    flops = 10 ** rng.uniform(6, 9, n)
    if shape == "improving":
        top1 = 60 + 30 * np.sqrt(np.arange(n) / n) + rng.normal(0, 3, n) + 2 * np.log10(flops)
    elif shape == "tradeoff":
        top1 = 10 * np.log10(flops) + rng.normal(0, 0.05, n)
    else:
        raise ValueError(shape)
    status = np.where(rng.random(n) < 0.85, "completed", "pruned")
    return pd.DataFrame({"number": np.arange(n), "status": status, "top1": top1, "flops": flops.round()})


def progress_comparison(n: int, shape: str, repeats: int) -> dict[str, Any]:

    outcomes = shaped_outcomes(n, shape)
    done = outcomes[outcomes["status"] == "completed"]
    reference = [float(done["top1"].min()) - 1.0, float(done["flops"].max()) * 1.01]
    ours_s, progress = _timed(lambda: hypervolume_progress(outcomes, OBJECTIVES, reference), repeats)
    study_o = optuna_study(outcomes)
    optuna_s, info = _timed(lambda: adapter.hypervolume_history_info(study_o, np.array(reference)), 1)
    front = int(front_mask(outcomes, OBJECTIVES).sum())
    final = float(info.values[-1]) if len(info.values) else 0.0
    return {
        "shape": shape,
        "trials": n,
        "final front": front,
        "hv progress s": _fmt(ours_s, 4),
        "Optuna hv history s": _fmt(optuna_s),
        "x faster": f"{optuna_s / ours_s:.0f}x",
        "same final hv": "yes" if np.isclose(float(progress["hypervolume"].iloc[-1]), final, rtol=1e-9) else "NO",
    }


def whole_process(args: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MiB, exit code) of one command (see ``_MEASURE``)."""
    result = cwd / "measure.json"
    process = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(result), *args], cwd=cwd, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, check=False,
    )  # fmt: skip
    measured = json.loads(result.read_text())
    if measured["code"] != 0:
        print(process.stderr.decode(errors="replace")[-2000:], file=sys.stderr)
    return measured["s"], measured["peak_mib"], measured["code"]


def commands(url: str, study: str, workdir: Path) -> dict[str, tuple[float, float, int]]:
    exe = str(Path(sys.executable).with_name("archsearch"))
    objectives = ",".join(f"{k}:{v}" for k, v in OBJECTIVES.items())
    pareto = [exe, "pareto", study, "--objectives", objectives, "--store", url]
    report = [exe, "report", study, "-o", str(workdir / f"{study}.html"), "--store", url]
    report += ["--color-by", "config.model.family"]
    return {"pareto": whole_process(pareto, workdir), "report": whole_process(report, workdir)}


def run_size(backend: str, url: str, n: int, workdir: Path, repeats: int) -> dict[str, Any]:
    study = f"bench-{n}"
    print(f"  {backend}: populating {n:,} trials ...", file=sys.stderr, flush=True)
    setup = STORE_BENCH.populate(url, study, n)
    add_epochs(url, study, EPOCHS_PER_TRIAL)
    print(f"  {backend}: {n:,} trials in {setup:.1f}s; measuring ...", file=sys.stderr, flush=True)
    row = {"backend": backend, **in_process(url, study, repeats, 1 if n >= 100_000 else repeats)}
    for name, (seconds, peak_mib, code) in commands(url, study, workdir).items():
        row[f"{name}_s"] = seconds
        row[f"{name}_peak_mib"] = peak_mib
        row[f"{name}_exit"] = code
    report = workdir / f"{study}.html"
    row["report_kib"] = report.stat().st_size / 1024 if report.exists() else float("nan")
    return row


def _fmt(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if value == value else "-"


def tables(rows: list[dict[str, Any]]) -> str:
    timing = []
    for r in rows:
        timing.append(
            {
                "backend": r["backend"],
                "trials": r["trials"],
                "front": r["front"],
                "load s": _fmt(r["load_s"]),
                "front s": _fmt(r["front_s"], 4),
                "hv s": _fmt(r["hv_s"], 4),
                "hv progress s": _fmt(r["progress_s"]),
                "Optuna best_trials s": _fmt(r["optuna_best_trials_s"]),
                "Optuna hv history s": _fmt(r["optuna_hv_history_s"]),
                "Optuna plot s": _fmt(r["optuna_plot_hv_history_s"]),
                "progress x faster": f"{r['optuna_hv_history_s'] / r['progress_s']:.0f}x",
                "front x faster": f"{r['optuna_best_trials_s'] / max(r['front_s'], 1e-9):.0f}x",
                "agree": "yes" if r["same_front"] and r["same_final_hv"] else "NO",
            }
        )
    processes = [
        {
            "backend": r["backend"],
            "trials": r["trials"],
            "pareto s": _fmt(r["pareto_s"], 2),
            "pareto peak MiB": _fmt(r["pareto_peak_mib"], 0),
            "report s": _fmt(r["report_s"], 2),
            "report peak MiB": _fmt(r["report_peak_mib"], 0),
            "report KiB": _fmt(r["report_kib"], 0),
            "exit codes": f"{r['pareto_exit']}/{r['report_exit']}",
        }
        for r in rows
    ]
    return (
        "In process (median of 3; Optuna at 100k: 1 run). 'agree': same front as study.best_trials and the same\n"
        "final hypervolume as Optuna's history.\n"
        + render_table(timing)
        + "\n\nWhole processes (console script, imports included; peak RSS by os.wait4)\n"
        + render_table(processes)
    )


def verdicts(rows: list[dict[str, Any]]) -> str:
    def pick(n: int, backend: str = "sqlite") -> dict[str, Any] | None:
        return next((r for r in rows if r["trials"] == n and r["backend"] == backend), None)

    lines = []

    def verdict(key: str, measured: float | None, better: str) -> None:
        wanted, limit = TARGETS[key]
        if measured is None:
            lines.append({"target": key, "wanted": wanted, "measured": "not run", "met": "-"})
            return
        met = measured >= limit if better == "higher" else measured < limit
        lines.append({"target": key, "wanted": wanted, "measured": f"{measured:.3g}", "met": "yes" if met else "NO"})

    big, ten = pick(100_000), pick(10_000)
    verdict("front+hv 100k in process", big and big["front_hv_s"], "lower")
    verdict("archsearch pareto 100k", big and big["pareto_s"], "lower")
    verdict("archsearch report 10k", ten and ten["report_s"], "lower")
    verdict("archsearch report 100k", big and big["report_s"], "lower")
    peak = max((r["report_peak_mib"] for r in rows), default=None)
    verdict("report peak memory", peak, "lower")
    verdict("hv progress 10k vs Optuna", ten and ten["optuna_hv_history_s"] / ten["progress_s"], "higher")
    return "Targets (SQLite rows)\n" + render_table(lines)


def header() -> str:
    import matplotlib
    import moocore
    import optuna
    import sqlalchemy

    cpu, load = cpu_model(), load_average()
    return (
        f"host: {cpu} | {os.cpu_count()} CPUs | load average {load}\n"
        f"python {platform.python_version()} | pandas {pd.__version__} | SQLAlchemy {sqlalchemy.__version__} | "
        f"moocore {moocore.__version__} | optuna {optuna.__version__} | matplotlib {matplotlib.__version__}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated trial counts")
    parser.add_argument("--postgres", default=STORE_BENCH.DEFAULT_POSTGRES, help="admin URL (a temporary database)")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", dest="json_out", default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(header(), flush=True)

    backends: list[tuple[str, Callable[[], Any]]] = [("sqlite", STORE_BENCH.sqlite_store)]
    if not args.no_postgres:
        try:
            STORE_BENCH.postgres_description(args.postgres)
            backends.append(("postgresql", lambda: STORE_BENCH.postgres_store(args.postgres)))
        except Exception as error:  # no server here: SQLite only, and say so
            print(f"PostgreSQL skipped: {str(error).splitlines()[0]}", flush=True)
    rows = []
    workdir = Path(tempfile.mkdtemp(prefix="archsearch-dash-bench-"))
    try:
        for backend, make in backends:
            for n in sizes:
                with make() as url:
                    rows.append(run_size(backend, url, n, workdir, args.repeats))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("  hypervolume progress on moving fronts ...", file=sys.stderr, flush=True)
    shapes = [progress_comparison(n, shape, args.repeats) for shape in ("improving", "tradeoff") for n in sizes]
    print()
    print(tables(rows))
    print("\nHypervolume progress where the front keeps moving (in process, no store; Optuna: 1 run)")
    print(render_table(shapes))
    print()
    print(verdicts(rows))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2, default=str))


if __name__ == "__main__":
    main()
