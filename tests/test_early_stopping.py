"""Early stopping that keeps the front (issue 32, item 3): MO-ASHA's rule, and which scheduler a spec gets."""

from __future__ import annotations

import random

import numpy as np
import pytest

from harness.search.result_keys import RETRY_KEY
from harness.search.simulate import SimulatedTrial
from harness.search.stop.early_stopping import ParetoASHA, RungDecider, SingleASHA, make_scheduler, promotion_order
from search_space.spec import SearchSpec, rung_epochs


def test_rungs_are_grace_times_powers_of_the_reduction_factor_below_the_budget():
    assert rung_epochs(1, 2, 8) == [1, 2, 4]
    assert rung_epochs(1, 3, 10) == [1, 3, 9]
    assert rung_epochs(2, 2, 2) == []


def test_promotion_order_puts_every_non_dominated_point_before_any_dominated_one_extremes_first():
    # minimised columns: (-top1, flops)
    front = [(-90, 10), (-80, 5), (-60, 2), (-40, 1), (-85, 7)]
    dominated = [(-70, 9), (-30, 3), (-50, 8)]
    order = list(promotion_order(np.array(front + dominated)))
    assert set(order[:5]) == set(range(5)) and set(order[5:]) == {5, 6, 7}
    assert order[0] == 0 and order[1] == 3  # the best on the first objective, then the farthest: the cheapest


FRONT = [(f"f{i}", {"top1": 40 + 2.5 * i, "flops": 1 + i}) for i in range(12)]  # accuracy rises with FLOPs
DOMINATED = [(f"d{i}", {"top1": 30 + 2.5 * i, "flops": 3 + i}) for i in range(12)]  # each behind a front member


def _kept(decider: RungDecider, arrivals) -> set[str]:
    return {trial for trial, values in arrivals if decider.observe(trial, 1, values)}


@pytest.mark.parametrize("seed", range(3))
def test_pareto_keeps_the_cheap_end_of_the_front_that_single_metric_asha_prunes(seed):
    """The rung fills with expensive models first (in any order); then the cheapest front members
    arrive. ASHA on top-1 alone stops every one of them; MO-ASHA promotes them: nothing dominates them."""
    early = FRONT[3:] + DOMINATED
    random.Random(seed).shuffle(early)
    arrivals = early + FRONT[:3]
    single = _kept(RungDecider({"top1": "max"}, [1], 2), arrivals)
    pareto = _kept(RungDecider({"top1": "max", "flops": "min"}, [1], 2), arrivals)
    assert not {"f0", "f1", "f2"} & single
    assert "f0" in pareto  # the cheapest model: the front's extreme, taken second by the epsilon-net


def test_pareto_stops_what_the_front_dominates_once_the_rung_holds_the_front():
    pareto = _kept(RungDecider({"top1": "max", "flops": "min"}, [1], 2), FRONT + DOMINATED)
    assert {t for t in pareto if t.startswith("d")} == set()
    assert {t for t in pareto if t.startswith("f")} == {t for t, _ in FRONT}  # async: early arrivals go on


def test_a_trial_is_judged_at_rung_epochs_only_and_a_missing_value_is_the_worst():
    decider = RungDecider({"top1": "max", "flops": "min"}, [1, 2], 2)
    assert decider.observe("a", 1, {"top1": 50.0, "flops": 5})
    assert decider.observe("a", 3, {"top1": 0.0, "flops": 5})  # not a rung: goes on
    assert not decider.observe("b", 1, {"top1": float("nan"), "flops": 5})  # NaN top-1 is dominated


def _spec(**early_stopping) -> SearchSpec:
    return SearchSpec.model_validate(
        {
            "name": "es",
            "family": "cait",
            "objectives": {"top1": "max", "flops": "min"},
            "training": {"epochs": 8},
            "search": {"early_stopping": {"grace_period": 1, "reduction_factor": 2, **early_stopping}},
        }
    )


def test_a_multi_objective_spec_gets_mo_asha_and_single_mode_warns_in_one_line(capsys):
    scheduler = make_scheduler(_spec())
    assert isinstance(scheduler, ParetoASHA) and scheduler.decider.rungs == [1, 2, 4]
    assert list(scheduler.decider.objectives) == ["top1", "flops"]
    assert capsys.readouterr().err == ""
    assert isinstance(make_scheduler(_spec(mode="single")), SingleASHA)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "prunes the cheap end of the front" in lines[0]
    one = SearchSpec.model_validate({**_spec().model_dump(mode="json"), "objectives": {"top1": "max"}})
    assert isinstance(make_scheduler(one), SingleASHA) and capsys.readouterr().err == ""


def test_a_pruned_configuration_run_again_is_never_judged_at_a_rung():
    scheduler = make_scheduler(_spec())
    scheduler.on_trial_result(None, SimulatedTrial("a", {}), {"training_iteration": 1, "top1": 90.0, "flops": 1})
    retry = SimulatedTrial("b", {RETRY_KEY: 7})
    result = {"training_iteration": 1, "top1": 10.0, "flops": 5}
    assert scheduler.on_trial_result(None, retry, result) == "CONTINUE"
    assert scheduler.on_trial_result(None, SimulatedTrial("c", {}), result) == "STOP"
    assert set(scheduler.decider.recorded[1]) == {"a", "c"}


@pytest.mark.parametrize(
    ("grace", "factor", "epochs"), [(1, 3.0, 10), (1, 2.0, 8), (2, 2.5, 30), (3, 3.0, 3), (1, 1.5, 12)]
)
def test_one_rung_schedule_for_both_schedulers_the_replay_and_fidelity(grace, factor, epochs):
    """Issue 58 (2): Ray's ASHA (single mode), fidelity's asha_milestones and rung_epochs were three
    schedules (int vs round, the last epoch in or out). Now EarlyStopping.rungs is the one."""
    from harness.search.stop.replay import rung_rule

    for mode in ("pareto", "single"):
        spec = _spec(mode=mode)
        es = spec.search.early_stopping.model_copy(update={"grace_period": grace, "reduction_factor": factor})
        spec = spec.model_copy(update={"search": spec.search.model_copy(update={"early_stopping": es})})
        spec = spec.model_copy(update={"training": {**spec.training, "epochs": epochs}})
        expected = es.rungs(epochs)
        assert expected == rung_epochs(grace, factor, epochs) and all(rung < epochs for rung in expected)
        scheduler = make_scheduler(spec)
        assert sorted(scheduler.decider.recorded) == expected, mode
        rule = rung_rule(spec.model_dump(mode="json"))
        assert list(rule.rungs) == expected and sorted(rule.decider(rule.rungs).recorded) == expected
