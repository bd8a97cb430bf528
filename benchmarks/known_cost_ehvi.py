"""Tried and not kept (issue 60): expected hypervolume improvement with the cost known before training.

FLOPs are exact before a trial runs, so in a search for top-1 *and* FLOPs only top-1 is unknown. A sampler can
then score each untried configuration by its expected hypervolume improvement (EHVI) at its own, known FLOPs:
with the found front a staircase and top-1 ~ N(mu, sd), the improvement is a sum over the staircase's steps to
the right of the configuration's FLOPs, each ``length * E[max(0, top1 - step level)]``, in closed form
(:func:`expected_improvement`). TPE, the default, models FLOPs as if unknown. This module asks whether
knowing them pays, before anyone builds a sampler for it.

Its surrogate is Bayesian ridge regression on the one-hot parameters and log FLOPs (:func:`fit_predict`: an
additive model of top-1, as in NAS-Bench-Macro-style spaces of independent per-layer choices). Trials run on W
asynchronous workers in simulated time, each epoch its recorded seconds; the first trials are the default
spread's, at FLOPs quantiles (``initial_design.pick``), and running trials count at their predicted top-1 (the
kriging believer). Epochs spent are counted as :mod:`benchmarks.search_quality` counts them (every epoch any
trial trained by then); ``random+spread`` runs in the same simulator, so that its rows can be set beside that
module's.

    python -m benchmarks.known_cost_ehvi --table benchmarks/tables/coatnet-mnist5k-n1000.csv.gz --seeds 10

The answer on the committed tables is in docs/benchmarks.md ("A known-cost EHVI").
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import shlex
import sys
from pathlib import Path

import numpy as np
from scipy.stats import norm

from benchmarks.blind_oracle import exclusive_volumes
from benchmarks.front_quality import LEVELS, Replay, TrueFront, median_interval
from benchmarks.hostinfo import provenance
from benchmarks.ridge_surrogate import features, fit_predict
from benchmarks.table import Table, TableError, load_table
from harness.search.propose.initial_design import DEFAULT_SPREAD, pick
from trials.atomic import atomic_write

METHODS = ("random+spread", "known-cost-ehvi", "known-cost-share")
SHARE_DRAWS = 32  # posterior draws that each known-cost-share proposal averages over


def staircase(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-dominated ``(flops, top1)`` points (fewer FLOPs, more top-1), by FLOPs."""
    front: list[tuple[float, float]] = []
    for flops, top1 in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or top1 > front[-1][1]:
            front.append((flops, top1))
    return front


def expected_improvement(
    flops: np.ndarray,
    mean: np.ndarray,
    sd: np.ndarray,
    front: list[tuple[float, float]],
    reference: tuple[float, float],
) -> np.ndarray:
    """Each candidate's expected hypervolume improvement over ``front`` (a :func:`staircase`), its FLOPs known and
    its top-1 ~ N(mean, sd), against ``reference`` = (FLOPs, top-1): exact, no sampling."""
    ref_flops, ref_top1 = reference
    steps = [p for p in front if p[0] < ref_flops]
    starts = np.array([-np.inf] + [p[0] for p in steps])
    ends = np.array([p[0] for p in steps] + [ref_flops])
    levels = np.array([ref_top1] + [p[1] for p in steps])
    length = np.clip(ends[None, :] - np.maximum(starts[None, :], flops[:, None]), 0.0, None)
    above = mean[:, None] - levels[None, :]
    z = above / sd[:, None]
    return (length * (above * norm.cdf(z) + sd[:, None] * norm.pdf(z))).sum(axis=1)


class Proposer:
    """One seed's proposals: the spread first, then random or the known-cost EHVI over untried configurations."""

    def __init__(self, table: Table, method: str, seed: int):
        self.table, self.method = table, method
        self.rng = np.random.default_rng(seed)
        self.flops = table.cost["flops"].astype(float)
        self.top1 = table.metric("top1")
        self.x = features(table) if method != "random+spread" else None
        order = [int(i) for i in self.rng.permutation(len(table))]  # the spread's draw: seeded, equal costs shuffled
        self.first = pick([(self.flops[i], i) for i in order], min(DEFAULT_SPREAD, len(table) // 2))
        self.reference_flops = float(self.flops.max()) * (1 + 1e-6)

    def propose(self, done: list[int], running: list[int]) -> int | None:
        tried = set(done) | set(running)
        if self.first:
            return self.first.pop(0)
        untried = [i for i in range(len(self.table)) if i not in tried]
        if not untried:
            return None
        if self.method == "random+spread" or len(done) < 3:
            return int(self.rng.choice(untried))
        observed = self.top1[done]
        mean, sd = fit_predict(self.x[done], observed, self.x[untried])
        believed = fit_predict(self.x[done], observed, self.x[running])[0] if running else np.empty(0)
        if self.method == "known-cost-share":
            return untried[int(np.argmax(self.expected_share(done, running, believed, untried, mean, sd)))]
        points = [(self.flops[i], self.top1[i]) for i in done] + list(zip(self.flops[running], believed, strict=True))
        front = staircase(points)
        known = [top1 for _, top1 in staircase([(self.flops[i], self.top1[i]) for i in done])]
        reference = (self.reference_flops, min(known) - 0.1 * (max(known) - min(known)))
        scores = expected_improvement(self.flops[untried], mean, sd, front, reference)
        return untried[int(np.argmax(scores))]

    def expected_share(
        self,
        done: list[int],
        running: list[int],
        believed: np.ndarray,
        untried: list[int],
        mean: np.ndarray,
        sd: np.ndarray,
    ) -> np.ndarray:
        """Each untried configuration's share of its front's hypervolume that no other member covers, averaged
        over :data:`SHARE_DRAWS` posterior draws of every untried top-1 at once (trained ones as measured,
        running ones at their predicted top-1): how likely it is to be on the final front, weighted by how
        much of it only it holds. Candidates compete with each other in every draw, which EHVI against the
        found front does not ask."""
        everyone = np.asarray(done + running + untried)
        top1 = np.full(len(self.table), np.nan)
        top1[done], top1[running] = self.top1[done], believed
        share = np.zeros(len(self.table))
        for _ in range(SHARE_DRAWS):
            top1[untried] = mean + sd * self.rng.standard_normal(len(untried))
            members, volumes, _ = exclusive_volumes(top1, self.flops, everyone)
            share[members] += volumes / (volumes.sum() or 1.0)
        return share[untried] - 1e-9 * self.flops[untried]  # ties (no draw's front): the cheapest


def replay(table: Table, method: str, seed: int, workers: int, budget: int) -> Replay:
    """One seed on ``workers`` asynchronous workers in simulated time; a completion is charged every epoch
    trained by then (running trials' finished epochs included), as :mod:`benchmarks.search_quality` does.
    Long because it is the event loop: start, finish, count, propose again."""
    proposer = Proposer(table, method, seed)
    run = Replay()
    done: list[int] = []
    running: dict[int, float] = {}  # configuration -> its start time
    events: list[tuple[float, int]] = []
    clock = 0.0
    epochs_of_done = 0

    def start() -> bool:
        if epochs_of_done + sum(epochs_started(clock).values()) >= budget:
            return False
        chosen = proposer.propose(done, list(running))
        if chosen is None:
            return False
        running[chosen] = clock
        heapq.heappush(events, (clock + float(table.epoch_s[chosen].sum()), chosen))
        return True

    def epochs_started(now: float) -> dict[int, int]:
        return {
            i: int(np.searchsorted(np.cumsum(table.epoch_s[i]), now - t0, side="right")) for i, t0 in running.items()
        }

    for _ in range(workers):
        start()
    while events:
        clock, finished = heapq.heappop(events)
        del running[finished]
        done.append(finished)
        epochs_of_done += table.epochs
        spent = epochs_of_done + sum(epochs_started(clock).values())
        if spent > budget:
            break
        run.complete(finished, spent, clock)
        start()
    return run


def summarise(truth: TrueFront, runs: list[Replay]) -> dict:
    """Per level: the epochs to it per seed (None: not within the budget), their median and its interval."""
    result = {}
    for level in LEVELS:
        per_seed = [truth.curve(run).epochs_to(level) for run in runs]
        reached = [v for v in per_seed if v is not None]
        median = float(np.median([v if v is not None else math.inf for v in per_seed]))
        result[f"{level:.0%}"] = {"per_seed": per_seed, "reached": len(reached), "seeds": len(per_seed),
                                  "median": median if math.isfinite(median) else None,
                                  "interval": median_interval(per_seed)}  # fmt: skip
    return result


def cell(summary: dict) -> str:
    """A level's cell as docs/benchmarks.md shows it: median [its 95% interval], ``(k/n)`` where only k seeds got
    there, ``not reached (k/n)`` where the median did not."""

    def number(value: float | None) -> str:
        return "beyond" if value is None else f"{value:,.0f}"

    if summary["median"] is None:
        return f"not reached ({summary['reached']}/{summary['seeds']})"
    low, high = summary["interval"]
    seeds = "" if summary["reached"] == summary["seeds"] else f" ({summary['reached']}/{summary['seeds']})"
    return f"{number(summary['median'])} [{number(low)}-{number(high)}]{seeds}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, type=Path)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--budget", type=int, default=None, help="epochs (default: the whole table's)")
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    try:
        unknown = [m for m in methods if m not in METHODS]
        if unknown or not methods:
            raise TableError(f"--methods: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(METHODS)}")
        if args.seeds < 1 or args.workers < 1 or (args.budget is not None and args.budget < 1):
            raise TableError("--seeds, --workers and --budget must be >= 1")
        table = load_table(args.table)
    except TableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    budget = args.budget or len(table) * table.epochs
    truth = TrueFront(table, {"top1": "max", "flops": "min"})
    result = {"table": str(args.table), "seeds": args.seeds, "workers": args.workers, "budget_epochs": budget,
              "reference": "nadir+10%", "methods": {}, "provenance": provenance()}  # fmt: skip
    print("| method | 95% HV, nadir+10% | 99% HV, nadir+10% |\n|---|---|---|")
    for method in methods:
        runs = [replay(table, method, seed, args.workers, budget) for seed in range(args.seeds)]
        result["methods"][method] = summary = summarise(truth, runs)
        print(f"| {method} | {' | '.join(cell(level) for level in summary.values())} |", flush=True)
    arguments = sys.argv[1:] if argv is None else argv
    result["command"] = shlex.join(["python", "-m", "benchmarks.known_cost_ehvi", *arguments])
    if args.json is not None:
        atomic_write(args.json, json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
