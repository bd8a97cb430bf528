"""An oracle that does not know the validation draw: how much of the yardstick's oracle is knowing it (issue 60).

The yardstick's oracle (:meth:`benchmarks.front_quality.TrueFront.oracle`) trains the cheapest set of true-front
members that reaches a level of the front's hypervolume. It knows every configuration's top-1 as this one
validation set measured it, and on the CoAtNet tables 99% of the hypervolume allows less than one validation
image of shortfall (:meth:`~benchmarks.front_quality.TrueFront.shortfall`): the oracle's few members are the
draw's winners. "At most 8x the oracle" then asks a search to match knowledge that no search can have.

The **blind oracle** knows more than any search and less than the oracle: every configuration's table top-1, taken
as its mean, and the binomial sd of a top-1 on the validation set's images, but not the draw. A draw is the table's
top-1 plus independent normal noise of that sd per configuration (clipped to 0-100). The blind oracle trains the
configurations in one fixed order, the most expected exclusive hypervolume first (each configuration's share of
its draw's front hypervolume that no other member covers, averaged over ``draws`` draws; configurations that
never make a front follow, cheapest first), and its epochs to a level are counted on ``draws`` other draws, each
against its own front under that front's nadir+10% reference. Its median says what knowing the means buys; the
oracle's lead beyond it is the draw. Every configuration costs the table's epochs, as the oracle counts them.

The table's own top-1 already holds one draw, so a fresh draw on top of it is noisier than the validation set
is: the blind oracle is a thought experiment about a front measured as these were, not a bound any search meets.

    python -m benchmarks.blind_oracle --table benchmarks/tables/coatnet-mnist5k-e32.csv.gz --validation-images 1000
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.front_quality import LEVELS, TrueFront, binomial_sd, level_key, median_interval
from benchmarks.hostinfo import provenance
from benchmarks.ridge_surrogate import leave_one_out_ridge
from benchmarks.table import Table, TableError, load_table
from dashboards.fidelity import nadir_reference
from dashboards.multiobjective import hypervolume, non_dominated
from trials.atomic import atomic_write

OBJECTIVES = {"top1": "max", "flops": "min"}  # the two the oracle is compared on (top-1 against FLOPs)
DIRECTIONS = list(OBJECTIVES.values())
DRAWS = 200  # draws to order by, and as many others to count on
WIDTHS = (0.5, 1.0, 2.0, 4.0)  # the informed order's sds, in multiples of its model's leave-one-out error


def measurement_sd(top1: np.ndarray, images: int) -> np.ndarray:
    """:func:`~benchmarks.front_quality.binomial_sd`, refusing an image count below one by its flag's name."""
    if images < 1:
        raise TableError(f"--validation-images must be >= 1, not {images}")
    return binomial_sd(top1, images)


def exclusive_volumes(
    top1: np.ndarray, flops: np.ndarray, candidates: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The front of ``candidates`` under these top-1 values, and each member's exclusive hypervolume (the part no
    other member covers) under the front's nadir+10% reference: the members cheapest first, their volumes, the
    reference."""
    points = np.column_stack([top1[candidates], flops[candidates]])
    members = candidates[non_dominated(points, DIRECTIONS)]
    reference = nadir_reference(np.column_stack([top1[members], flops[members]]), DIRECTIONS)
    members = members[np.lexsort((-top1[members], flops[members]))]
    right = np.append(flops[members][1:], reference[1])  # where the next member's step begins
    below = np.insert(top1[members][:-1], 0, reference[0])  # the level the previous member holds
    volumes = np.clip(right - flops[members], 0.0, None) * np.clip(top1[members] - below, 0.0, None)
    return members, volumes, reference


def drawn(top1: np.ndarray, sd: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.clip(top1 + sd * rng.standard_normal(len(top1)), 0.0, 100.0)


def blind_order(top1: np.ndarray, flops: np.ndarray, sd: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """The order the blind oracle trains in: by exclusive volume share averaged over ``draws`` draws, then the
    configurations that made no draw's front, cheapest first (ties in the configuration's order)."""
    candidates = np.flatnonzero(np.isfinite(top1))
    rng = np.random.default_rng(seed)
    share = np.zeros(len(top1))
    for _ in range(draws):
        members, volumes, _ = exclusive_volumes(drawn(top1, sd, rng), flops, candidates)
        share[members] += volumes / (volumes.sum() or 1.0)
    scored = [int(i) for i in np.argsort(-share, kind="stable") if share[i] > 0]
    rest = [int(i) for i in candidates[np.argsort(flops[candidates], kind="stable")] if share[i] == 0]
    return np.asarray(scored + rest, dtype=int)


def trained_to_level(order: np.ndarray, top1: np.ndarray, flops: np.ndarray, level: float) -> int:
    """How many of ``order``'s first configurations reach ``level`` of the front of these top-1 values (its
    nadir+10% reference): a bisection, the volume growing with every configuration added."""
    candidates = np.flatnonzero(np.isfinite(top1))
    members, _, reference = exclusive_volumes(top1, flops, candidates)
    whole = hypervolume(np.column_stack([top1[members], flops[members]]), DIRECTIONS, reference)
    low, high = 1, len(order)
    while low < high:
        middle = (low + high) // 2
        found = order[:middle]
        volume = hypervolume(np.column_stack([top1[found], flops[found]]), DIRECTIONS, reference)
        low, high = (low, middle) if volume >= (level - 1e-12) * whole else (middle + 1, high)
    return low


def blind_oracle(table: Table, images: int, draws: int = DRAWS, seed: int = 0) -> dict[str, Any]:
    """Per level (:data:`~benchmarks.front_quality.LEVELS`): the oracle's epochs, the blind oracle's epochs on each
    of ``draws`` fresh draws (their median and its 95% bootstrap interval), and the epochs its order needs on the
    table's own draw (beside the oracle: what the order gives up where the draw is known)."""
    if draws < 1:
        raise TableError(f"--draws must be >= 1, not {draws}")
    truth = TrueFront(table, OBJECTIVES)
    top1, flops = truth.points[:, 0], truth.points[:, 1]
    sd = measurement_sd(np.nan_to_num(top1), images)
    order = blind_order(top1, flops, sd, draws, seed)
    rng = np.random.default_rng(seed + 1)  # other draws than the order's
    counted = [drawn(top1, sd, rng) for _ in range(draws)]
    result: dict[str, Any] = {"images": images, "draws": draws, "seed": seed, "epochs_per_configuration": table.epochs,
                              "order_head": [int(i) for i in order[:20]], "levels": {}}  # fmt: skip
    for level in LEVELS:
        per_draw = [trained_to_level(order, draw, flops, level) * table.epochs for draw in counted]
        own = next(k for k in range(1, len(order) + 1) if truth.normalised(list(order[:k])) >= level - 1e-12)
        result["levels"][level_key(level)] = {
            "oracle": truth.oracle(level)["epochs"],
            "blind_median": float(np.median(per_draw)),
            "blind_interval": median_interval(per_draw),
            "blind_per_draw": per_draw,
            "order_on_the_tables_draw": own * table.epochs,
        }
    return result


def informed_order(
    table: Table, draws: int = DRAWS, seed: int = 0, widths: tuple[float, ...] = WIDTHS
) -> dict[str, Any]:
    """The blind oracle's order with each configuration's mean replaced by what a model of the *rest* of the table
    predicts (:func:`~benchmarks.ridge_surrogate.leave_one_out_ridge`), counted on the table's own draw: epochs to
    each level, once per sd, each a multiple (``widths``) of the model's leave-one-out error. Its model is
    fitted on every other configuration, more than any search has before it trains one; a level it needs many
    epochs for at every width waits for configurations the rest does not predict: the draw's winners."""
    truth = TrueFront(table, OBJECTIVES)
    top1, flops = truth.points[:, 0], truth.points[:, 1]
    predicted, error = leave_one_out_ridge(table, top1)
    result: dict[str, Any] = {"draws": draws, "seed": seed, "epochs_per_configuration": table.epochs,
                              "leave_one_out_rmse": error, "widths": {}}  # fmt: skip
    for width in widths:
        order = blind_order(predicted, flops, np.full(len(top1), width * error), draws, seed)
        result["widths"][f"{width:g}"] = {
            level_key(level): trained_to_level(order, top1, flops, level) * table.epochs for level in LEVELS
        }
    return result


def render_row(name: str, result: dict[str, Any]) -> str:
    """One table's row as docs/benchmarks.md shows it: per level the oracle, the blind oracle's median [interval]."""
    cells = []
    for level in LEVELS:
        at = result["levels"][level_key(level)]
        low, high = at["blind_interval"]
        cells += [f"{at['oracle']:,}", f"{at['blind_median']:,.0f} [{low:,.0f}-{high:,.0f}]"]
    return f"| `{name}` | {' | '.join(cells)} |"


def render_informed_row(name: str, result: dict[str, Any]) -> str:
    """The informed order's row as docs/benchmarks.md shows it: its leave-one-out error, then epochs to 99% per
    width."""
    cells = [f"{epochs[level_key(0.99)]:,}" for epochs in result["widths"].values()]
    return f"| `{name}` | {result['leave_one_out_rmse']:.2f} | {' | '.join(cells)} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", required=True, type=Path)
    parser.add_argument("--validation-images", type=int, default=None, help="images each top-1 was measured on")
    parser.add_argument(
        "--informed",
        action="store_true",
        help="order by a leave-one-out model of the rest of the table instead (no images needed)",
    )
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    name = Path(args.table).name.removesuffix(".gz").removesuffix(".csv")
    try:
        if args.draws < 1:
            raise TableError(f"--draws must be >= 1, not {args.draws}")
        if not args.informed and args.validation_images is None:
            raise TableError("--validation-images is required (or --informed)")
        table = load_table(args.table)
        if args.informed:
            result = informed_order(table, args.draws, args.seed)
        else:
            result = blind_oracle(table, args.validation_images, args.draws, args.seed)
    except TableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    arguments = sys.argv[1:] if argv is None else argv
    result.update(table=str(args.table), provenance=provenance(),
                  command=shlex.join(["python", "-m", "benchmarks.blind_oracle", *arguments]))  # fmt: skip
    if args.informed:
        print("| table | its model's error (points) | 99%, sd x " + " | 99%, sd x ".join(result["widths"]) + " |")
        print("|---|---|" + "---|" * len(result["widths"]))
        print(render_informed_row(name, result))
    else:
        print("| table | oracle 95% | blind oracle 95% | oracle 99% | blind oracle 99% |\n|---|---|---|---|---|")
        print(render_row(name, result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(args.json, json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
