"""How close does a search get to the true front? Search methods replayed against a tabular benchmark.

    python -m benchmarks.search_quality --table benchmarks/tables/coatnet-mnist5k.csv.gz --seeds 20 --workers 4 \\
        --jobs 2 --json benchmarks/results/search_quality.json

(:data:`COMMAND`: what writes the committed results and the table in docs/benchmarks.md.) Every
configuration of the table was trained once (``benchmarks/tables/README.md``), so its true front is
known. Each method runs the engine a search with that spec runs (:func:`harness.search.engine.build_engine`:
the searcher with Optuna's sampler, its initial design, duplicates and budget rules; the early-stopping
scheduler where the method names one; the store writer and the stoppers), driven by
:func:`harness.search.simulate.simulate` with each epoch looked up in the table, in simulated time:
``--workers`` W workers run asynchronously and an epoch takes its recorded ``epoch_s``. Nothing is
trained, and nothing of the engine is wired here.

Methods (:func:`parse_method`) say exactly what runs: ``SAMPLER[+spread][+moasha|+asha-top1]`` with
SAMPLER ``random``, ``tpe``, ``gp`` (Optuna's GPSampler), ``botorch`` (optuna-integration's BoTorchSampler,
qLogNEHVI; the ``botorch`` extra) or ``nsga2``; no initial spread unless ``+spread``
(then the default's, :func:`harness.search.propose.initial_design.default_spread`: 8 on any table of 8
configurations or more),
no early stopping unless ``+moasha`` (MO-ASHA, ``early_stopping.mode: pareto``) or ``+asha-top1``
(ASHA's cutoff on top-1 alone, ``mode: single``); ``syne-*``: Syne Tune's own methods on the same table
(:mod:`benchmarks.search_quality_syne`, an optional extra). The result names the method a spec that
names neither sampler nor spread runs on this table (``default_method``).

The measures (:mod:`benchmarks.front_quality`), per method over seeds (median and quartiles): epochs
to 95% and 99% of the true front's hypervolume, the area under the hypervolume-vs-epochs curve and the
hypervolume at the budget, each under two reference points (the true front's nadir pushed out by 10%
of its range, the primary; and the table's worst values); the share of the true front found and
pruned; and per reference and level the oracle: the cheapest set of true-front members that reaches it.

``--domains``: ``choice`` (the default, and the committed results) declares every parameter a choice of
the table's values; ``ordinal`` declares each numeric parameter of three values or more as the ``int`` or
``float`` domain a user would write (geometric values ``log: true``), a proposal between two of the
table's values evaluated as the nearest row (:mod:`benchmarks.table_domains`). Syne Tune's methods keep
their own space: they are replayed under ``choice`` only.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import shlex
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
from benchmarks.front_quality import (
    LEVELS,
    PRIMARY,
    REFERENCES,
    Replay,
    TrueFront,
    level_key,
    paired_difference,
    quartiles,
    summarise,
)
from benchmarks.hostinfo import provenance
from benchmarks.table import COST_OBJECTIVES, Table, TableError, load_table
from benchmarks.table_domains import MODES as DOMAIN_MODES
from benchmarks.table_domains import NearestRow, spec_params
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

OUR_SAMPLERS = ("random", "tpe", "gp", "botorch", "nsga2")
SPREAD_FLAG = "spread"  # the default initial spread (initial_design.default_spread); without it: none
# A replay's n_trials, per configuration of the table: each configuration once, and once more where early
# stopping pruned it and it is retried when nothing new is left; the budget in epochs ends a replay first.
TRIALS_PER_CONFIGURATION = 2
# early_stopping.mode each names; "-ungated": without the rank gate (rank_gate: false, plain (MO-)ASHA)
STOPPING_FLAGS = {"moasha": "pareto", "asha-top1": "single", "moasha-ungated": "pareto-ungated",
                  "asha-top1-ungated": "single-ungated"}  # fmt: skip
SYNE_METHODS = search_quality_syne.METHODS
# Baselines that do no searching (issue 60): every configuration once, cheapest first (ascending in the
# first cost objective), or in an order that visits the cost quantiles first (the cheapest, the dearest,
# the median, the quartiles, ...: a user's "one of each size"); ties in a seeded order. A method that
# searches must beat these, not only random search.
BASELINES = ("cheapest-first", "cost-quantile")
DEFAULT_METHODS = (
    *BASELINES, "random", "random+spread", "tpe", "tpe+spread", "nsga2", "nsga2+spread",
    "random+moasha", "random+spread+moasha", "tpe+moasha", "tpe+spread+moasha", "tpe+spread+moasha-ungated",
    "random+asha-top1",
    *SYNE_METHODS,
)  # fmt: skip
# The command that writes the committed results and the table in docs/benchmarks.md (a test holds the
# two to it: the doc quotes it, and its rows are DEFAULT_METHODS).
COMMAND = (
    "python -m benchmarks.search_quality --table benchmarks/tables/coatnet-mnist5k.csv.gz --seeds 20 --workers 4 "
    "--jobs 2 --json benchmarks/results/search_quality.json"
)


# -- the searcher against a table -------------------------------------------------------------------
class TableSpace(SpaceFunction):
    """The spec's define-by-run function, priced from the table instead of the cost model (a proposal of a
    numeric domain at the table's nearest row: :class:`benchmarks.table_domains.NearestRow`)."""

    def __init__(self, spec: SearchSpec, table: Table):
        super().__init__(spec)
        self.table = table
        self.rows = NearestRow(table, spec.params)

    def check(self, params: dict[str, Any]) -> tuple[Feasibility, dict[str, float]]:
        index = self.rows.index(params)
        if index is None:  # a combination of the domains the table does not hold
            return Feasibility(None, [1.0], "not in the table"), {"buildable": 1.0}
        cost = {name: float(self.table.cost[name][index]) for name in COST_OBJECTIVES}
        return Feasibility(cost, []), {}


def parse_method(method: str) -> tuple[str, str | None, int]:
    """``SAMPLER[+spread][+moasha|+asha-top1][-ungated]`` -> (sampler, early stopping: None | "pareto" | "single"
    (| "...-ungated": without the rank gate),
    initial spread: 0, or :data:`SPREAD` trials with ``+spread``). The name says all that runs: no
    spread without ``+spread``, no early stopping without ``+moasha`` (MO-ASHA, the default early
    stopping of a multi-objective search) or ``+asha-top1`` (ASHA's cutoff on top-1 alone)."""
    sampler, *flags = method.split("+")
    canonical = [f for f in (SPREAD_FLAG, *STOPPING_FLAGS) if f in flags]
    stops = [f for f in flags if f in STOPPING_FLAGS]
    if sampler not in OUR_SAMPLERS or flags != canonical or len(stops) > 1:
        raise TableError(f"--methods: unknown method {method!r}; use SAMPLER[+spread][+moasha|+asha-top1][-ungated] "
                         f"with SAMPLER one of {', '.join(OUR_SAMPLERS)} (e.g. tpe+spread+moasha), or "
                         f"{', '.join(SYNE_METHODS)}")  # fmt: skip
    stopping = STOPPING_FLAGS[stops[0]] if stops else None
    return sampler, stopping, SPREAD if SPREAD_FLAG in flags else 0


SPREAD = initial_design.DEFAULT_SPREAD  # the initial spread a "+spread" method gets: the default's


def method_name(sampler: str, stopping: str | None, spread: int, n_trials: int | None = None) -> str:
    """The method that runs ``sampler`` with ``spread`` first trials spread and ``stopping``: the inverse of
    :func:`parse_method` (``+spread``: :data:`SPREAD`, or the default spread of ``n_trials``; another
    spread has no name)."""
    default = initial_design.default_spread(n_trials) if n_trials is not None else SPREAD
    if spread not in (0, SPREAD, default):
        raise TableError(f"a spread of {spread} has no method name (only 0 and {SPREAD})")
    flags = [SPREAD_FLAG] if spread else []
    flags += [flag for flag, mode in STOPPING_FLAGS.items() if mode == stopping]
    return "+".join([sampler, *flags])


def default_method(table: Table, objectives: dict[str, str], workers: int) -> str:
    """The method that is what a spec naming neither ``search.sampler`` nor ``search.initial_spread`` runs on
    this table: ``tpe+spread`` where an objective is priced before training (flops or params), ``tpe`` where not."""
    spec = table_spec(table, "default", "default", 0, workers, objectives)
    return method_name(spec.search.sampler, None, initial_design.planned_spread(spec), spec.search.n_trials)


def resolved(method: str, table: Table, objectives: dict[str, str], workers: int) -> tuple:
    """What a method runs on a table: the sampler and spread its spec gets, early stopping. A ``+spread``
    method that would get no spread (no objective priced before training) is refused."""
    sampler, stopping, spread = parse_method(method)
    spread = table_spread(table, spread)
    spec = table_spec(table, "resolved", sampler, 0, workers, objectives, spread)
    planned = initial_design.planned_spread(spec)
    if planned != spread:
        raise TableError(f"--methods: {method} would run with an initial spread of {planned}, not {spread} "
                         "(the spread needs flops or params among the objectives)")  # fmt: skip
    return spec.search.sampler, stopping, planned


def baseline_order(table: Table, objectives: dict[str, str], method: str, seed: int) -> list[dict[str, Any]]:
    """The order a :data:`BASELINES` method trains the table's configurations in: ascending in the first cost
    objective (``cheapest-first``), or first at the cost quantiles 0, 1, 1/2, 1/4, 3/4, 1/8, ... of that
    order and then the rest cheapest first (``cost-quantile``); equal costs in a seeded order."""
    if method not in BASELINES:
        raise TableError(f"--methods: {method!r} is not a baseline ({', '.join(BASELINES)})")
    name = next(n for n in objectives if n != "top1")
    cost = np.asarray(table.cost[name], dtype=float) * (1.0 if objectives[name] == "min" else -1.0)
    ties = np.random.default_rng(seed).permutation(len(table))
    order = [int(i) for i in np.lexsort((ties, cost))]
    if method == "cost-quantile":
        order = [order[k] for k in quantile_positions(len(order))]
    return [dict(table.params[i]) for i in order]


def quantile_positions(n: int) -> list[int]:
    """0..n-1 visited at the fractions 0, 1, 1/2, 1/4, 3/4, 1/8, 3/8, 5/8, 7/8, ... of the range (each
    position once), then every position not yet visited, in order."""
    seen: dict[int, None] = {}
    fractions = [0.0, 1.0]
    denominator = 2
    while denominator < 2 * n:
        fractions += [k / denominator for k in range(1, denominator, 2)]
        denominator *= 2
    for fraction in fractions:
        seen.setdefault(round(fraction * (n - 1)), None)
    seen.update(dict.fromkeys(range(n)))
    return list(seen)


def table_spread(table: Table, spread: int) -> int:
    """What ``+spread`` spreads on this table (:func:`parse_method`'s spread, 0 or :data:`SPREAD`): the default
    spread of a replay's ``n_trials`` (:data:`SPREAD` on every table of 8 configurations or more)."""
    return initial_design.default_spread(TRIALS_PER_CONFIGURATION * len(table)) if spread else 0


def table_spec(
    table: Table,
    name: str,
    sampler: str,
    seed: int,
    workers: int,
    objectives: dict[str, str],
    spread: int | None = None,
    stopping: str | None = None,
    domains: str = "choice",
) -> SearchSpec:
    """A spec over the table's space: each parameter a choice of its distinct values, or with ``domains``
    ``ordinal`` the domain a user would write (:func:`benchmarks.table_domains.spec_params`); ``stopping``:
    ``search.early_stopping`` with that mode (the defaults a spec gets otherwise), or none; ``n_trials``
    :data:`TRIALS_PER_CONFIGURATION` per configuration (the budget in epochs ends a replay)."""
    n_trials = TRIALS_PER_CONFIGURATION * len(table)
    settings: dict[str, Any] = {"n_trials": n_trials, "concurrency": workers, "seed": seed}
    if stopping is not None:
        mode = stopping.removesuffix("-ungated")
        settings["early_stopping"] = {"mode": mode, **({"rank_gate": False} if mode != stopping else {})}
    if spread is not None:  # None: what a spec that does not say gets
        settings["initial_spread"] = spread
    if sampler != "default":  # default: whatever SearchSettings gives a spec that names no sampler
        settings["sampler"] = sampler
    return SearchSpec.model_validate(
        {
            "name": name,
            "family": "coatnet",  # unused: a table's configs are looked up, never built
            "params": spec_params(table, domains),
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

    def resume_point(self, original: int, epochs: int) -> dict[str, Any] | None:
        """A search's trials write a checkpoint every epoch by default (``search.checkpoint_every: 1``), so a
        retry resumes where its pruned trial stopped: the table's curve continues from ``epochs`` + 1."""
        return {"checkpoint": None, "epoch": epochs} if epochs >= 1 else None


def replay(
    table: Table,
    truth: TrueFront,
    method: str,
    seed: int,
    workers: int,
    budget: int,
    store_url: str,
    warm: Sequence[dict[str, Any]] = (),
    domains: str = "choice",
) -> Replay:
    """Run ``method`` (:func:`parse_method`: a sampler, its spread, its early stopping) to ``budget``
    epochs: the engine a search with that spec builds (:func:`harness.search.engine.build_engine`: the
    searcher with its initial design and duplicates, the scheduler, the store writer, the stoppers),
    driven by :func:`harness.search.simulate.simulate` with each epoch looked up in the table.

    ``warm``: parameters enqueued as the first trials, as ``search.warm_start`` enqueues an earlier study's
    front (which replaces the spread: a warm method names none; :mod:`benchmarks.fidelity_tables`).

    ``domains``: the spec's parameters (:func:`table_spec`). Under ``ordinal`` a proposal is evaluated as
    the table's nearest row, its cost and every epoch that row's; two proposals that land on one row are
    two configurations to the searcher (a user with a continuous domain trains both), each trained and
    charged its epochs; only an identical proposal is a duplicate, reused as always."""
    if method in BASELINES:  # no searching: every configuration enqueued in the baseline's order
        warm = baseline_order(table, truth.objectives, method, seed)
        sampler, stopping, spread = "random", None, 0
    else:
        sampler, stopping, spread = parse_method(method)
    if warm and spread:
        raise TableError(f"{method}: a warm start replaces the initial spread (name the method without +spread)")
    objectives = truth.objectives
    spread = table_spread(table, spread)
    spec = table_spec(table, f"{method}-{seed}", sampler, seed, workers, objectives, spread, stopping, domains)
    rows = NearestRow(table, spec.params)
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
    for params in warm:
        engine.searcher.study.enqueue_trial(dict(params), user_attrs={"warm_start": "replay"})

    def evaluate(config: dict[str, Any], epoch: int) -> tuple[dict[str, Any], float, bool]:
        number, _, params = split_tune_config(config)
        index = rows.index(params)
        result: dict[str, Any] = {name: float(table.cost[name][index]) for name in COST_OBJECTIVES}
        result.update({"top1": float(table.top1[index, epoch - 1]), "table_index": index, NUMBER_KEY: number})
        last = epoch == table.epochs
        if last:  # as a trainable marks its final result
            result[STATUS_KEY] = TrialStatus.COMPLETED
        return result, float(table.epoch_s[index, epoch - 1]), last

    run = Replay()

    def on_end(trial, result: dict[str, Any], stopped: bool, spent: int) -> None:
        index = int(result["table_index"])
        if stopped:
            run.pruned.append(index)
        else:
            run.complete(index, spent, clock.now)

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
    domains: str = "choice",
) -> tuple[dict[str, Any], dict[str, list[Replay]]]:
    """Every method over ``seeds`` seeds (``jobs`` processes side by side), each replay under ``domains``
    (:func:`replay`); the result the JSON holds, and the runs."""
    if domains != "choice" and any(m.startswith("syne-") for m in methods):
        raise TableError(f"--domains {domains}: Syne Tune's methods replay the table's choices only")
    space = spec_params(table, domains)  # a mode that is not one is refused here, before a replay runs
    truth = TrueFront(table, objectives)
    budget = budget or len(table) * table.epochs
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per study created: thousands here
    runs: dict[str, list[Replay]] = {}
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) if jobs > 1 else None
    with tempfile.TemporaryDirectory(prefix="search-quality-") as directory:
        url = f"sqlite:///{Path(directory) / 'replay.db'}"

        def seeds_of(method: str) -> list[Replay]:
            if pool is None:
                return [replay(table, truth, method, seed, workers, budget, url, domains=domains)
                        for seed in range(seeds)]  # fmt: skip
            urls = [f"sqlite:///{Path(directory) / f'replay-{method}-{seed}.db'}" for seed in range(seeds)]
            return list(pool.map(replay, *zip(*[(table, truth, method, s, workers, budget, u, (), domains)
                                                 for s, u in enumerate(urls)], strict=True)))  # fmt: skip

        for method in methods:
            started = time.perf_counter()
            if method.startswith("syne-"):
                runs[method] = search_quality_syne.replay_seeds(table, truth, method, seeds, workers, budget)
            else:
                runs[method] = seeds_of(method)
            if progress:
                median = quartiles([truth.curve(r).epochs_to(0.95) for r in runs[method]])["median"]
                print(f"  {method:<22} {seeds} seeds in {time.perf_counter() - started:6.1f} s; epochs to 95% "
                      f"({PRIMARY} reference): {median}", file=sys.stderr, flush=True)  # fmt: skip
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
        "domains": domains,  # --domains: the spec's parameters below, what every method but Syne Tune's searched
        "search_space": space,
        "default_method": default_method(table, objectives, workers),
        "primary_reference": PRIMARY,
        "auc": "the area under the normalised hypervolume vs epochs step curve over [0, budget_epochs], "
        "divided by budget_epochs: the mean normalised hypervolume over the budget (1.0: the whole true front "
        "from epoch 0)",
        "true_front": {
            "size": len(truth.members),
            "members": [int(m) for m in truth.members],
            "epochs": len(truth.members) * table.epochs,  # training the whole true front
        },
        "references": {
            name: {
                "point": truth.references[name].tolist(),
                "hv": truth.volumes[name],
                "oracle": {level_key(level): truth.oracle(level, name) for level in LEVELS},
                "shortfall_points": {level_key(level): truth.shortfall(level, name) for level in LEVELS},  # in top-1
                "indispensable": {level_key(level): truth.indispensable(level, name) for level in LEVELS},
            }
            for name in REFERENCES
        },
        "methods": {method: summarise(method_runs, truth, budget) for method, method_runs in runs.items()},
        "baselines": list(BASELINES),
        "provenance": provenance(),
    }
    result["paired_with_base"] = paired_with_base(result)
    return result, runs


def paired_with_base(result: dict[str, Any], reference: str = PRIMARY) -> dict[str, dict[str, Any]]:
    """Each early-stopping method of ``result`` against the same method without early stopping, where both ran
    (issue 60 item 3: early stopping never worse than the same method without it), seed by seed at each level
    under ``reference`` (:func:`benchmarks.front_quality.paired_difference`). Read from the per-seed values a
    result holds, so a committed JSON is compared without replaying it."""
    methods = result["methods"]
    paired: dict[str, dict[str, Any]] = {}
    for method in methods:
        if method in BASELINES or method in SYNE_METHODS:
            continue
        sampler, stopping, spread = parse_method(method)
        base = method_name(sampler, None, spread)
        if stopping is None or base not in methods:
            continue
        paired[method] = {"base": base, "reference": reference} | {
            f"epochs_to_{level_key(level)}": paired_difference(
                methods[base][reference][f"epochs_to_{level_key(level)}"]["per_seed"],
                methods[method][reference][f"epochs_to_{level_key(level)}"]["per_seed"],
                result["budget_epochs"],
            )
            for level in LEVELS
        }
    return paired


def paired_table(results: dict[str, dict[str, Any]]) -> str:
    """A Markdown table of :func:`paired_with_base` over several results (a table's name -> its result): per
    early-stopping method, at 95% and 99%, the median per-seed difference in epochs and the seeds it got there
    earlier / at the same epoch / later, with the sign test's p."""
    lines = ["| table | method | against | 95%: median difference, earlier / same / later (p) | "
             "99%: median difference, earlier / same / later (p) |", "|---|---|---|---|---|"]  # fmt: skip
    for name, result in results.items():
        for method, entry in paired_with_base(result).items():
            cells = []
            for level in LEVELS:
                pair = entry[f"epochs_to_{level_key(level)}"]
                cells.append(f"{pair['median_difference']:+g}, {pair['earlier']} / {pair['same']} / {pair['later']} "
                             f"(p {pair['sign_test_p']:.2g})")  # fmt: skip
            lines.append(f"| {name} | {method} | {entry['base']} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def paired_lines(result: dict[str, Any]) -> list[str]:
    """One line per early-stopping method: its per-seed difference from the same method without early stopping."""
    lines = []
    for method, entry in paired_with_base(result).items():
        cells = []
        for level in LEVELS:
            pair = entry[f"epochs_to_{level_key(level)}"]
            cells.append(f"{level_key(level)}%: median {pair['median_difference']:+g} epochs, earlier in "
                         f"{pair['earlier']}, same in {pair['same']}, later in {pair['later']} of "
                         f"{len(pair['differences'])} seeds (sign test p {pair['sign_test_p']:.2g})")  # fmt: skip
        lines.append(f"{method} against {entry['base']}, seed by seed: " + "; ".join(cells))
    return lines


def render_table(result: dict[str, Any]) -> str:
    """The table in docs/benchmarks.md: per method, epochs to 95% and 99% of the true front's hypervolume and
    the area under the curve (median [IQR] over seeds) under the primary reference and then the table's worst
    values, the share of the front found and pruned, of seeds that kept the cheapest member; then the oracle
    per level (the cheapest set of true-front members that reaches it) and the cost of the whole front."""

    def cell(stats: dict[str, Any]) -> str:
        if stats["median"] is None:
            return f"not reached ({stats['reached']}/{stats['seeds']})"
        iqr = f"{stats['q25']:.0f}-{stats['q75']:.0f}" if stats["q75"] is not None else f"{stats['q25']:.0f}-beyond"
        short = stats["reached"] < stats["seeds"]
        return f"{stats['median']:.0f} [{iqr}]" + (f" ({stats['reached']}/{stats['seeds']})" if short else "")

    def area(stats: dict[str, Any]) -> str:
        return f"{stats['median']:.3f} [{stats['q25']:.3f}-{stats['q75']:.3f}]"

    def hours(stats: dict[str, Any] | None) -> str:
        if stats is None:  # a replay without a simulated clock
            return "-"
        if stats["median"] is None:
            return f"not reached ({stats['reached']}/{stats['seeds']})"
        return f"{stats['median'] / 3600:.2f}"

    primary = result["primary_reference"]
    order = [primary, *(r for r in REFERENCES if r != primary)]
    header = ["method"]
    for reference in order:
        label = "nadir+10%" if reference == "nadir" else "worst values"
        header += [f"{level_key(level)}% HV, {label}" for level in LEVELS] + [f"AUC, {label}"]
    header += ["simulated h to 95%, nadir+10%", "front found", "front pruned", "cheapest member found",
               "regret at budget, top-1 points (mean / max)"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, stats in result["methods"].items():
        row = [name]
        for reference in order:
            row += [cell(stats[reference][f"epochs_to_{level_key(level)}"]) for level in LEVELS]
            row.append(area(stats[reference]["auc"]))
        row.append(hours(stats[primary].get("seconds_to_95")))
        row += [f"{stats['front_found']['median']:.2f}", f"{stats['front_pruned']['median']:.2f}",
                f"{stats['cheapest_found']:.2f}",
                f"{stats['regret_mean']['median']:.2f} / {stats['regret_max']['median']:.2f}"]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    row = ["oracle: the cheapest true-front members that reach it"]
    for reference in order:
        oracle = result["references"][reference]["oracle"]
        for level in LEVELS:
            best = oracle[level_key(level)]
            row.append(f"{best['epochs']} ({len(best['members'])} members)")
        row.append("-")
    lines.append("| " + " | ".join([*row, "-", "-", "-", "-", "-"]) + " |")
    front = result["true_front"]
    row = [f"the whole true front ({front['size']} configurations)"]
    row += ([str(front["epochs"])] * len(LEVELS) + ["-"]) * len(order) + ["-", "1.00", "0.00", "1.00", "0.00 / 0.00"]
    lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def compact_table(result: dict[str, Any]) -> str:
    """The short table docs/benchmarks.md shows per held-out table: per method, epochs to 95% and 99% under the
    primary reference (median [its 95% bootstrap interval], ``(k/n)`` where only k seeds got there), the share of
    the front found and pruned, the mean regret; then the oracle (a test holds the docs to the results)."""

    def cell(stats: dict[str, Any]) -> str:
        if stats["median"] is None:
            return f"not reached ({stats['reached']}/{stats['seeds']})"
        low, high = stats["median_95"]
        upper = "beyond" if high is None else f"{high:,.0f}"
        short = f" ({stats['reached']}/{stats['seeds']})" if stats["reached"] < stats["seeds"] else ""
        return f"{stats['median']:,.0f} [{low:,.0f}-{upper}]{short}"

    primary = result["primary_reference"]
    lines = ["| method | 95% HV | 99% HV | front found | front pruned | regret (mean top-1 points) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for method, stats in result["methods"].items():
        ref = stats[primary]
        lines.append(f"| {method} | {cell(ref['epochs_to_95'])} | {cell(ref['epochs_to_99'])} | "
                     f"{stats['front_found']['median']:.2f} | {stats['front_pruned']['median']:.2f} | "
                     f"{stats['regret_mean']['median']:.2f} |")  # fmt: skip
    oracle = result["references"][primary]["oracle"]
    lines.append(f"| oracle | {oracle['95']['epochs']} | {oracle['99']['epochs']} | - | - | - |")
    return "\n".join(lines)


def headline(result: dict[str, Any]) -> str:
    """The README's one sentence on search quality, from the committed results (a test holds the README to
    it): the default's and random search's median epochs to 95% of the true hypervolume under the primary
    reference, the oracle's, and the fastest method's where it is not the default."""
    primary = result["primary_reference"]

    def epochs(method: str) -> str:
        stats = result["methods"][method][primary]["epochs_to_95"]
        if stats["median"] is None:
            return f"does not reach it in the median seed ({stats['reached']}/{stats['seeds']})"
        return f"{stats['median']:,.0f}"

    def interval(method: str) -> str:
        low, high = result["methods"][method][primary]["epochs_to_95"].get("median_95", [None, None])
        return f" [{low:,.0f}-{high:,.0f}]" if low is not None and high is not None else ""

    def key(method: str) -> tuple:
        median = reached[method]
        return (math.inf if median is None else median, method)

    reached = {m: v[primary]["epochs_to_95"]["median"] for m, v in result["methods"].items()}
    fastest = min((m for m in reached if reached[m] is not None), key=lambda m: (reached[m], m))
    default = result["default_method"]
    oracle = result["references"][primary]["oracle"]["95"]["epochs"]
    unsearched = [m for m in ("random", *result.get("baselines", ())) if m in reached]
    best = min(unsearched, key=key)
    table = Path(result["table"]).name.removesuffix(".gz").removesuffix(".csv")
    sentence = (
        f"On the committed {result['configurations']:,}-configuration table `{table}` ({result['seeds']} seeds, "
        f"{result['workers']} workers, the {primary}+10% reference), the default (`{default}`) reaches 95% of the "
        f"true front's hypervolume in a median of {epochs(default)} epochs{interval(default)} (95% bootstrap "
        f"interval), the best of random search and the search-free baselines (`{best}`) in "
        f"{epochs(best)}{interval(best)}"
    )
    others = [m for m in unsearched if m != best]
    if others:
        sentence += " (" + ", ".join(f"`{m}` {epochs(m)}" for m in others) + ")"
    sentence += f"; the cheapest set of front members that reaches it costs {oracle}"
    if fastest != default:
        sentence += f", and the fastest method here, `{fastest}`, needs {epochs(fastest)}"
    return sentence + "."


def caption(result: dict[str, Any]) -> str:
    """What the table's numbers are: the front, the references, the default, the AUC's normalisation; the
    domains where they are not the table's choices (a result before ``--domains`` replayed choices)."""
    points = {name: ref["point"] for name, ref in result["references"].items()}
    domains = result.get("domains", "choice")
    return (
        f"true front: {result['true_front']['size']} configurations ({result['true_front']['epochs']} epochs to "
        f"train them all); budget {result['budget_epochs']} epochs; references: nadir+10% {points['nadir']} "
        f"(primary), worst values {points['worst']}; the default (a spec naming neither sampler nor spread) is "
        f"{result['default_method']}; AUC: {result['auc']}"
        + ("" if domains == "choice" else f"; domains: {domains} ({json.dumps(result.get('search_space'))})")
    )


def plot(runs: dict[str, list[Replay]], truth: TrueFront, budget: int, directory: Path) -> Path:
    """Normalised hypervolume (primary reference) against epochs spent: median and IQR over seeds, per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, budget, 200)
    figure, axes = plt.subplots(figsize=(8, 5))
    for method, method_runs in runs.items():
        steps = [truth.curve(r) for r in method_runs]
        curves = np.array([[c.volume_at(int(x)) for x in grid] for c in steps])
        q25, median, q75 = np.percentile(curves, [25, 50, 75], axis=0)
        (line,) = axes.plot(grid, median, label=method)
        axes.fill_between(grid, q25, q75, color=line.get_color(), alpha=0.15)
    axes.axhline(0.95, color="grey", linestyle=":", linewidth=1)
    axes.set_xlabel("epochs spent")
    axes.set_ylabel(f"hypervolume / true front's ({PRIMARY} reference)")
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


def record_noise(result: dict[str, Any], truth: TrueFront, images: int) -> None:
    """Record and print how much of the front lies within the noise of ``images`` validation images
    (:meth:`TrueFront.within_noise`), and what each level allows against it (its shortfall, in sds and images)."""
    noise = truth.within_noise(images)
    result["true_front"]["within_noise"] = noise
    print(f"within the noise of {noise['images']:,} validation images (binomial sd {noise['member_sd'][0]}-"
          f"{noise['member_sd'][1]} points at the front): {noise['contested_members']} of {noise['members']} "
          f"front members and {noise['contested_nonmembers']} of {noise['nonmembers']:,} other configurations "
          "could swap places", file=sys.stderr)  # fmt: skip
    step = 100.0 / images  # one validation image, in top-1 points
    for level in LEVELS:
        allowed = result["references"][PRIMARY]["shortfall_points"][level_key(level)]
        smallest_sd = noise["member_sd"][0]
        of_sd = f"{allowed / smallest_sd:.2f}" if smallest_sd > 0 else "-"  # a front member at 0% or 100%
        print(f"{level:.0%} of the front's hypervolume ({PRIMARY} reference) allows every member {allowed:.3f} "
              f"top-1 points short at once: {of_sd} of the smallest sd at the front, {allowed / step:.2f} of "
              f"one validation image ({step:.3g} points)", file=sys.stderr)  # fmt: skip


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
    parser.add_argument("--domains", choices=DOMAIN_MODES, default="choice",
                        help="each parameter a choice of the table's values, or the int/float domain a user would "
                        "write (nearest row for values between)")  # fmt: skip
    parser.add_argument("--validation-images", type=int, default=None,
                        help="the images each top-1 was measured on: records how much of the true front lies "
                        "within that measurement's noise (front_quality.TrueFront.within_noise)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if args.seeds < 1 or args.workers < 1 or (args.budget is not None and args.budget < 1):
            raise TableError("--seeds, --workers and --budget must be >= 1")
        if args.validation_images is not None and args.validation_images < 1:
            raise TableError(f"--validation-images must be >= 1, not {args.validation_images}")
        table = load_table(args.table)
        objectives = parse_objectives(args.objectives)
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        for method in methods:
            if method.startswith("syne-"):
                if args.domains != "choice":
                    raise TableError(f"--domains {args.domains}: Syne Tune's methods ({method}) replay the "
                                     "table's choices only")  # fmt: skip
                if method not in SYNE_METHODS:
                    raise TableError(f"--methods: unknown {method!r}; Syne Tune's are {', '.join(SYNE_METHODS)}")
            elif method not in BASELINES:
                resolved(method, table, objectives, args.workers)
    except TableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{table.path}: {len(table)} configurations x {table.epochs} epochs; {args.seeds} seeds, "
          f"{args.workers} workers, --domains {args.domains}", file=sys.stderr)  # fmt: skip
    try:
        result, runs = run_all(table, objectives, methods, args.seeds, args.workers, args.budget, jobs=args.jobs,
                               domains=args.domains)  # fmt: skip
    except TableError as error:  # a table Syne Tune's simulator cannot replay (a combination missing)
        print(f"error: {error}", file=sys.stderr)
        return 2
    truth = TrueFront(table, objectives)
    if args.validation_images is not None:
        record_noise(result, truth, args.validation_images)
    if args.png is not None:
        result["figure"] = str(plot(runs, truth, result["budget_epochs"], args.png))
    arguments = sys.argv[1:] if argv is None else argv
    result["command"] = shlex.join(["python", "-m", "benchmarks.search_quality", *arguments])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.json.with_name(f".{args.json.name}.tmp")
    temporary.write_text(json.dumps(result, indent=2))
    temporary.replace(args.json)
    print(caption(result))
    print(render_table(result))
    for line in paired_lines(result):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
