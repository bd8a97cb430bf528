"""Issue 46: Syne Tune's MOASHA in our comparison, with its two faults worked around: the non-dominated
priority given as a rank per trial (upstream's argsort read as priorities stops trials at random), and
numpy's global generator seeded per seed (its suggest draws from it). Skipped without Syne Tune."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import search_quality, search_quality_syne
from benchmarks.search_quality_syne import ranks_of


def test_ranks_are_the_inverse_of_the_order():
    order = np.array([4, 2, 0, 1, 3])  # item 4 best, then 2, ...
    assert ranks_of(order).tolist() == [2, 3, 1, 4, 0]
    assert ranks_of(order)[order].tolist() == list(range(5))


def test_the_comparison_names_the_fixed_and_the_upstream_moasha():
    assert {"syne-moasha", "syne-moasha-upstream"} <= set(search_quality.DEFAULT_METHODS)
    assert search_quality.SYNE_METHODS == search_quality_syne.METHODS


def test_the_rank_priority_promotes_what_dominates_its_rung_and_upstream_does_not():
    pytest.importorskip("syne_tune")
    from syne_tune.optimizer.schedulers.multiobjective.multiobjective_priority import NonDominatedPriority

    from benchmarks.syne_moasha_bug import decisions, suggestions

    assert decisions(search_quality_syne.rank_priority()) == ("CONTINUE", "STOP")
    assert decisions(NonDominatedPriority()) == ("STOP", "CONTINUE")  # the upstream fault, as reproduced
    objectives = np.array([[3.0, 3.0], [2.0, 4.0], [4.0, 2.0], [5.0, 5.0], [1.0, 1.0]])
    upstream = NonDominatedPriority()(objectives)
    assert search_quality_syne.rank_priority()(objectives).tolist() == ranks_of(upstream).tolist()
    first, second = suggestions(seed_numpy=True)
    assert first == second


def test_a_syne_moasha_replay_is_the_same_on_the_same_seed(tmp_path):
    pytest.importorskip("syne_tune")
    from benchmarks.front_quality import TrueFront
    from tests.test_search_quality import _unseen_table

    table = search_quality.load_table(_unseen_table(tmp_path / "t.csv.gz"))
    truth = TrueFront(table, {"top1": "max", "flops": "min"})
    runs = [search_quality_syne.replay_seeds(table, truth, "syne-moasha", 2, 2, 40) for _ in range(2)]
    assert [r.completed for r in runs[0]] == [r.completed for r in runs[1]]  # the same trials, in the same order
