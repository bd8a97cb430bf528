"""Search benchmark: what ``archsearch search`` costs per trial on top of Ray Tune and Optuna, and the main job.

1. Per-trial overhead. The same number of trials (``--trials``, default 20) at concurrency 1 and 2,
   one Ray instance for every run (its start-up is reported once, outside the per-trial numbers):

   - ``archsearch``: :func:`harness.search.driver.run_search` (its real path: ArchsearchSearch with an
     Optuna RDBStorage in the SQLite store, the trainable with its per-epoch checkpoint, the
     store and progress callbacks) on a spec whose trials do almost nothing: CaiT depth 1,
     embed_dim 16, 1 head, patch 16 on 32x32 synthetic images (32 train / 16 val, batch 32),
     1 epoch, nothing measured; two float parameters (lr, drop_path_rate), TPE, one objective.
     The trial body alone (``trials.runner.run_trial`` of the same config, in this process, one
     torch thread as on a Ray worker with one CPU) is timed just before each search, median of
     ``--body-repeats``, and subtracted.
   - ``tune``: a plain ``tune.Tuner`` over a function trainable that reports one dict, with
     OptunaSearch (TPE, in-memory study) over the same two parameters, ``reuse_actors=True``,
     the same ``max_concurrent_trials``, resources and ``num_samples``.
   - ``tune+rdb``: the same with the OptunaSearch study in an RDBStorage on a SQLite file (as
     archsearch keeps it): splits archsearch's overhead into Optuna's storage and the rest.
   - ``optuna``/``optuna+rdb``: ``study.optimize`` of a trivial objective (``n_jobs`` =
     concurrency), in memory and in an RDBStorage on a SQLite file.

   The trial body has a cold cost too: a fresh Ray worker's first trial imports torch and the
   trial code, and torch's first optimizer imports ``torch._dynamo`` (seconds on these machines;
   any Tune trainable that trains a torch model pays the same). ``first_body_s`` measures it in a
   fresh process that has imported Ray and the trainable's module (as a worker has when its first
   trial starts): that process's first ``run_trial``, minus the warm body. The c workers pay it
   side by side, so it counts once.

   overhead_s = (wall - first_body) / N - body / c: the wall time per trial that the trial
   bodies, run perfectly in parallel at concurrency c, do not explain (the body is 0 for the
   trivial baselines). ``marginal_s`` is the same for the trials after the first c (from their
   end times: the store's for archsearch, a Tune callback's for plain Tune, Optuna's own), what
   each extra trial costs once the workers are warm, and ``fixed_s = wall - first_body - N x
   (body/c + marginal_s)`` what a search costs however many trials it runs (start-up, the
   workers' own imports, the end). The runs are interleaved round by round (``--rounds``, order
   rotated) because these 2-core machines drift by +-25%; each column is the median over rounds,
   and ``x``/``marg_x``/``fixed_x`` are the medians of the per-round ratios archsearch / this
   row (min-max in ``*_range``). ``--json PATH`` writes the rows and those medians for plain Tune
   (``ratio_total``, ``ratio_marginal``, ``ratio_fixed``) and for Tune with Optuna's RDB storage
   (``ratio_total_rdb``, ``ratio_marginal_rdb``, ``ratio_fixed_rdb``), per concurrency.
2. The main job: ``run_search`` on ``search_space/presets/quickstart.yaml`` once (SQLite store in
   a temporary directory): wall time, trials by outcome, time per trial, and how much of the
   wall the trials themselves (store start -> end, divided by the concurrency) account for.

    .venv/bin/python -m benchmarks.search                   # 20 trials x 5 rounds, then the main job
    .venv/bin/python -m benchmarks.search --quick           # smoke run: 4 trials x 1 round, 2-trial main job
    .venv/bin/python -m benchmarks.search --trials 40 --skip-main --json search.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dashboards.files import atomic_write
from harness.output import render_table

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "search_space" / "presets" / "quickstart.yaml"
RUNNERS = ("archsearch", "tune", "tune+rdb", "optuna", "optuna+rdb")
LR_RANGE = (1.0e-3, 4.0e-3)
DROP_PATH_RANGE = (0.0, 0.2)


def trivial_spec(n_trials: int, concurrency: int, name: str = "overhead") -> dict[str, Any]:
    """The smallest trial archsearch can run: its real path with a body of a few milliseconds."""
    return {
        "name": name,
        "family": "cait",
        "base_model": {
            "preset": "cait_tiny32",
            "depth": 1,
            "embed_dim": 16,
            "num_heads": 1,
            "ca_depth": 1,
            "patch_size": 16,
        },
        "data": {"name": "synthetic", "num_classes": 10, "train_size": 32, "val_size": 16, "batch_size": 32},
        "training": {"epochs": 1, "lr": 2.0e-3, "warmup_epochs": 0},
        "measure": {"flops": False, "throughput": False, "latency": False},
        "params": {
            "lr": {"float": list(LR_RANGE), "log": True},
            "drop_path_rate": {"float": list(DROP_PATH_RANGE)},
        },
        "objectives": {"top1": "max"},
        "search": {
            "sampler": "tpe",
            "n_trials": n_trials,
            "concurrency": concurrency,
            "seed": 0,
            "resources": {"cpus": 1, "gpus": 0},
        },
    }


# -- the runs ---------------------------------------------------------------------------------------
def body_seconds(repeats: int) -> float:
    """Median wall time of one trivial trial body, in this process, with one torch thread."""
    import torch

    from search_space.sampling import build_trial_config
    from search_space.validation import load_spec
    from trials.runner import run_trial

    spec = load_spec(trivial_spec(1, 1))
    config = build_trial_config(spec, {"lr": 2.0e-3, "drop_path_rate": 0.1})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a Ray worker with one CPU runs torch with OMP_NUM_THREADS=1
    try:
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            result = run_trial(config, progress=False)
            seconds.append(time.perf_counter() - started)
            if result.status != "completed":
                raise RuntimeError(f"the trivial trial did not complete: {result.error}")
    finally:
        torch.set_num_threads(threads)
    return statistics.median(seconds)


# A fresh process in a Ray worker's state when its first trial starts (Ray and the trainable's
# module imported), then the body's first run: torch, the trial code, torch's first optimizer.
_FIRST_BODY = """
import json, sys, time
import ray.tune, harness.search.worker.trainable
from search_space.sampling import build_trial_config
from search_space.validation import load_spec
started = time.perf_counter()
from trials.runner import run_trial
spec = load_spec(json.loads(sys.argv[1]))
result = run_trial(build_trial_config(spec, {"lr": 2.0e-3, "drop_path_rate": 0.1}), progress=False)
print(json.dumps({"seconds": time.perf_counter() - started, "status": result.status}))
"""


def first_body_seconds(warm_body: float) -> float:
    """What a fresh worker's first trial body costs beyond a warm one (see the module's docstring)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}  # as on a 1-CPU Ray worker
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_BODY, json.dumps(trivial_spec(1, 1))],
        capture_output=True, text=True, check=True, cwd=ROOT, env=env,
    )  # fmt: skip
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    if measured["status"] != "completed":
        raise RuntimeError(f"the trivial trial did not complete in a fresh process: {out.stderr[-2000:]}")
    return max(0.0, measured["seconds"] - warm_body)


def run_archsearch(n_trials: int, concurrency: int, workdir: Path) -> dict[str, Any]:
    from harness.search.driver import run_search
    from harness.store import Store
    from search_space.validation import load_spec

    spec = load_spec(trivial_spec(n_trials, concurrency))
    url = f"sqlite:///{workdir / 'store.db'}"
    started = time.perf_counter()
    summary = run_search(spec, url, study_name="overhead", results_dir=workdir / "ray_results")
    wall = time.perf_counter() - started
    with Store.open(url, create=False) as store:
        trials = store.trials("overhead", flatten_config=False)
    ends = [t.timestamp() for t in trials["ended_at"].dropna()]
    return {"wall": wall, "completed": summary.counts["completed"], "ends": ends}


def _trivial_trainable(config: dict[str, Any]) -> None:
    from ray import tune

    tune.report({"score": config["lr"] * 100 + config["drop_path_rate"]})


def _trial_clock():
    """A Tune callback that notes when trials end (in the driver, as archsearch's store callback does)."""
    from ray.tune import Callback

    class TrialClock(Callback):
        def __init__(self) -> None:
            self.ends: list[float] = []

        def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
            self.ends.append(time.time())

        on_trial_error = on_trial_complete

    return TrialClock()


def run_tune(n_trials: int, concurrency: int, workdir: Path, *, rdb: bool) -> dict[str, Any]:
    import optuna
    from optuna.distributions import FloatDistribution
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    started = time.perf_counter()
    storage = optuna.storages.RDBStorage(f"sqlite:///{workdir / 'optuna.db'}") if rdb else None
    searcher = OptunaSearch(
        space={"lr": FloatDistribution(*LR_RANGE, log=True), "drop_path_rate": FloatDistribution(*DROP_PATH_RANGE)},
        metric="score",
        mode="max",
        sampler=optuna.samplers.TPESampler(seed=0, multivariate=True),
        study_name="overhead",
        storage=storage,
    )
    clock = _trial_clock()
    tuner = tune.Tuner(
        tune.with_resources(_trivial_trainable, {"cpu": 1, "gpu": 0}),
        tune_config=tune.TuneConfig(
            search_alg=searcher, num_samples=n_trials, max_concurrent_trials=concurrency, reuse_actors=True
        ),
        run_config=tune.RunConfig(
            name="overhead", storage_path=str(workdir / "ray_results"), callbacks=[clock], verbose=0
        ),
    )
    results = tuner.fit()
    wall = time.perf_counter() - started
    return {"wall": wall, "completed": len(results) - results.num_errors, "ends": clock.ends}


def _trivial_objective(trial) -> float:
    lr = trial.suggest_float("lr", *LR_RANGE, log=True)
    return lr * 100 + trial.suggest_float("drop_path_rate", *DROP_PATH_RANGE)


def run_optuna(n_trials: int, concurrency: int, workdir: Path, *, rdb: bool) -> dict[str, Any]:
    import optuna

    started = time.perf_counter()
    storage = optuna.storages.RDBStorage(f"sqlite:///{workdir / 'optuna.db'}") if rdb else None
    study = optuna.create_study(
        study_name="overhead",
        storage=storage,
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=0, multivariate=True),
    )
    study.optimize(_trivial_objective, n_trials=n_trials, n_jobs=concurrency)
    wall = time.perf_counter() - started
    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return {"wall": wall, "completed": len(trials), "ends": [t.datetime_complete.timestamp() for t in trials]}


def run_one(runner: str, n_trials: int, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"archsearch-bench-{runner.replace('+', '-')}-") as directory:
        workdir = Path(directory)
        if runner == "archsearch":
            return run_archsearch(n_trials, concurrency, workdir)
        if runner.startswith("tune"):
            return run_tune(n_trials, concurrency, workdir, rdb=runner.endswith("+rdb"))
        return run_optuna(n_trials, concurrency, workdir, rdb=runner.endswith("+rdb"))


# -- the tables -------------------------------------------------------------------------------------
def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ratio_cells(prefix: str, ratios: list[float]) -> dict[str, Any]:
    return {prefix: round(_median(ratios), 2), f"{prefix}_range": f"{min(ratios):.3g}-{max(ratios):.3g}"}


def _marginal(run: dict[str, Any], n: int, concurrency: int, body: float, first_body: float) -> dict[str, float]:
    """wall = first_body + fixed + N x (body/c + marginal): the marginal cost from the trials after
    the first c (which pay the workers' first imports), the fixed cost is what is left."""
    ends = sorted(run["ends"])
    if len(ends) <= concurrency:
        return {"marginal": float("nan"), "fixed": float("nan")}
    per_trial = (ends[-1] - ends[concurrency - 1]) / (len(ends) - concurrency)
    return {"marginal": per_trial - body / concurrency, "fixed": run["wall"] - first_body - n * per_trial}


def overhead_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    n = args.trials
    # Warm-up (not reported): imports in this process, the first Ray workers, SQLite's first files.
    first_body_seconds(body_seconds(2))
    for runner in RUNNERS:
        run_one(runner, 2, 1)
    rows = []
    for concurrency in args.concurrency:
        runs: dict[str, list[dict[str, Any]]] = {r: [] for r in RUNNERS}
        for round_index in range(args.rounds):
            shift = round_index % len(RUNNERS)
            for runner in RUNNERS[shift:] + RUNNERS[:shift]:
                body = body_seconds(args.body_repeats) if runner == "archsearch" else 0.0
                first_body = first_body_seconds(body) if runner == "archsearch" else 0.0
                run = run_one(runner, n, concurrency)
                run["body"], run["first_body"] = body, first_body
                run["overhead"] = (run["wall"] - first_body) / n - body / concurrency
                run.update(_marginal(run, n, concurrency, body, first_body))
                runs[runner].append(run)
                print(
                    f"  c={concurrency} round {round_index + 1}/{args.rounds} {runner:<11} wall {run['wall']:7.2f} s"
                    f"  body {body * 1e3:6.1f} ms (first +{first_body:.2f} s)  overhead/trial {run['overhead']:.4f} s"
                    f"  fixed {run['fixed']:.2f} s  marginal/trial {run['marginal']:.4f} s",
                    file=sys.stderr,
                    flush=True,
                )
        ours = runs["archsearch"]
        for runner in RUNNERS:
            own = runs[runner]
            rows.append(
                {
                    "c": concurrency,
                    "runner": runner,
                    "done": min(r["completed"] for r in own),
                    "wall_s": round(_median([r["wall"] for r in own]), 3),
                    "per_trial_s": round(_median([r["wall"] / n for r in own]), 4),
                    "body_s": round(_median([r["body"] for r in own]), 4),
                    "first_body_s": round(_median([r["first_body"] for r in own]), 3),
                    "overhead_s": round(_median([r["overhead"] for r in own]), 4),
                    **_ratio_cells("x", [a["overhead"] / r["overhead"] for a, r in zip(ours, own, strict=True)]),
                    "fixed_s": round(_median([r["fixed"] for r in own]), 3),
                    **_ratio_cells("fixed_x", [a["fixed"] / r["fixed"] for a, r in zip(ours, own, strict=True)]),
                    "marginal_s": round(_median([r["marginal"] for r in own]), 4),
                    **_ratio_cells("marg_x", [a["marginal"] / r["marginal"] for a, r in zip(ours, own, strict=True)]),
                }
            )
    return rows


def overhead_ratios(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per concurrency: archsearch's medians of per-round ratios to plain Tune and to Tune+rdb."""
    ratios: dict[str, dict[str, float]] = {}
    for row in rows:
        suffix = {"tune": "", "tune+rdb": "_rdb"}.get(row["runner"])
        if suffix is None:
            continue
        own = ratios.setdefault(f"c{row['c']}", {})
        own[f"ratio_total{suffix}"] = row["x"]
        own[f"ratio_marginal{suffix}"] = row["marg_x"]
        own[f"ratio_fixed{suffix}"] = row["fixed_x"]
    return ratios


def main_job_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from harness.search.driver import run_search
    from harness.store import Store
    from search_space.validation import load_spec
    from trials.config.trial_config import read_yaml

    raw = read_yaml(QUICKSTART)
    if args.quick:
        raw["search"] = {**raw["search"], "n_trials": 2}
    spec = load_spec(raw)
    with tempfile.TemporaryDirectory(prefix="archsearch-bench-main-") as directory:
        workdir = Path(directory)
        url = f"sqlite:///{workdir / 'store.db'}"
        started = time.perf_counter()
        summary = run_search(spec, url, study_name=spec.name, results_dir=workdir / "ray_results")
        wall = time.perf_counter() - started
        with Store.open(url, create=False) as store:
            trials = store.trials(spec.name, flatten_config=False)
    ran = trials[trials["status"] != "infeasible"]
    durations = [(e - s).total_seconds() for s, e in zip(ran["started_at"], ran["ended_at"], strict=True)]
    concurrency = spec.search.concurrency
    counts = summary.counts
    return [
        {
            "spec": QUICKSTART.relative_to(ROOT).as_posix(),
            "n_trials": spec.search.n_trials,
            "concurrency": concurrency,
            "wall_s": round(wall, 2),
            "completed": counts["completed"],
            "pruned": counts["pruned"],
            "failed": counts["failed"] + counts["diverged"],
            "infeasible": counts["infeasible"],
            "wall_per_trial_s": round(wall / spec.search.n_trials, 2),
            "wall_per_completed_s": round(wall / counts["completed"], 2) if counts["completed"] else None,
            "trial_median_s": round(_median(durations), 2),
            "trials_share": round(sum(durations) / concurrency / wall, 3),
        }
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=None, help="trials per run (default 20; 4 with --quick)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; 1 with --quick)")
    parser.add_argument("--body-repeats", type=int, default=None, help="trial bodies timed per round (default 10)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--skip-main", action="store_true", help="skip the quickstart main job")
    parser.add_argument("--skip-overhead", action="store_true", help="skip the per-trial overhead table")
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 trials, 1 round, 2-trial main job")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the tables and ratios here")
    args = parser.parse_args()
    args.trials = args.trials or (4 if args.quick else 20)
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.body_repeats = args.body_repeats or (3 if args.quick else 10)

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import optuna
    import ray
    import torch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    started = time.perf_counter()
    # address="local": a new instance even where another Ray cluster on this machine left its address in
    # /tmp/ray/ray_current_cluster (ray.init() would try to join it, and refuses num_cpus then).
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - started
    report: dict[str, Any] = {"trials": args.trials, "rounds": args.rounds, "ray_init_s": round(ray_start, 2)}
    try:
        print(
            f"host {platform.node()} ({os.cpu_count()} cpus, {platform.processor() or platform.machine()}), "
            f"python {platform.python_version()}, ray {ray.__version__}, optuna {optuna.__version__}, "
            f"torch {torch.__version__}; ray.init(num_cpus=2) took {ray_start:.2f} s, once (in no number below)",
            flush=True,
        )
        if not args.skip_overhead:
            with contextlib.redirect_stdout(sys.stderr):  # Tune's experiment banners
                rows = overhead_rows(args)
            print(
                f"\nPer-trial overhead: {args.trials} trials per run, {args.rounds} interleaved rounds (order "
                f"rotated); body = median of {args.body_repeats} in-process run_trial calls, 1 torch thread"
            )
            print(render_table(rows))
            print(
                "overhead_s = (wall - first_body)/N - body/c; marginal_s: the same for each trial after the first c "
                "(from the trials' end times); fixed_s = wall - first_body - N x (body/c + marginal_s); x, fixed_x, "
                "marg_x = archsearch's / this row's, median of the per-round ratios (range: min-max); other "
                "columns: medians over rounds",
                flush=True,
            )
            report |= {"overhead": rows, **overhead_ratios(rows)}
        if not args.skip_main:
            with contextlib.redirect_stdout(sys.stderr):
                rows = main_job_rows(args)
            print("\nMain job: run_search on the quickstart preset, once")
            print(render_table(rows))
            report["main_job"] = rows
            print(
                "trial_median_s: one trial, store start -> end (median); trials_share: sum of those / concurrency / "
                "wall (1.0: no time outside the trials)",
                flush=True,
            )
    finally:
        ray.shutdown()
    if args.json_out:
        atomic_write(args.json_out, json.dumps(report, indent=2, default=str))
        print(f"\nwrote {args.json_out}")


if __name__ == "__main__":
    main()
