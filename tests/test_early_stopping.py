"""Early stopping that keeps the front (issue 32, item 3): MO-ASHA's rule, and which scheduler a spec gets."""

from __future__ import annotations

import pickle
import random
from types import SimpleNamespace

import numpy as np
import pytest

from harness.search.propose.searcher import ArchsearchSearch
from harness.search.result_keys import RETRY_KEY
from harness.search.session import SearchSession
from harness.search.simulate import SimulatedTrial
from harness.search.stop.early_stopping import ParetoASHA, RungDecider, SingleASHA, make_scheduler, promotion_order
from harness.search.stop.rank_gate import RankGatedDecider, architecture_key
from search_space.spec import TRAINING_FIELDS, SearchSpec, rung_epochs


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
    scheduler = make_scheduler(_spec(), "es")
    assert isinstance(scheduler, ParetoASHA) and scheduler.decider.rungs == [1, 2, 4]
    assert isinstance(scheduler.decider, RankGatedDecider)  # the default: behind the rank gate
    assert list(scheduler.decider.inner.objectives) == ["top1", "flops"] and scheduler.last_epoch == 8
    plain = make_scheduler(_spec(rank_gate=False), "es")
    assert isinstance(plain.decider, RungDecider) and list(plain.decider.objectives) == ["top1", "flops"]
    assert capsys.readouterr().err == ""
    assert isinstance(make_scheduler(_spec(mode="single"), "es"), SingleASHA)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "prunes the cheap end of the front" in lines[0]
    one = SearchSpec.model_validate({**_spec().model_dump(mode="json"), "objectives": {"top1": "max"}})
    assert isinstance(make_scheduler(one, "es"), SingleASHA) and capsys.readouterr().err == ""


def test_a_pruned_configuration_run_again_is_never_judged_at_a_rung():
    scheduler = make_scheduler(_spec(rank_gate=False), "es")
    scheduler.on_trial_result(None, SimulatedTrial("a", {}), {"training_iteration": 1, "top1": 90.0, "flops": 1})
    retry = SimulatedTrial("b", {RETRY_KEY: 7})
    result = {"training_iteration": 1, "top1": 10.0, "flops": 5}
    assert scheduler.on_trial_result(None, retry, result) == "CONTINUE"
    assert scheduler.on_trial_result(None, SimulatedTrial("c", {}), result) == "STOP"
    assert set(scheduler.decider.recorded[1]) == {"a", "c"}


def _run_to_the_end(scheduler, trial_id: str, params: dict, curve: list[float], flops: float = 1.0) -> str:
    """One trial through the scheduler as Tune drives it: a result per epoch, on_trial_complete at its end."""
    trial = SimulatedTrial(trial_id, dict(params))
    for epoch, top1 in enumerate(curve, start=1):
        result = {"training_iteration": epoch, "top1": top1, "flops": flops}
        if scheduler.on_trial_result(None, trial, result) == "STOP":
            return "STOP"
    scheduler.on_trial_complete(None, trial, result)
    return "COMPLETED"


@pytest.mark.parametrize("transfer", ["holds", "reversed"])
def test_a_rung_prunes_only_once_its_measured_rank_transfer_holds(transfer):
    """Issue 60: before 5 completed trials a rung stops nothing; after, it prunes where epoch 1's order is the
    end's (tau 1) and lets the laggard on where it is reversed (tau -1), saying so once per change."""
    said: list[str] = []
    spec = _spec()
    speaker = SimpleNamespace(say=said.append)  # what the gate needs of a session
    scheduler = make_scheduler(spec.model_copy(update={"training": {"epochs": 3}}), "es", speaker)
    for k in range(6):  # epoch 1 ranks them as the end does, or in reverse
        first = 10.0 + k if transfer == "holds" else 20.0 - k
        assert _run_to_the_end(scheduler, f"t{k}", {"depth": k}, [first, first + 5, 50.0 + k]) == "COMPLETED"
    # the fifth completed above measured nothing before it: a weak newcomer now meets a measured rung
    transfer_at_1 = scheduler.decider.transfer(1)
    assert transfer_at_1.trials == 6 and transfer_at_1.tau.value == pytest.approx(1.0 if transfer == "holds" else -1.0)
    verdict = _run_to_the_end(scheduler, "weak", {"depth": 99}, [0.0, 1.0, 2.0])
    assert verdict == ("STOP" if transfer == "holds" else "COMPLETED")
    if transfer == "holds":  # each trial led at epoch 1 until the weak one, which the measured rung stops
        assert len(said) == 1 and "rung 1: pruning (tau 1.00 [1.00, 1.00] over 6 completed trials" in said[0]
    else:  # each trial trailed at epoch 1: let on, first unmeasured, then measured and closed
        assert "rung 1: not pruning yet" in said[0] and any("rung 1: not pruning (tau -1.00" in line for line in said)
    assert all(line.startswith("[es] early stopping, rung ") for line in said)
    assert any(line.startswith("rung 1:") for line in scheduler.decider.describe())


def test_twins_never_rank_each_other_at_a_rung():
    """The same architecture at another learning rate is not among those a trial is ranked against."""
    scheduler = make_scheduler(_spec(rank_gate=False), "es")
    decider = scheduler.decider
    assert decider.observe("a", 1, {"top1": 90.0, "flops": 1}, group=("arch", 1))
    # b, a's twin, trails it: ranked against nobody else, it goes on
    assert decider.observe("b", 1, {"top1": 10.0, "flops": 1}, group=("arch", 1))
    # c, another architecture as weak as b, is ranked against a and b: it stops
    assert not decider.observe("c", 1, {"top1": 10.0, "flops": 1}, group=("arch", 2))
    assert architecture_key({"depth": 4, "lr": 1e-3}, TRAINING_FIELDS) == architecture_key(
        {"depth": 4, "lr": 2e-3}, TRAINING_FIELDS
    ) != architecture_key({"depth": 6, "lr": 1e-3}, TRAINING_FIELDS)


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
        scheduler = make_scheduler(spec, "es")
        assert sorted(scheduler.decider.recorded) == expected, mode
        rule = rung_rule(spec.model_dump(mode="json"))
        assert list(rule.rungs) == expected and sorted(rule.decider(rule.rungs).recorded) == expected


def test_a_gated_scheduler_pickles_without_the_session_and_binds_the_drivers_again(tmp_path):
    """Tune pickles the scheduler with its experiment state: the gate's announcer leaves the driver's session
    behind (a SearchSession is never pickled: every search with early stopping failed on it) and is bound
    to the driver's again when unpickled within it."""
    session = SearchSession("es")
    scheduler = make_scheduler(_spec(), "es", session)
    restored = pickle.loads(pickle.dumps(scheduler))
    assert restored.decider.on_change.session is None and restored.decider.on_change.study == "es"
    with session.active():
        bound = pickle.loads(pickle.dumps(scheduler))
    assert bound.decider.on_change.session is session


def test_the_searcher_ranks_numpy_numbers_as_numbers_as_the_rungs_do():
    """The sibling of the rung deciders' fault: a result's ``np.int64`` or ``np.float32`` was read as missing (the
    worst value) by the searcher's ranking of pruned configurations too."""
    searcher = SimpleNamespace(metric=["top1", "flops"], mode=["max", "min"])
    assert ArchsearchSearch._minimised(searcher, {"top1": np.float32(7), "flops": np.int64(5)}) == [-7.0, 5.0]
    assert ArchsearchSearch._minimised(searcher, {"top1": True, "flops": None}) == [np.inf, np.inf]


@pytest.mark.parametrize("mode", ["pareto", "single"])
@pytest.mark.parametrize("seed", range(3))
def test_would_stop_is_the_verdict_the_last_arrival_gets_and_records_nothing(mode, seed):
    """What the rank gate asks of the rule (``would_stop``) is what ``observe`` says to the trial arriving last
    at the rung, twins left out, for MO-ASHA and ASHA's cutoff alike; asking changes nothing recorded."""
    from dashboards.fidelity import PercentileDecider

    def fresh():
        if mode == "pareto":
            return RungDecider({"top1": "max", "flops": "min"}, [1], 3)
        return PercentileDecider("top1", "max", [1], 3)

    rng = np.random.default_rng(seed)
    scattered = {f"t{i}": {"top1": float(rng.uniform(10, 90)), "flops": float(rng.integers(1, 6))} for i in range(15)}
    # all on one front (more top-1 for more FLOPs): every verdict is the epsilon-net's, not the rank's
    front = {f"f{i}": {"top1": 10.0 + 5 * i + float(rng.uniform(0, 1)), "flops": 1.0 + i} for i in range(15)}
    for values in (scattered, front):
        groups = {trial: ("arch", int(rng.integers(0, 6))) for trial in values}
        asked = fresh()
        for trial in values:
            asked.observe(trial, 1, values[trial], groups[trial])
        before = {rung: dict(recorded) for rung, recorded in asked.recorded.items()}
        for last in values:
            replayed = fresh()
            for trial in values:
                if trial != last:
                    replayed.observe(trial, 1, values[trial], groups[trial])
            verdict = not replayed.observe(last, 1, values[last], groups[last])
            assert asked.would_stop(last, values, groups) == verdict
        assert {rung: dict(recorded) for rung, recorded in asked.recorded.items()} == before


def test_a_rung_whose_tau_holds_does_not_prune_where_the_rule_would_stop_a_member_of_the_front():
    """Issue 60, item 3, on a held-out table: tau is taken on top-1 alone and the cost explains most of it, while
    MO-ASHA ranks a trial against others of its cost. Eight trials at one cost rank at epoch 1 as at the end; at
    a cheaper cost ``slow`` trails three others at epoch 1 and ends ahead of them (a smaller learning rate): tau
    is 0.91 [lower bound >= 0.6], but the rule (reduction factor 2) would stop ``slow``, a member of the
    completed trials' front, so the rung does not prune, and says why. Without ``slow`` the same rung prunes."""
    for with_slow in (True, False):
        said: list[str] = []
        scheduler = make_scheduler(
            _spec().model_copy(update={"training": {"epochs": 3}}), "es", SimpleNamespace(say=said.append)
        )
        cheap = [("fast", 8.0, 48.0), ("fast2", 7.0, 47.0), ("fast3", 6.0, 46.0)] + ([("slow", 5.0, 49.0)] * with_slow)
        for k, (name, first, last) in enumerate(cheap):  # first: no rung is measured yet, so each runs to its end
            assert _run_to_the_end(scheduler, name, {"depth": 100 + k}, [first, first + 1, last], 0.5) == "COMPLETED"
        for k in range(8):  # each the best yet at its cost at every epoch: nothing would stop it
            assert _run_to_the_end(scheduler, f"t{k}", {"depth": k}, [10.0 + k, 30.0 + k, 50.0 + k]) == "COMPLETED"
        transfer = scheduler.decider.transfer(1)
        assert transfer.tau_holds and transfer.front == 2
        verdict = _run_to_the_end(scheduler, "weak", {"depth": 99}, [0.0, 1.0, 2.0])
        if with_slow:
            assert (transfer.front_stopped, transfer.open, verdict) == (1, False, "COMPLETED")
            assert any("rung 1: not pruning (tau 0.91" in line and "but it would stop 1 of their 2 front members"
                       in line for line in said)  # fmt: skip
        else:
            assert (transfer.front_stopped, transfer.open, verdict) == (0, True, "STOP")
            assert any("rung 1: pruning (tau" in line and "keeps all 2 of their front members" in line for line in said)
