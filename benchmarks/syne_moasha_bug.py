"""Syne Tune 0.16's MOASHA misreads its own priority, and samples from an unseeded generator: a reproduction.

    python -m benchmarks.syne_moasha_bug

1. ``NonDominatedPriority`` returns the trials' *indices* best first (an argsort); MOASHA's bracket reads
   the array as one priority per trial and judges the newest trial by ``priorities[-1]``, which is the
   index of the worst trial. A trial that dominates every other one at its rung is stopped; one that
   most of its rung dominates goes on. A priority returning ranks (the inverse permutation) decides right.
2. ``MOASHA(random_seed=...)`` seeds its own generator, but ``suggest`` samples from numpy's global
   one: two schedulers built with the same seed suggest different configurations, unless numpy's
   global generator is seeded first.

``benchmarks.search_quality_syne`` works around both (its ``syne-moasha``; ``syne-moasha-upstream`` keeps
the first fault, for comparison).
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.search_quality_syne import rank_priority, ranks_of


def decisions(priority) -> tuple[str, str]:
    """Two rungs of 4 trials (two objectives, both minimised), each then judged on a 5th trial by a fresh
    bracket (grace 1, reduction factor 3: the first third goes on): one that dominates its whole rung,
    and one that 3 of its 4 rung mates dominate."""
    from syne_tune.optimizer.schedulers.asha import Bracket

    cases = [
        ({"a": [3.0, 3.0], "b": [2.0, 4.0], "c": [4.0, 2.0], "d": [5.0, 5.0]}, [1.0, 1.0]),  # newcomer: best
        ({"a": [9.0, 9.0], "b": [2.0, 4.0], "c": [4.0, 2.0], "d": [3.0, 3.0]}, [6.0, 6.0]),  # 4th of 5
    ]
    said = []
    for rung, newcomer in cases:
        bracket = Bracket(1, 9, 3, 0, priority)
        for trial, values in rung.items():
            bracket.on_result(trial, 1, {"error": values[0], "cost": values[1]})
        said.append(bracket.on_result("new", 1, {"error": newcomer[0], "cost": newcomer[1]}))
    return said[0], said[1]


def suggestions(seed_numpy: bool) -> list[dict]:
    """The first configuration of two MOASHA schedulers built with random_seed=0."""
    from syne_tune.config_space import choice
    from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA

    space = {"x": choice(list(range(100))), "y": choice(list(range(100)))}
    configs = []
    for _ in range(2):
        if seed_numpy:
            np.random.seed(0)
        scheduler = MOASHA(space, metrics=["error", "cost"], max_t=9, random_seed=0)
        configs.append(scheduler.suggest().config)
    return configs


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    from syne_tune.optimizer.schedulers.multiobjective.multiobjective_priority import NonDominatedPriority

    objectives = np.array([[3.0, 3.0], [2.0, 4.0], [4.0, 2.0], [5.0, 5.0], [1.0, 1.0]])  # the last dominates all
    order = NonDominatedPriority()(objectives)
    print(f"objectives (minimised), the last trial dominating every other: {objectives.tolist()}")
    print(f"NonDominatedPriority returns {order.tolist()}: trial indices best first (an argsort);")
    print(f"  MOASHA reads it as the priority of each trial: the newest trial's 'priority' is {order[-1]}, "
          f"the index of the worst trial; its rank would be {ranks_of(order)[-1]}")  # fmt: skip
    best, worst = decisions(NonDominatedPriority())
    print(f"upstream bracket: a newcomer dominating its rung -> {best}; one 3 of its 4 rung mates dominate -> {worst}")
    best, worst = decisions(rank_priority())
    print(f"rank priority:    a newcomer dominating its rung -> {best}; one 3 of its 4 rung mates dominate -> {worst}")
    first, second = suggestions(seed_numpy=False)
    print(f"MOASHA(random_seed=0).suggest() twice, numpy unseeded: {first} vs {second}")
    first, second = suggestions(seed_numpy=True)
    print(f"the same with np.random.seed(0) before each:           {first} vs {second}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
