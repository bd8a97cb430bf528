"""Syne Tune's methods on the same table and seeds as ``benchmarks.search_quality`` (side by side).

Syne Tune (``pip install 'archsearch[synetune]'``) ships MO-ASHA, multi-objective regularized
evolution and random search, and a simulator backend that replays a tabulated blackbox in simulated
time. The table becomes a ``BlackboxTabular`` (objectives: error = 100 - top-1, the table's cost
objectives, and the elapsed time of each epoch), run with ``UserBlackboxBackend`` and
``SimulatorCallback`` on W workers until the same budget of epochs (``max_num_evaluations``). The
hypervolume is then computed exactly as for our methods, from the configurations that ran every
epoch, in the order Syne Tune reported their last epoch.

Methods: ``syne-random`` (random search, its multi-objective searcher), ``syne-moasha`` (MOASHA with
its defaults, grace period 1 and reduction factor 3, and the non-dominated priority as a rank per
trial: :class:`RankPriority`), ``syne-moasha-upstream`` (the same with Syne Tune 0.16's own
``NonDominatedPriority``, whose output MOASHA misreads: see below), ``syne-moreg``
(MultiObjectiveRegularizedEvolution).

Two faults of Syne Tune 0.16 that this wrapper works around (``benchmarks/syne_moasha_bug.py`` shows
both in a few lines):

* ``NonDominatedPriority`` returns ``nondominated_sort``'s order: the trial *indices* best first (an
  argsort). MOASHA's ``Bracket.on_result`` reads that array as one priority per trial (lower goes
  first) and stops the newest trial when ``priorities[-1]``, the index of the *worst* trial, ranks
  beyond ``1 / reduction_factor``: the decision is about another trial's position, close to random (a
  trial that dominates its whole rung can be stopped, one dominated by all of it kept).
  :class:`RankPriority` returns each trial's rank instead (the inverse permutation).
* ``MOASHA.suggest`` samples its configurations with the config space's ``sample()`` and no random
  state, i.e. from numpy's global generator, which ``random_seed`` does not seed (and ``on_trial_add``
  draws its bracket from it too): the same seed gave other trials on each run. Every Syne Tune replay
  here seeds numpy's global generator with the seed first (:func:`seeded`), the upstream method too, so
  it differs from ``syne-moasha`` in the priority alone.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.front_quality import Replay, TrueFront
from benchmarks.table import Table, TableError

METHODS = ("syne-random", "syne-moasha", "syne-moasha-upstream", "syne-moreg")


def rank_priority():
    """Syne Tune's non-dominated priority (epsilon-net within each front, the first objective preferred)
    as what MOASHA's bracket reads: a rank per trial, 0 the best (see the module docstring)."""
    from syne_tune.optimizer.schedulers.multiobjective.multiobjective_priority import NonDominatedPriority

    class RankPriority(NonDominatedPriority):
        def priority_unsafe(self, objectives: np.ndarray) -> np.ndarray:
            return ranks_of(super().priority_unsafe(objectives))

    return RankPriority()


def ranks_of(order: np.ndarray) -> np.ndarray:
    """The inverse of a permutation: ``order[k]`` is the index of the k-th best item -> the rank of each item."""
    order = np.asarray(order, dtype=int)
    ranks = np.empty(len(order), dtype=int)
    ranks[order] = np.arange(len(order))
    return ranks


def seeded(seed: int) -> None:
    """Seed numpy's global generator, which MOASHA's suggest and bracket choice draw from (module docstring)."""
    np.random.seed(seed)


def blackbox(table: Table, objectives: dict[str, str]):
    """The table as Syne Tune's ``BlackboxTabular``: one seed, E fidelities (epochs)."""
    from syne_tune.blackbox_repository.blackbox_tabular import BlackboxTabular
    from syne_tune.config_space import choice, randint

    domains = table.domains()
    floats = {name for name, values in domains.items() if any(isinstance(v, float) for v in values)}
    hyperparameters = pd.DataFrame([{k: _syne_value(v, k in floats) for k, v in p.items()} for p in table.params])
    space = {name: choice([_syne_value(v, name in floats) for v in values]) for name, values in domains.items()}
    names = ["error", *[n for n in objectives if n != "top1"], "elapsed_time"]
    evaluations = np.zeros((len(table), 1, table.epochs, len(names)))
    evaluations[:, 0, :, 0] = 100.0 - table.top1
    for k, name in enumerate(names[1:-1], start=1):
        sign = 1.0 if objectives[name] == "min" else -1.0  # Syne Tune minimises every metric here
        evaluations[:, 0, :, k] = sign * table.cost[name][:, None]
    evaluations[:, 0, :, -1] = np.cumsum(table.epoch_s, axis=1)
    return BlackboxTabular(
        hyperparameters=hyperparameters,
        configuration_space=space,
        fidelity_space={"epoch": randint(1, table.epochs)},
        objectives_evaluations=evaluations,
        objectives_names=names,
    ), names


def _syne_value(value: Any, as_float: bool) -> Any:
    """A value as Syne Tune's categorical wants it: one type per parameter (0.5 and 2, not 2.0: floats)."""
    if isinstance(value, bool):
        return str(value)
    return float(value) if as_float else value


def _scheduler(method: str, space: dict, metrics: list[str], seed: int, epochs: int):
    from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA
    from syne_tune.optimizer.schedulers.multiobjective.multi_objective_regularized_evolution import (
        MultiObjectiveRegularizedEvolution,
    )
    from syne_tune.optimizer.schedulers.single_fidelity_scheduler import SingleFidelityScheduler

    if method == "syne-random":  # its factory's multi-objective random searcher (RandomSearch takes one metric)
        return SingleFidelityScheduler(space, metrics=metrics, do_minimize=True, searcher="random_search",
                                       random_seed=seed)  # fmt: skip
    if method in ("syne-moasha", "syne-moasha-upstream"):
        priority = rank_priority() if method == "syne-moasha" else None  # None: its NonDominatedPriority
        return MOASHA(space, metrics=metrics, do_minimize=True, time_attr="epoch", max_t=epochs, random_seed=seed,
                      multiobjective_priority=priority)  # fmt: skip
    if method == "syne-moreg":
        searcher = MultiObjectiveRegularizedEvolution(space, random_seed=seed)
        return SingleFidelityScheduler(space, metrics=metrics, do_minimize=True, searcher=searcher, random_seed=seed)
    raise ValueError(f"unknown Syne Tune method {method!r}; use {', '.join(METHODS)}")


def replay_seeds(table: Table, truth: TrueFront, method: str, seeds: int, workers: int, budget: int) -> list[Replay]:
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend

    size = int(np.prod([len(values) for values in table.domains().values()]))
    if size != len(table):
        raise TableError(
            f"{table.path}: Syne Tune's tabular simulator needs every combination of the parameters' values "
            f"({size}); the table holds {len(table)}"
        )
    for name in ("syne_tune", "syne_tune.tuner"):
        logging.getLogger(name).setLevel(logging.ERROR)
    box, names = blackbox(table, truth.objectives)
    metrics = names[:-1]
    space = {**box.configuration_space, "epoch": table.epochs}  # the backend runs each trial to the last epoch
    runs = []
    for seed in range(seeds):
        seeded(seed)
        with tempfile.TemporaryDirectory(prefix="syne-") as directory:
            backend = UserBlackboxBackend(blackbox=box, elapsed_time_attr="elapsed_time", max_resource_attr="epoch")
            recorder = SimulatorCallback()
            tuner = Tuner(
                trial_backend=backend,
                scheduler=_scheduler(method, space, metrics, seed, table.epochs),
                stop_criterion=StoppingCriterion(max_num_evaluations=budget),
                n_workers=workers,
                sleep_time=0,
                callbacks=[recorder],
                results_update_interval=600,
                print_update_interval=10**9,
                tuner_name=f"{method}-{seed}",
                save_tuner=False,
                trial_backend_path=str(Path(directory)),
            )
            with contextlib.redirect_stdout(io.StringIO()):  # its banner lines, once per run
                tuner.run()
            runs.append(_as_replay(table, truth, recorder.dataframe(), budget))
    return runs


def _as_replay(table: Table, truth: TrueFront, results: pd.DataFrame, budget: int) -> Replay:
    """Our per-run record from Syne Tune's results, in the order it reported them."""
    results = results.sort_values("st_tuner_time", kind="stable").head(budget)
    index_of = {}
    for trial_id, group in results.groupby("trial_id"):
        first = group.iloc[0]
        index_of[trial_id] = table.index_of({name: first[f"config_{name}"] for name in table.param_names})
    run = Replay()
    for row in results.itertuples(index=False):
        run.spent += 1
        if int(row.epoch) == table.epochs and index_of[row.trial_id] is not None:
            run.complete(index_of[row.trial_id], run.spent, float(row.st_tuner_time))  # its simulated clock
    last = results.groupby("trial_id")["epoch"].max()
    run.pruned = [index_of[t] for t, epoch in last.items() if epoch < table.epochs and index_of[t] is not None]
    return run
