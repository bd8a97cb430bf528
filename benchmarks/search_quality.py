"""How close does a search get to the true front? Search methods replayed against a tabular benchmark.

    python -m benchmarks.search_quality --table benchmarks/tables/coatnet-mnist5k.csv.gz \\
        --seeds 20 --workers 4 --json results/search_quality.json --png results/

Every configuration of the table was trained once (``benchmarks/tables/README.md``), so its true
front is known. Each method runs the engine a search with that spec runs
(:func:`harness.search.engine.build_engine`: the searcher with Optuna's sampler, its initial design,
duplicates and budget rules; with ``-es`` the search's early-stopping scheduler; the store writer and
the stoppers), driven by :func:`harness.search.simulate.simulate` with each epoch looked up in the
table, in simulated time: ``--workers`` W workers run asynchronously and an epoch takes its recorded
``epoch_s``. Nothing is trained, and nothing of the engine is wired here.

Per method and seed the replay records the hypervolume of the completed trials' final values,
normalised by the true front's (one reference point, the table's worst value of each objective),
against the epochs spent. Reported per method over seeds (median, 25th and 75th percentile):
epochs to 95% and 99% of the true front's hypervolume (``null`` where a seed never got there: the
count is given), the normalised hypervolume at the budget, and the share of the true front's
members found. ``oracle_epochs`` is the cost of training only the true front's members.

Methods: ``random``, ``tpe``, ``nsga2``, ``default`` (what a spec without ``search.sampler`` gets),
each also with ``-es`` (MO-ASHA, the default early stopping of a multi-objective search) and
``-es-single`` (Ray's ASHA on top-1 alone, ``early_stopping.mode: single``), and
``syne-*`` (Syne Tune's own methods on the same table,
:mod:`benchmarks.search_quality_syne`, an optional extra).
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from benchmarks import search_quality_syne  # Syne Tune itself loads only for its methods
from benchmarks.front_quality import Replay, TrueFront, quartiles, summarise
from benchmarks.table import COST_OBJECTIVES, Table, TableError, load_table
from harness.search.engine import build_engine
from harness.search.propose import initial_design
from harness.search.propose.searcher import ArchsearchSearch
from harness.search.result_keys import NUMBER_KEY, STATUS_KEY, split_tune_config
from harness.search.session import SearchSession
from harness.search.simulate import SimulatedClock, simulate
from harness.store import Store
from search_space.sampling import Feasibility, SpaceFunction
from search_space.spec import SearchSpec
from trials.status import TrialStatus

OUR_SAMPLERS = ("random", "tpe", "nsga2", "default")
SYNE_METHODS = ("syne-random", "syne-moasha", "syne-moreg")
DEFAULT_METHODS = (
    *OUR_SAMPLERS, "tpe-spread", *(f"{s}-es" for s in OUR_SAMPLERS), "tpe-spread-es", "random-es-single", *SYNE_METHODS
)  # fmt: skip


# -- the searcher against a table -------------------------------------------------------------------
class TableSpace(SpaceFunction):
    """The spec's define-by-run function, priced from the table instead of the cost model."""

    def __init__(self, spec: SearchSpec, table: Table):
        super().__init__(spec)
        self.table = table

    def check(self, params: dict[str, Any]) -> tuple[Feasibility, dict[str, float]]:
        index = self.table.index_of(params)
        if index is None:  # a combination of the domains the table does not hold
            return Feasibility(None, [1.0], "not in the table"), {"buildable": 1.0}
        cost = {name: float(self.table.cost[name][index]) for name in COST_OBJECTIVES}
        return Feasibility(cost, []), {}


def parse_method(method: str) -> tuple[str, str | None, int | None]:
    """``SAMPLER[-spread][-es[-single]]`` -> (sampler, early stopping: None | "pareto" | "single",
    initial spread: None (the spec's default) or K)."""
    sampler, *flags = method.split("-")
    unknown = [f for f in flags if f not in ("es", "single", "spread", "nospread")]
    if sampler not in OUR_SAMPLERS or unknown or ("single" in flags and "es" not in flags):
        raise TableError(f"--methods: unknown method {method!r}; use SAMPLER[-spread|-nospread][-es[-single]] "
                         f"with SAMPLER one of {', '.join(OUR_SAMPLERS)}, or syne-random, syne-moasha, syne-moreg")
    stopping = ("single" if "single" in flags else "pareto") if "es" in flags else None
    spread = SPREAD if "spread" in flags else 0 if "nospread" in flags else None
    return sampler, stopping, spread


SPREAD = 8  # the initial spread a "-spread" method gets


def resolved(method: str, table: Table, objectives: dict[str, str], workers: int) -> tuple:
    """What a method runs on a table: the sampler and spread a spec gets (``default`` resolved), early stopping."""
    sampler, stopping, spread = parse_method(method)
    spec = table_spec(table, "resolved", sampler, 0, workers, objectives, spread)
    return spec.search.sampler, stopping, initial_design.planned_spread(spec)


def table_spec(
    table: Table,
    name: str,
    sampler: str,
    seed: int,
    workers: int,
    objectives: dict[str, str],
    spread: int | None = None,
    stopping: str | None = None,
) -> SearchSpec:
    """A spec over the table's space: each parameter a choice of its distinct values; ``stopping``:
    ``search.early_stopping`` with that mode (the defaults a spec gets otherwise), or none."""
    settings: dict[str, Any] = {"n_trials": len(table), "concurrency": workers, "seed": seed}
    if stopping is not None:
        settings["early_stopping"] = {"mode": stopping}
    if spread is not None:  # None: what a spec that does not say gets
        settings["initial_spread"] = spread
    if sampler != "default":  # default: whatever SearchSettings gives a spec that names no sampler
        settings["sampler"] = sampler
    return SearchSpec.model_validate(
        {
            "name": name,
            "family": "coatnet",  # unused: a table's configs are looked up, never built
            "params": {param: {"choice": values} for param, values in table.domains().items()},
            "objectives": objectives,
            "training": {"epochs": table.epochs},
            "search": settings,
        }
    )


def table_trial_config(spec: SearchSpec, params: dict[str, Any]) -> dict[str, Any]:
    """A table's configuration is its parameters: looked up, never built (some would not build)."""
    return {"params": {name: params[name] for name in sorted(params)}}


class TableSearch(ArchsearchSearch):
    """The project's searcher, pricing each proposal from the table instead of the cost model."""

    def __init__(self, spec: SearchSpec, store_url: str, study: str, storage, sampler, session, *, table: Table):
        super().__init__(spec, store_url, study, storage, sampler, session)
        self.space = TableSpace(spec, table)

    def trial_config(self, params: dict[str, Any]) -> dict[str, Any]:
        return table_trial_config(self.spec, params)


def replay(
    table: Table,
    truth: TrueFront,
    method: str,
    seed: int,
    workers: int,
    budget: int,
    store_url: str,
) -> Replay:
    """Run ``method`` (a sampler, ``-es``: MO-ASHA, ``-es-single``: Ray's ASHA on top-1) to ``budget``
    epochs: the engine a search with that spec builds (:func:`harness.search.engine.build_engine`: the
    searcher with its initial design and duplicates, the scheduler, the store writer, the stoppers),
    driven by :func:`harness.search.simulate.simulate` with each epoch looked up in the table."""
    sampler, stopping, spread = parse_method(method)
    objectives = truth.objectives
    spec = table_spec(table, f"{method}-{seed}", sampler, seed, workers, objectives, spread, stopping)
    with Store.open(store_url) as store:
        store.create_study(spec.name, spec.model_dump(mode="json"), dict(objectives))
    clock = SimulatedClock()
    session = SearchSession(spec.name, clock=clock)
    engine = build_engine(
        spec,
        store_url,
        spec.name,
        session,
        searcher_factory=functools.partial(TableSearch, table=table),
        signals=False,
        progress=False,
        quiet=True,
        build=table_trial_config,
    )

    def evaluate(config: dict[str, Any], epoch: int) -> tuple[dict[str, Any], float, bool]:
        number, _, params = split_tune_config(config)
        index = table.index_of(params)
        result: dict[str, Any] = {name: float(table.cost[name][index]) for name in COST_OBJECTIVES}
        result.update({"top1": float(table.top1[index, epoch - 1]), "table_index": index, NUMBER_KEY: number})
        last = epoch == table.epochs
        if last:  # as a trainable marks its final result
            result[STATUS_KEY] = TrialStatus.COMPLETED
        return result, float(table.epoch_s[index, epoch - 1]), last

    run = Replay()
    found: list[int] = []

    def on_end(trial, result: dict[str, Any], stopped: bool, spent: int) -> None:
        index = int(result["table_index"])
        if stopped:
            run.pruned.append(index)
            return
        found.append(index)
        run.completed.append(index)
        volume = truth.normalised(found)
        if not run.volume or volume > run.volume[-1]:
            run.epochs.append(spent)
            run.volume.append(volume)

    simulated = simulate(engine, evaluate, workers=workers, budget_epochs=budget, clock=clock, on_end=on_end)
    run.spent, run.simulated_s = simulated.epochs, simulated.seconds
    return run


def run_all(
    table: Table,
    objectives: dict[str, str],
    methods: Sequence[str],
    seeds: int,
    workers: int,
    budget: int | None,
    progress: bool = True,
    jobs: int = 1,
) -> tuple[dict[str, Any], dict[str, list[Replay]]]:
    truth = TrueFront(table, objectives)
    budget = budget or len(table) * table.epochs
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per study created: thousands here
    runs: dict[str, list[Replay]] = {}
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) if jobs > 1 else None
    with tempfile.TemporaryDirectory(prefix="search-quality-") as directory:
        url = f"sqlite:///{Path(directory) / 'replay.db'}"

        def seeds_of(method: str) -> list[Replay]:
            if pool is None:
                return [replay(table, truth, method, seed, workers, budget, url) for seed in range(seeds)]
            urls = [f"sqlite:///{Path(directory) / f'replay-{method}-{seed}.db'}" for seed in range(seeds)]
            return list(pool.map(replay, *zip(*[(table, truth, method, s, workers, budget, u)
                                                 for s, u in enumerate(urls)], strict=True)))  # fmt: skip

        for method in methods:
            started = time.perf_counter()
            if method.startswith("syne-"):
                runs[method] = search_quality_syne.replay_seeds(table, truth, method, seeds, workers, budget)
            else:
                key = resolved(method, table, objectives, workers)
                same = next(
                    (m for m in runs if not m.startswith("syne-") and resolved(m, table, objectives, workers) == key),
                    None,
                )
                if same is not None:  # e.g. default = tpe: the same searcher, the same seeds, the same runs
                    runs[method] = runs[same]
                else:
                    runs[method] = seeds_of(method)
            if progress:
                median = quartiles([r.epochs_to(0.95) for r in runs[method]])["median"]
                print(f"  {method:<18} {seeds} seeds in {time.perf_counter() - started:6.1f} s; epochs to 95%: "
                      f"{median}", file=sys.stderr, flush=True)  # fmt: skip
    if pool is not None:
        pool.shutdown()
    result = {
        "table": table.path,
        "configurations": len(table),
        "epochs": table.epochs,
        "objectives": objectives,
        "workers": workers,
        "seeds": seeds,
        "budget_epochs": budget,
        "true_front": {"size": len(truth.members), "hv": truth.volume, "reference": truth.reference.tolist()},
        "oracle_epochs": len(truth.members) * table.epochs,
        "methods": {method: summarise(method_runs, truth, budget) for method, method_runs in runs.items()},
    }
    return result, runs


def render_table(result: dict[str, Any]) -> str:
    """The README's table: per method, epochs to 95% and 99% (median [IQR]), ratios to random and MOASHA."""

    def cell(stats: dict[str, Any]) -> str:
        if stats["median"] is None:
            return f"not reached ({stats['reached']}/{stats['seeds']})"
        iqr = f"{stats['q25']:.0f}-{stats['q75']:.0f}" if stats["q75"] is not None else f"{stats['q25']:.0f}-beyond"
        short = stats["reached"] < stats["seeds"]
        return f"{stats['median']:.0f} [{iqr}]" + (f" ({stats['reached']}/{stats['seeds']})" if short else "")

    methods = result["methods"]
    random_95 = methods.get("random", {}).get("epochs_to_95", {}).get("median")
    lines = [
        "| method | epochs to 95% HV | epochs to 99% HV | HV at budget | front found | front pruned "
        "| cheapest member found | vs random (95%) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, stats in methods.items():
        median = stats["epochs_to_95"]["median"]
        ratio = f"{median / random_95:.2f}x" if median and random_95 else "-"
        lines.append(
            f"| {name} | {cell(stats['epochs_to_95'])} | {cell(stats['epochs_to_99'])} | "
            f"{stats['hv_at_budget']['median']:.3f} | {stats['front_found']['median']:.2f} | "
            f"{stats['front_pruned']['median']:.2f} | {stats['cheapest_found']:.2f} | {ratio} |"
        )
    oracle = result["oracle_epochs"]
    lines.append(f"| oracle (train the true front only) | {oracle} | {oracle} | 1.000 | 1.00 | 0.00 | 1.00 | - |")
    return "\n".join(lines)


def plot(runs: dict[str, list[Replay]], budget: int, directory: Path) -> Path:
    """Normalised hypervolume against epochs spent: median and IQR over seeds, per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, budget, 200)
    figure, axes = plt.subplots(figsize=(8, 5))
    for method, method_runs in runs.items():
        curves = np.array([[r.volume_at(int(x)) for x in grid] for r in method_runs])
        q25, median, q75 = np.percentile(curves, [25, 50, 75], axis=0)
        (line,) = axes.plot(grid, median, label=method)
        axes.fill_between(grid, q25, q75, color=line.get_color(), alpha=0.15)
    axes.axhline(0.95, color="grey", linestyle=":", linewidth=1)
    axes.set_xlabel("epochs spent")
    axes.set_ylabel("hypervolume / true front's")
    axes.set_ylim(0, 1.02)
    axes.legend(fontsize=8, ncol=2)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "search_quality.png"
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def parse_objectives(text: str) -> dict[str, str]:
    objectives = {}
    for part in text.split(","):
        name, _, direction = part.strip().partition(":")
        if direction not in ("max", "min") or name not in ("top1", *COST_OBJECTIVES):
            names = ", ".join(("top1", *COST_OBJECTIVES))
            raise TableError(f"--objectives: {part!r} is not NAME:max|min with NAME one of {names}")
        objectives[name] = direction
    if not 2 <= len(objectives) <= 3 or "top1" not in objectives:
        raise TableError("--objectives: top1 and one or two cost objectives (hypervolume needs 2 or 3)")
    return objectives


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, type=Path)
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--objectives", default="top1:max,flops:min")
    parser.add_argument("--budget", type=int, default=None, help="epochs (default: the whole table's)")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--jobs", type=int, default=1, help="processes replaying seeds side by side")
    args = parser.parse_args(argv)
    try:
        if args.seeds < 1 or args.workers < 1 or (args.budget is not None and args.budget < 1):
            raise TableError("--seeds, --workers and --budget must be >= 1")
        table = load_table(args.table)
        objectives = parse_objectives(args.objectives)
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        for method in methods:
            if method.startswith("syne-"):
                if method not in SYNE_METHODS:
                    raise TableError(f"--methods: unknown {method!r}; Syne Tune's are {', '.join(SYNE_METHODS)}")
            else:
                parse_method(method)
    except TableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{table.path}: {len(table)} configurations x {table.epochs} epochs; {args.seeds} seeds, "
          f"{args.workers} workers", file=sys.stderr)  # fmt: skip
    try:
        result, runs = run_all(table, objectives, methods, args.seeds, args.workers, args.budget, jobs=args.jobs)
    except TableError as error:  # a table Syne Tune's simulator cannot replay (a combination missing)
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.png is not None:
        result["figure"] = str(plot(runs, result["budget_epochs"], args.png))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.json.with_name(f".{args.json.name}.tmp")
    temporary.write_text(json.dumps(result, indent=2))
    temporary.replace(args.json)
    print(f"true front: {result['true_front']['size']} configurations; oracle {result['oracle_epochs']} epochs; "
          f"budget {result['budget_epochs']} epochs")  # fmt: skip
    print(render_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
