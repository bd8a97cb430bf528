"""Does a cheap search predict an expensive one? Tables of one space at several fidelities, compared.

    python -m benchmarks.fidelity_tables --expensive benchmarks/tables/coatnet-mnist5k-e32.csv.gz \\
        --cheap benchmarks/tables/coatnet-mnist5k.csv.gz --cheap benchmarks/tables/coatnet-mnist5k-n1000.csv.gz \\
        --fix lr=0.003 --seeds 20 --workers 4 --json benchmarks/results/fidelity.json

(:data:`COMMAND`: what writes the committed results and the tables in the README's "Can I trust a short
search?".) Every search users run is a proxy: few epochs, a data subset, small images. Here each
fidelity of one space is a tabular benchmark (``benchmarks/tables/README.md``: every configuration
trained once, every epoch recorded), so the question has exact answers:

* **agreement**: on the configurations the cheap and the expensive table share, Kendall's tau-b and
  Spearman's rho between their final top-1 (seeded percentile bootstrap over configurations, 95%),
  how many of the expensive front's members the cheap front holds, and the share of the expensive
  front's hypervolume that training the cheap front alone at the expensive fidelity recovers (the
  primary reference of :mod:`benchmarks.front_quality`: the expensive front's nadir pushed out by
  10% of its range);
* **within a table**: the same rank correlations between each rung's top-1 and the final top-1 (the
  bet early stopping makes inside one study);
* **a warm start across fidelities against a cold expensive search**, replayed as
  :mod:`benchmarks.search_quality` replays (the engine a search builds, epochs looked up): the default
  method on the cheap table for a share of its budget, then the default sampler on the expensive
  table with the cheap search's front enqueued first (as ``search.warm_start`` enqueues an earlier
  study's front, which replaces the initial spread), against the default method on the expensive
  table alone. Cost is counted in **expensive-epoch equivalents**: a cheap epoch costs the median
  ratio of the two tables' recorded epoch times (1/3 for a third of the data, about 1 for the same
  data at fewer epochs), and the warm run's curve starts after the cheap search's cost.

``--fix NAME=VALUE`` restricts every table that searches NAME to that value (the committed 8-epoch
table searched ``lr`` too; the fidelity tables hold its ``lr`` 3e-3 sub-grid).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from benchmarks.front_quality import (
    LEVELS,
    PRIMARY,
    Curve,
    Replay,
    TrueFront,
    auc,
    level_key,
    nadir_reference,
    quartiles,
)
from benchmarks.search_quality import default_method, parse_method, replay
from benchmarks.table import Table, TableError, load_table, restrict, subset
from dashboards.fidelity import rank_correlations
from dashboards.multiobjective import hypervolume, non_dominated

OBJECTIVES = {"top1": "max", "flops": "min"}
BOOTSTRAP = 2000  # resamples of the configurations for each interval
RUNGS = (1, 2, 4, 8, 16, 32)  # the epochs a within-table agreement is reported at (those a table has)
CHEAP_BUDGETS = (0.25, 1.0)  # the cheap search's budget, as shares of its table's whole (every configuration)
COMMAND = (
    "python -m benchmarks.fidelity_tables --expensive benchmarks/tables/coatnet-mnist5k-e32.csv.gz "
    "--cheap benchmarks/tables/coatnet-mnist5k.csv.gz --cheap benchmarks/tables/coatnet-mnist5k-n1000.csv.gz "
    "--fix lr=0.003 --epoch-cost coatnet-mnist5k.csv.gz=1 --seeds 20 --workers 4 "
    "--json benchmarks/results/fidelity.json"
)


# -- agreement between two tables ------------------------------------------------------------------
def rank_agreement(x: Sequence[float], y: Sequence[float], seed: int = 0, resamples: int = BOOTSTRAP) -> dict:
    """Kendall's tau-b and Spearman's rho between ``x`` and ``y`` (paired), each with a percentile bootstrap
    95% interval over the pairs: :func:`dashboards.fidelity.rank_correlations`, the measure ``archsearch
    fidelity`` gives a study (seeded: the same numbers every run)."""
    if len(x) != len(y) or len(x) < 3:
        raise TableError(f"a rank correlation needs at least 3 pairs (got {min(len(x), len(y))})")
    tau, rho = rank_correlations(x, y, resamples=resamples, seed=seed)

    def interval(correlation) -> list[float] | None:
        finite = math.isfinite(correlation.low) and math.isfinite(correlation.high)
        return [correlation.low, correlation.high] if finite else None

    return {
        "pairs": len(x),
        "kendall_tau": tau.value,
        "kendall_tau_ci": interval(tau),
        "spearman_rho": rho.value,
        "spearman_rho_ci": interval(rho),
    }


@dataclass(frozen=True)
class Pairing:
    """The configurations two tables share: index in the cheap table -> index in the expensive one."""

    cheap: list[int]
    expensive: list[int]


def pair(cheap: Table, expensive: Table) -> Pairing:
    if sorted(cheap.param_names) != sorted(expensive.param_names):
        raise TableError(
            f"{cheap.path} searches {sorted(cheap.param_names)} and {expensive.path} {sorted(expensive.param_names)}: "
            "compare tables of one space (--fix NAME=VALUE restricts a table to a sub-space)"
        )
    cheap_index, expensive_index = [], []
    for i, params in enumerate(cheap.params):
        j = expensive.index_of(params)
        if j is not None:
            cheap_index.append(i)
            expensive_index.append(j)
    if len(cheap_index) < 3:
        raise TableError(f"{cheap.path} and {expensive.path} share {len(cheap_index)} configurations (need 3)")
    return Pairing(cheap_index, expensive_index)


def front(points: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated rows of (top-1, FLOPs) ``points``."""
    return np.flatnonzero(non_dominated(points, list(OBJECTIVES.values())))


def epoch_cost_ratio(cheap: Table, expensive: Table, pairing: Pairing) -> float:
    """What one cheap epoch costs in expensive epochs: the median over shared configurations of the ratio of
    their mean recorded epoch times."""
    ratios = cheap.epoch_s[pairing.cheap].mean(axis=1) / expensive.epoch_s[pairing.expensive].mean(axis=1)
    return float(np.median(ratios))


def agreement(cheap: Table, expensive: Table, ratio: float | None = None) -> dict[str, Any]:
    """The cheap table against the expensive one on their shared configurations (see the module docstring)."""
    pairing = pair(cheap, expensive)
    cheap_points = np.column_stack([cheap.metric(n)[pairing.cheap] for n in OBJECTIVES])
    expensive_points = np.column_stack([expensive.metric(n)[pairing.expensive] for n in OBJECTIVES])
    directions = list(OBJECTIVES.values())
    truth = front(expensive_points)
    cheap_front = front(cheap_points)
    reference = nadir(expensive_points[truth])
    whole = hypervolume(expensive_points[truth], directions, reference)
    recovered = hypervolume(expensive_points[cheap_front], directions, reference) / whole
    ratio = epoch_cost_ratio(cheap, expensive, pairing) if ratio is None else ratio
    return {
        "cheap": cheap.path,
        "expensive": expensive.path,
        "shared": len(pairing.cheap),
        "cheap_epochs": cheap.epochs,
        "expensive_epochs": expensive.epochs,
        "epoch_cost_ratio": ratio,
        "final_top1": rank_agreement(cheap_points[:, 0], expensive_points[:, 0]),
        "expensive_front": len(truth),
        "cheap_front": len(cheap_front),
        "expensive_front_in_cheap_front": len(set(truth) & set(cheap_front)),
        "expensive_hv_from_cheap_front": float(recovered),
        # the whole cheap table, then its front trained at the expensive fidelity, in expensive epochs
        "cost_cheap_then_front": float(len(pairing.cheap) * cheap.epochs * ratio + len(cheap_front) * expensive.epochs),
        "cost_expensive_table": len(pairing.cheap) * expensive.epochs,
    }


def nadir(front_points: np.ndarray) -> np.ndarray:
    return nadir_reference(front_points, list(OBJECTIVES.values()))


def within(table: Table) -> list[dict[str, Any]]:
    """Per rung (:data:`RUNGS` below the last epoch): that epoch's top-1 against the final, over every configuration."""
    final = table.metric("top1")
    return [
        {"epoch": epoch, **rank_agreement(table.metric("top1", epoch), final)}
        for epoch in RUNGS
        if epoch < table.epochs
    ]


# -- a warm start across fidelities against a cold expensive search ---------------------------------
def found_front(table: Table, run: Replay) -> list[dict[str, Any]]:
    """The parameters of the front of what ``run`` completed on ``table`` (its own values): what
    ``search.warm_start`` enqueues from an earlier study (``warm_start.earlier_trials`` with ``top: 0``)."""
    completed = sorted(set(run.completed))
    if not completed:
        return []
    points = np.column_stack([table.metric(n)[completed] for n in OBJECTIVES])
    return [table.params[completed[k]] for k in front(points)]


def shifted(curve: Curve, offset: float) -> Curve:
    """``curve`` with every step ``offset`` epochs later (what was spent before it started), rounded up."""
    return Curve(tuple(math.ceil(e + offset - 1e-9) for e in curve.epochs), curve.volume)


def race_seed(
    cheap: Table, expensive: Table, seed: int, workers: int, shares: Sequence[float], ratio: float | None = None
) -> dict[str, Any]:
    """One seed: the cold expensive search, and per share of the cheap budget the cheap search then the warm
    expensive one; the curves (primary reference) in expensive-epoch equivalents."""
    budget = len(expensive) * expensive.epochs
    pairing = pair(cheap, expensive)
    ratio = epoch_cost_ratio(cheap, expensive, pairing) if ratio is None else ratio
    cheap = subset(cheap, pairing.cheap)  # the cheap search searches what the expensive one can: the shared ones
    truth, cheap_truth = TrueFront(expensive, OBJECTIVES), TrueFront(cheap, OBJECTIVES)
    cold_method = default_method(expensive, OBJECTIVES, workers)
    warm_method = parse_method(cold_method)[0]  # the default sampler: a warm start replaces the spread
    cheap_method = default_method(cheap, OBJECTIVES, workers)
    curves: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fidelity-") as directory:

        def url(role: str) -> str:
            return f"sqlite:///{Path(directory) / f'{role}.db'}"

        cold = replay(expensive, truth, cold_method, seed, workers, budget, url("cold"))
        curves["cold"] = truth.curve(cold)
        for share in shares:
            cheap_run = replay(cheap, cheap_truth, cheap_method, seed, workers,
                               max(1, round(share * len(cheap) * cheap.epochs)), url(f"cheap-{share}"))  # fmt: skip
            offset = cheap_run.spent * ratio
            warm = found_front(cheap, cheap_run)
            warm_run = replay(expensive, truth, warm_method, seed, workers, max(1, budget - math.ceil(offset)),
                              url(f"warm-{share}"), warm=warm)  # fmt: skip
            curves[f"warm-{share}"] = shifted(truth.curve(warm_run), offset)
            curves[f"warm-{share}-enqueued"] = len(warm)
            curves[f"warm-{share}-offset"] = offset
    return curves


def race(
    cheap: Table, expensive: Table, seeds: int, workers: int, shares: Sequence[float], ratio: float | None = None
) -> dict[str, Any]:
    """:func:`race_seed` over ``seeds``, summarised per strategy: epochs to 95% and 99% of the expensive true
    front's hypervolume (primary reference) and the AUC over the expensive table's whole budget."""
    budget = len(expensive) * expensive.epochs
    per_seed = [race_seed(cheap, expensive, seed, workers, shares, ratio) for seed in range(seeds)]
    cold_method = default_method(expensive, OBJECTIVES, workers)
    strategies = {"cold": f"{cold_method} on the expensive table"}
    cheap_method = default_method(cheap, OBJECTIVES, workers)
    for share in shares:
        strategies[f"warm-{share}"] = (
            f"{cheap_method} on the cheap table for {share:.0%} of its epochs, then "
            f"{parse_method(cold_method)[0]} warm-started from its front"
        )
    result: dict[str, Any] = {"budget": budget, "strategies": {}}
    for key, label in strategies.items():
        curves = [s[key] for s in per_seed]
        summary = {
            "label": label,
            **{f"epochs_to_{level_key(lv)}": quartiles([c.epochs_to(lv) for c in curves]) for lv in LEVELS},
            "auc": quartiles([auc(c, budget) for c in curves]),
        }
        if key != "cold":
            summary["cheap_cost"] = quartiles([s[f"{key}-offset"] for s in per_seed])
            summary["enqueued"] = quartiles([s[f"{key}-enqueued"] for s in per_seed])
        result["strategies"][key] = summary
    return result


# -- the report ---------------------------------------------------------------------------------------
def _reach(stats_: dict[str, Any]) -> str:
    """Epochs to a level over seeds, in words: the median [IQR], and how many seeds got there if not all."""
    seeds = f"{stats_['reached']} of {stats_['seeds']} seeds get there"
    if stats_["median"] is None:
        return f"longer than the budget in the median seed ({seeds})"
    short = f"; {seeds}" if stats_["reached"] < stats_["seeds"] else ""
    high = "beyond the budget" if stats_["q75"] is None else f"{stats_['q75']:.0f}"
    return f"{stats_['median']:.0f} expensive-epoch equivalents [IQR {stats_['q25']:.0f}-{high}{short}]"


def _interval(stats_: dict[str, Any], name: str) -> str:
    ci = stats_[f"{name}_ci"]
    return f"{stats_[name]:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{stats_[name]:.2f}"


def _cell(stats_: dict[str, Any], digits: int = 0) -> str:
    if stats_["median"] is None:
        return f"not reached ({stats_['reached']}/{stats_['seeds']})"
    high = "beyond" if stats_["q75"] is None else f"{stats_['q75']:.{digits}f}"
    short = f" ({stats_['reached']}/{stats_['seeds']})" if stats_["reached"] < stats_["seeds"] else ""
    return f"{stats_['median']:.{digits}f} [{stats_['q25']:.{digits}f}-{high}]{short}"


def render(result: dict[str, Any]) -> str:
    """The README's tables: agreement per cheap table, agreement within each table per rung, the race."""
    lines = [
        "| cheap table | shared configs | a cheap epoch costs | Kendall tau, final top-1 [95% CI] | Spearman rho "
        "[95% CI] | expensive front in the cheap front | expensive HV from the cheap front | cost: whole cheap "
        "table + its front vs the expensive table (expensive epochs) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["agreement"]:
        final = row["final_top1"]
        lines.append(
            f"| {Path(row['cheap']).name} ({row['cheap_epochs']} epochs) | {row['shared']} | "
            f"{row['epoch_cost_ratio']:.2f} expensive epochs | {_interval(final, 'kendall_tau')} | "
            f"{_interval(final, 'spearman_rho')} | {row['expensive_front_in_cheap_front']} of "
            f"{row['expensive_front']} (cheap front: {row['cheap_front']}) | "
            f"{row['expensive_hv_from_cheap_front']:.3f} "
            f"| {row['cost_cheap_then_front']:.0f} vs {row['cost_expensive_table']} |"
        )
    lines += ["", "| table | epoch | Kendall tau with the final top-1 [95% CI] | Spearman rho [95% CI] |",
              "|---|---|---|---|"]  # fmt: skip
    for name, rungs in result["within"].items():
        for rung in rungs:
            lines.append(f"| {Path(name).name} | {rung['epoch']} | {_interval(rung, 'kendall_tau')} | "
                         f"{_interval(rung, 'spearman_rho')} |")  # fmt: skip
    lines += ["", "| cheap table | strategy | 95% HV (expensive epochs) | 99% HV | AUC | cheap search's cost | "
              "front enqueued |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, race_result in result["race"].items():
        for row in race_result["strategies"].values():
            cheap_cost = _cell(row["cheap_cost"]) if "cheap_cost" in row else "-"
            enqueued = _cell(row["enqueued"]) if "enqueued" in row else "-"
            lines.append(
                f"| {Path(name).name} | {row['label']} | {_cell(row['epochs_to_95'])} | {_cell(row['epochs_to_99'])} "
                f"| {_cell(row['auc'], 3)} | {cheap_cost} | {enqueued} |"
            )
    return "\n".join(lines)


def headline(result: dict[str, Any]) -> list[str]:
    """The README's sentences (``README.md``, "Can I trust a short search?"), one per cheap table, from the
    results: each is quoted there verbatim, and a test holds the two together."""
    lines = []
    for row in result["agreement"]:
        final = row["final_top1"]
        race_result = result["race"][row["cheap"]]["strategies"]
        cold, warm = race_result["cold"], race_result[f"warm-{CHEAP_BUDGETS[-1]}"]
        lines.append(
            f"`{Path(row['cheap']).name}` ({row['cheap_epochs']} epochs) against `{Path(row['expensive']).name}` "
            f"({row['expensive_epochs']} epochs), {row['shared']} configurations: Kendall tau "
            f"{_interval(final, 'kendall_tau')}; its front holds {row['expensive_front_in_cheap_front']} of the "
            f"expensive front's {row['expensive_front']} members, and training that front alone recovers "
            f"{row['expensive_hv_from_cheap_front']:.1%} of the expensive front's hypervolume, for "
            f"{row['cost_cheap_then_front']:.0f} expensive-epoch equivalents against "
            f"{row['cost_expensive_table']} for the whole expensive table. To 95% of the expensive front's "
            f"hypervolume, a search warm-started from the whole cheap search (its cost included) takes "
            f"{_reach(warm['epochs_to_95'])}, a cold search {_reach(cold['epochs_to_95'])}."
        )
    parts = []
    for name, rungs in result["within"].items():
        shown = ", ".join(f"epoch {r['epoch']} {_interval(r, 'kendall_tau')}" for r in rungs)
        parts.append(f"`{Path(name).name}`: {shown}")
    lines.append("Kendall tau between a rung's top-1 and the same table's final top-1: " + "; ".join(parts) + ".")
    return lines


def parse_costs(pairs: Sequence[str], cheap: Sequence[Path]) -> dict[str, float]:
    """``--epoch-cost FILE=RATIO``: the cost of a cheap table's epoch in expensive epochs, set (where the tables'
    recorded times came from builds under different loads) instead of measured."""
    costs: dict[str, float] = {}
    names = {path.name for path in cheap}
    for text in pairs:
        name, sep, value = text.partition("=")
        try:
            ratio = float(value)
        except ValueError:
            ratio = math.nan
        if not sep or name not in names or not (math.isfinite(ratio) and ratio > 0):
            raise TableError(f"--epoch-cost: {text!r} is not FILE=RATIO with FILE a --cheap table's name and RATIO > 0")
        costs[name] = ratio
    return costs


def parse_fixed(pairs: Sequence[str]) -> dict[str, Any]:
    fixed: dict[str, Any] = {}
    for text in pairs:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise TableError(f"--fix: {text!r} is not NAME=VALUE")
        try:
            fixed[name] = json.loads(value)
        except json.JSONDecodeError:
            fixed[name] = value
    return fixed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expensive", required=True, type=Path)
    parser.add_argument("--cheap", required=True, type=Path, action="append")
    parser.add_argument("--fix", action="append", default=[], help="NAME=VALUE: restrict every table to it")
    parser.add_argument(
        "--epoch-cost",
        action="append",
        default=[],
        help="FILE=RATIO: a cheap table's epoch in expensive epochs, instead of the ratio of the recorded times",
    )
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.seeds < 1 or args.workers < 1:
            raise TableError("--seeds and --workers must be >= 1")
        fixed = parse_fixed(args.fix)
        costs = parse_costs(args.epoch_cost, args.cheap)
        expensive = restrict(load_table(args.expensive), fixed)
        cheap_tables = [restrict(load_table(path), fixed) for path in args.cheap]
        ratios = [costs.get(path.name) for path in args.cheap]
        rows = [agreement(cheap, expensive, ratio) for cheap, ratio in zip(cheap_tables, ratios, strict=True)]
    except TableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    result: dict[str, Any] = {
        "expensive": expensive.path,
        "objectives": OBJECTIVES,
        "primary_reference": PRIMARY,
        "seeds": args.seeds,
        "workers": args.workers,
        "bootstrap": BOOTSTRAP,
        "agreement": rows,
        "epoch_costs_set": costs,
        "within": {table.path: within(table) for table in [expensive, *cheap_tables]},
        "race": {},
    }
    for cheap, ratio in zip(cheap_tables, ratios, strict=True):
        print(f"  racing {cheap.path} against {expensive.path} ({args.seeds} seeds)", file=sys.stderr, flush=True)
        result["race"][cheap.path] = race(cheap, expensive, args.seeds, args.workers, CHEAP_BUDGETS, ratio)
    arguments = sys.argv[1:] if argv is None else argv
    result["command"] = shlex.join(["python", "-m", "benchmarks.fidelity_tables", *arguments])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.json.with_name(f".{args.json.name}.tmp")
    temporary.write_text(json.dumps(result, indent=2))
    temporary.replace(args.json)
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
