"""Issue 46, part 2: does a cheap signal predict the expensive one? (``archsearch fidelity``, ``Study.fidelity``,
the report's panel.)

Tiny studies written straight into a store with known curves; every expected number is computed here
independently of :mod:`dashboards.fidelity`: Kendall's tau-b by counting pairs, the bootstrap by looping over
the same seeded resamples, the rule's decisions from its closed form (MO-ASHA with equal costs is ASHA on the
metric: kept iff fewer than ceil(k/rf) earlier-or-equal trials rank above) or from Ray's own ASHA bracket, the
hypervolume by a 2-D staircase."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from ray.tune.schedulers.async_hyperband import _Bracket

from benchmarks.front_quality import nadir_reference as benchmark_nadir
from dashboards import fidelity, load_study
from harness.cli import main
from harness.search.stop.early_stopping import RungDecider
from harness.search.stop.replay import rung_rule
from harness.store import Store

ROOT = Path(__file__).parents[1]
BASE_SPEC = yaml.safe_load((ROOT / "search_space/presets/quickstart.yaml").read_text())
OBJECTIVES = {"top1": "max", "flops": "min"}


def _spec(name: str, epochs: int, early_stopping: dict | None = None) -> dict:
    spec = dict(BASE_SPEC, name=name, training={"epochs": epochs, "lr": 2e-3})
    spec["search"] = dict(BASE_SPEC["search"], early_stopping=early_stopping)
    return spec


def _tau_b(x, y) -> float:
    """Kendall's tau-b by counting pairs (no scipy)."""
    concordant = discordant = ties_x = ties_y = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            if dx == 0:
                ties_x += 1
            if dy == 0:
                ties_y += 1
            if dx * dy > 0:
                concordant += 1
            elif dx * dy < 0:
                discordant += 1
    pairs = n * (n - 1) / 2
    denominator = math.sqrt((pairs - ties_x) * (pairs - ties_y))
    return (concordant - discordant) / denominator if denominator else math.nan


def _percentile_interval(values) -> tuple[float, float]:
    finite = np.array([v for v in values if math.isfinite(v)])
    return float(np.percentile(finite, 2.5)), float(np.percentile(finite, 97.5))


# -- the maths ------------------------------------------------------------------------------------


def test_tau_and_rho_with_their_bootstrap_match_a_loop_over_the_same_resamples():
    """Ties in both variables, so tau-b's tie correction and the closed-form bootstrap are exercised."""
    x = np.array([1.0, 2.0, 2.0, 3.0, 5.0, 4.0, 7.0, 7.0, 6.0, 9.0])
    y = np.array([2.0, 1.0, 3.0, 3.0, 4.0, 6.0, 5.0, 8.0, 8.0, 9.0])
    tau, rho = fidelity.rank_correlations(x, y, resamples=300, seed=7)
    assert tau.value == pytest.approx(_tau_b(x, y), abs=1e-12)
    ranks = lambda v: np.array([np.mean([1 + k for k, w in enumerate(sorted(v)) if w == u]) for u in v])  # noqa: E731
    assert rho.value == pytest.approx(np.corrcoef(ranks(x), ranks(y))[0, 1], abs=1e-12)
    indices = np.random.default_rng(7).integers(0, len(x), size=(300, len(x)))
    taus = [_tau_b(x[i], y[i]) for i in indices]
    rhos = []
    for i in indices:
        rx, ry = ranks(x[i]), ranks(y[i])
        rhos.append(np.corrcoef(rx, ry)[0, 1] if rx.std() > 0 and ry.std() > 0 else math.nan)
    assert (tau.low, tau.high) == pytest.approx(_percentile_interval(taus), abs=1e-9)
    assert (rho.low, rho.high) == pytest.approx(_percentile_interval(rhos), abs=1e-9)
    assert tau.low < tau.value < tau.high


def test_the_large_sample_bootstrap_path_agrees_with_the_closed_form(monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.normal(size=40).round(1)
    y = x + rng.normal(size=40)
    closed = fidelity.rank_correlations(x, y, resamples=200)[0]
    monkeypatch.setattr(fidelity, "EXACT_BOOTSTRAP_TRIALS", 10)  # scipy per resample from 11 trials
    looped = fidelity.rank_correlations(x, y, resamples=200)[0]
    assert (closed.low, closed.high) == pytest.approx((looped.low, looped.high), abs=1e-9)


def test_the_reference_point_is_the_benchmarks_primary_one():
    front = np.array([[80.0, 3e6], [70.0, 2e6], [60.0, 1e6]])
    for directions in (["max", "min"], ["min", "max"]):
        assert fidelity.nadir_reference(front, directions).tolist() == benchmark_nadir(front, directions).tolist()
    one = np.array([[50.0, 2e6]])
    assert fidelity.nadir_reference(one, ["max", "min"]).tolist() == benchmark_nadir(one, ["max", "min"]).tolist()


def test_the_single_metric_rule_decides_as_rays_asha_bracket():
    """PercentileDecider against Ray's own ``_Bracket`` (grace 1, rf 3, max_t 9) on one stream of results."""
    rng = np.random.default_rng(0)
    ours = fidelity.PercentileDecider("top1", "max", [1, 3, 9], 3)
    ray = _Bracket(min_t=1, max_t=9, reduction_factor=3, s=0)
    assert sorted(m for m, _ in ray._rungs) == [1, 3, 9]
    decisions = 0
    for number in range(25):
        trial = SimpleNamespace(trial_id=str(number))
        for epoch in range(1, 9):
            value = float(rng.integers(0, 8))  # ties with the cutoff happen
            expected = ray.on_result(trial, epoch, value) == "CONTINUE"
            assert ours.observe(str(number), epoch, {"top1": value}) == expected, (number, epoch)
            decisions += 1
            if not expected:
                break
    assert decisions > 60


# -- one study ------------------------------------------------------------------------------------

FINALS = [50.0, 60.0, 70.0, 80.0, 90.0, 95.0]  # trial k's final top1; equal FLOPs: the front is trial 5 alone
EPOCH1 = [58.0, 57.0, 56.0, 55.0, 54.0, 10.0]  # reversed, trial 5 a slow starter: ranked last at epoch 1
EPOCH2 = [40.0, 45.0, 50.0, 52.0, 60.0, 55.0]  # nearly the end's order


def _within(store: Store, name: str = "s", early_stopping: dict | None = None, objectives=OBJECTIVES) -> None:
    """Six completed trials of three epochs (epoch 3 = the final value), plus a pruned one that must be ignored."""
    store.create_study(name, _spec(name, 3, early_stopping), objectives)
    for number, (final, one, two) in enumerate(zip(FINALS, EPOCH1, EPOCH2, strict=True)):
        store.finish_trial(
            name, number, status="completed",
            config={"model": {"depth": number}}, parameters={"sampled": {"depth": number}, "fixed": {}},
            measurement={"flops": 1e6, "params": 1000, "latency_ms": 1.0}, final={"top1": final},
            epochs=[{"epoch": 1, "top1": one}, {"epoch": 2, "top1": two}, {"epoch": 3, "top1": final}],
        )  # fmt: skip
    store.finish_trial(
        name, 6, status="pruned", config={"model": {"depth": 6}}, parameters={"sampled": {"depth": 6}, "fixed": {}},
        measurement={"flops": 1e6, "params": 1000}, final={"top1": 99.0}, epochs=[{"epoch": 1, "top1": 99.0}],
    )  # fmt: skip
    store.set_study_status(name, "completed")


def _mo_asha_kept(epoch: int, values: list[float], member: int, rf: float = 3.0) -> bool:
    """Whether MO-ASHA (the search's own ``RungDecider``, judging at ``epoch`` alone) lets ``member`` go on,
    fed here by hand: trials 0..member in number order, each with its top1 at ``epoch`` and its FLOPs."""
    decider = RungDecider(OBJECTIVES, [epoch], rf)
    goes_on = [decider.observe(str(k), epoch, {"top1": v, "flops": 1e6}) for k, v in enumerate(values)]
    return goes_on[member]


def test_one_study_per_epoch_tau_rho_front_kept_and_verdict(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _within(store, early_stopping={"grace_period": 1, "reduction_factor": 3})
        result = fidelity.study_fidelity(store, "s", rung_rule, resamples=400)
    assert result.metric == "top1" and result.completed == 6 and result.front_total == 1
    assert result.rule.mode == "pareto" and not result.rule.default and result.rule.rungs == (1,)
    by_epoch = {row.epoch: row for row in result.epochs}
    assert sorted(by_epoch) == [1, 2, 3]
    indices = np.random.default_rng(fidelity.SEED).integers(0, 6, size=(400, 6))
    for epoch, values in ((1, EPOCH1), (2, EPOCH2)):
        x, y = np.array(values), np.array(FINALS)
        row = by_epoch[epoch]
        assert row.trials == 6
        assert row.tau.value == pytest.approx(_tau_b(x, y))
        assert (row.tau.low, row.tau.high) == pytest.approx(_percentile_interval([_tau_b(x[i], y[i]) for i in indices]))
        assert row.front_kept == int(_mo_asha_kept(epoch, values, 5))  # the front is trial 5
    assert by_epoch[1].tau.value == pytest.approx(-1.0)  # every one of the 15 pairs discordant
    assert by_epoch[1].front_kept == 0  # last of six at epoch 1: no ranking keeps it among the first two
    assert by_epoch[3].front_kept is None and by_epoch[3].tau.value == pytest.approx(1.0)
    # its own rung is epoch 1, which ranks these six in reverse (tau -1 over the five before trial 5): the rank
    # gate (the default) does not prune there, so the rule keeps the front member; plain MO-ASHA stops it
    assert result.rule_kept == 1
    with Store.open(f"sqlite:///{tmp_path / 'plain.db'}") as store:
        _within(store, early_stopping={"grace_period": 1, "reduction_factor": 3, "rank_gate": False})
        assert fidelity.study_fidelity(store, "s", rung_rule, resamples=50).rule_kept == 0
    assert result.verdict.startswith(f"epoch-1 ranking is unreliable ({by_epoch[1].tau.text()})")
    if by_epoch[2].tau.low >= fidelity.TAU_RELIABLE and by_epoch[2].front_kept == 1:
        assert result.verdict.endswith(
            f"do not stop before epoch 2 ({by_epoch[2].tau.text()}; keeps 1/1 front members)"
        )
    else:
        assert result.verdict.endswith("no epoch before the last (3) is safe: do not stop early")


def test_a_study_without_early_stopping_replays_the_default_rule_and_says_so(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _within(store, early_stopping=None)
    with load_study("s", url) as study:
        result = study.fidelity(resamples=50)  # the rule found through the registered entry point
    assert result.rule.default and result.rule.mode == "pareto"
    assert "the default rule with early stopping on (the study ran without)" in " ".join(result.notes())
    assert list(result.frame()["epoch"]) == [1, 2, 3]
    expected = [int(_mo_asha_kept(e, v, 5)) for e, v in ((1, EPOCH1), (2, EPOCH2))]
    assert list(result.frame()["front_kept"].iloc[:2]) == expected


def test_mode_single_is_replayed_as_rays_asha(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _within(store, early_stopping={"grace_period": 1, "reduction_factor": 2, "mode": "single"})
        result = fidelity.study_fidelity(store, "s", rung_rule, resamples=0)
    assert result.rule.mode == "single" and result.rule.rungs == (1, 2)
    for epoch, values in ((1, EPOCH1), (2, EPOCH2)):
        bracket = _Bracket(min_t=epoch, max_t=epoch, reduction_factor=2, s=0)  # one milestone: this epoch
        go_on = [
            bracket.on_result(SimpleNamespace(trial_id=str(k)), epoch, v) == "CONTINUE" for k, v in enumerate(values)
        ]
        assert next(r for r in result.epochs if r.epoch == epoch).front_kept == int(go_on[5])


def test_an_epoch_with_fewer_than_five_trials_is_not_judged(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        store.create_study("few", _spec("few", 2), OBJECTIVES)
        for number in range(4):
            store.finish_trial(
                "few", number, status="completed", config={}, parameters={"sampled": {"depth": number}, "fixed": {}},
                measurement={"flops": 1e6 * (number + 1)}, final={"top1": 10.0 * number},
                epochs=[{"epoch": 1, "top1": 5.0 * number}, {"epoch": 2, "top1": 10.0 * number}],
            )  # fmt: skip
        result = fidelity.study_fidelity(store, "few", rung_rule, resamples=10)
    assert result.epochs == []
    assert result.verdict.startswith("too few completed trials to judge (4;")


def test_a_sample_of_the_completed_trials_beyond_max_trials_is_said(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _within(store)
        result = fidelity.study_fidelity(store, "s", rung_rule, resamples=10, max_trials=5)
    assert (result.completed, result.sampled_from) == (5, 6)
    assert "a seeded sample of 5 of 6" in result.notes()[0]


# -- two studies ----------------------------------------------------------------------------------

CHEAP = {0: 40.0, 1: 45.0, 2: 44.0, 3: 55.0, 4: 60.0, 5: 65.0, 6: 70.0, 7: 75.0}  # depth -> top1 (7: cheap only)
EXPENSIVE = {0: 60.0, 1: 58.0, 2: 70.0, 3: 72.0, 4: 71.0, 5: 85.0, 6: 90.0, 8: 99.0}  # depth 8: expensive only


def _flops(depth: int) -> float:
    return 1e6 * (1 + depth)


def _across(store: Store, cheap: str = "cheap", expensive: str = "expensive") -> None:
    for name, finals, epochs in ((cheap, CHEAP, 2), (expensive, EXPENSIVE, 8)):
        store.create_study(name, _spec(name, epochs), OBJECTIVES)
        for number, (depth, top1) in enumerate(finals.items()):
            store.finish_trial(
                name, number, status="completed", config={"model": {"depth": depth}},
                parameters={"sampled": {"depth": depth}, "fixed": {"lr": 0.002}},
                measurement={"flops": _flops(depth), "params": 1000}, final={"top1": top1},
                epochs=[{"epoch": epochs, "top1": top1}],
            )  # fmt: skip
        store.set_study_status(name, "completed")


def _front(points: dict[int, tuple[float, float]]) -> set[int]:
    """Non-dominated keys of {key: (top1 max, flops min)} by definition."""

    def dominates(a, b):
        return a[0] >= b[0] and a[1] <= b[1] and a != b

    return {k for k, p in points.items() if not any(dominates(q, p) for q in points.values())}


def _hv(points: list[tuple[float, float]], reference: tuple[float, float]) -> float:
    """2-D hypervolume of (max, min) points against ``reference``: a staircase by hand."""
    inside = sorted((p for p in points if p[0] > reference[0] and p[1] < reference[1]), key=lambda p: p[1])
    volume, best = 0.0, reference[0]
    for index, (top1, flops) in enumerate(inside):
        best = max(best, top1)
        right = inside[index + 1][1] if index + 1 < len(inside) else reference[1]
        volume += (best - reference[0]) * (right - flops)
    return volume


def _expected_overlap(cheap_keys, expensive_keys):
    cheap_front = _front({d: (CHEAP[d], _flops(d)) for d in cheap_keys})
    expensive_front = _front({d: (EXPENSIVE[d], _flops(d)) for d in expensive_keys})
    best = np.array([[EXPENSIVE[d], _flops(d)] for d in expensive_front])
    low, high = best.min(axis=0), best.max(axis=0)
    reference = (low[0] - 0.1 * (high[0] - low[0]), high[1] + 0.1 * (high[1] - low[1]))
    trained = [d for d in cheap_front if d in EXPENSIVE]
    recovered = _hv([(EXPENSIVE[d], _flops(d)) for d in trained], reference) / _hv(
        [(EXPENSIVE[d], _flops(d)) for d in expensive_front], reference
    )
    held = len(cheap_front & expensive_front)
    return held, len(expensive_front), recovered, len(trained), len(cheap_front)


def test_two_studies_tau_front_held_and_hypervolume_recovered(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _across(store)
        result = fidelity.cross_fidelity(store, "cheap", "expensive", resamples=300)
    shared = list(range(7))
    assert result.shared == 7 and result.keys == ["depth"]  # searched in either; lr fixed in both
    x, y = np.array([CHEAP[d] for d in shared]), np.array([EXPENSIVE[d] for d in shared])
    assert result.tau.value == pytest.approx(_tau_b(x, y))
    indices = np.random.default_rng(fidelity.SEED).integers(0, 7, size=(300, 7))
    assert (result.tau.low, result.tau.high) == pytest.approx(
        _percentile_interval([_tau_b(x[i], y[i]) for i in indices])
    )
    on_shared, whole = result.overlaps
    for overlap, keys in ((on_shared, (shared, shared)), (whole, (list(CHEAP), list(EXPENSIVE)))):
        held, total, recovered, trained, cheap_front = _expected_overlap(*keys)
        assert (overlap.held, overlap.total) == (held, total)
        assert overlap.hv_recovered == pytest.approx(recovered)
        assert (overlap.cheap_front_trained, overlap.cheap_front) == (trained, cheap_front)
    assert whole.untrained == 1  # depth 8, on the expensive front, never trained cheaply
    assert whole.hv_recovered < 1.0 and on_shared.hv_recovered < 1.0
    assert ("training.epochs", {"cheap": "2", "expensive": "8"}) in result.differences
    _, _, recovered, _, _ = _expected_overlap(list(CHEAP), list(EXPENSIVE))
    good_rank, good_front = result.tau.low >= fidelity.TAU_RELIABLE, recovered >= fidelity.HV_RECOVERED
    assert not (good_rank and good_front)  # the data: the cheap front misses depth 2 and 8
    why = "ranks unreliably" if not good_rank else "misses the expensive front"
    assert result.verdict == (
        f"cheap is a poor proxy for expensive ({why}): {result.tau.text()} on 7 shared configurations; "
        f"training its front alone recovers {100 * recovered:.1f}% of the expensive hypervolume; its front holds "
        f"{whole.held}/{whole.total} of the expensive front"
    )


def _invoke(*args: str):
    return CliRunner().invoke(main, ["fidelity", *args])


def test_the_command_on_sqlite_and_postgresql(store_url):
    with Store.open(store_url) as store:
        _within(store, early_stopping={"grace_period": 1, "reduction_factor": 3})
        _across(store)
    done = _invoke("s", "--store", store_url, "--resamples", "200")
    assert done.exit_code == 0, done.output
    lines = done.output.strip().splitlines()
    assert lines[0] == "study s: does epoch e rank like the end?"
    assert lines[1].split() == ["epoch", "trials", "tau", "tau_95", "rho", "rho_95", "front_kept"]
    assert lines[3].split()[:3] == ["1", "6", "-1.00"] and lines[3].split()[-1] == "0/1"
    assert lines[5].endswith("(the end)")
    assert lines[-1].startswith("verdict: epoch-1 ranking is unreliable (tau -1.00")
    rule = "MO-ASHA (mode pareto) on top1, flops, reduction factor 3, rungs at epochs 1; a rung prunes only once"
    assert any(rule in line and "its measured rank transfer holds" in line for line in lines)

    as_json = _invoke("s", "--store", store_url, "--resamples", "200", "--format", "json")
    assert as_json.exit_code == 0, as_json.output
    record = json.loads(as_json.output)
    with load_study("s", store_url) as study:
        api = study.fidelity(resamples=200)
    assert record == json.loads(json.dumps(api.record()))
    kept = [int(_mo_asha_kept(e, v, 5)) for e, v in ((1, EPOCH1), (2, EPOCH2))]
    assert [e["front_kept"] for e in record["epochs"]] == [*kept, None] and record["rule_mode"] == "pareto"

    across = _invoke("cheap", "expensive", "--store", store_url, "--resamples", "200")
    assert across.exit_code == 0, across.output
    out = across.output.strip().splitlines()
    assert out[0] == "cheap vs expensive differ in: training.epochs 2 vs 8"
    held, total, recovered, _, _ = _expected_overlap(list(CHEAP), list(EXPENSIVE))
    whole = next(line for line in out if line.startswith("whole studies"))
    assert f"{held}/{total}" in whole and f"{100 * recovered:.1f}%" in whole
    assert out[-1].startswith("verdict: cheap is a poor proxy for expensive")


def _ruled_study(store: Store, name: str, seed: int, trials: int = 30, epochs: int = 9, gate: bool = False):
    """A one-worker study as the rule runs it: each trial's curve drawn at random, fed in number order to the
    study's own MO-ASHA (grace 1, rf 3; behind its rank gate with ``gate``, told each completed trial, as the
    scheduler does); a trial it stops is stored pruned with the epochs it reached, the rest completed.
    Returns the rule and the completed trials' rung values (what the replay saw before)."""
    spec = _spec(name, epochs, {"grace_period": 1, "reduction_factor": 3, "rank_gate": gate})
    store.create_study(name, spec, OBJECTIVES)
    rule = rung_rule(spec)
    decider = rule.gated(list(rule.rungs)) if gate else rule.decider(list(rule.rungs))
    rng = np.random.default_rng(seed)
    completed_values = {}
    for number in range(trials):
        flops = float(rng.choice([1e6, 2e6, 4e6]))
        start, gain = rng.uniform(5, 40), rng.uniform(1, 8)
        curve = [start + gain * e + rng.normal(0, 6) for e in range(1, epochs + 1)]
        reached = epochs
        for epoch, top1 in enumerate(curve, start=1):
            if not decider.observe(str(number), epoch, {"top1": top1, "flops": flops}):
                reached = epoch
                break
        else:
            completed_values[number] = {e: {"top1": v, "flops": flops} for e, v in enumerate(curve, start=1)}
            if gate:
                decider.complete(str(number), {"top1": curve[-1], "flops": flops})
        status = "completed" if number in completed_values else "pruned"
        store.finish_trial(
            name, number, status=status, config={"model": {"depth": number}},
            parameters={"sampled": {"depth": number}, "fixed": {}}, measurement={"flops": flops, "params": 1000},
            final={"top1": curve[reached - 1]},
            epochs=[{"epoch": e, "top1": curve[e - 1]} for e in range(1, reached + 1)],
        )  # fmt: skip
    store.set_study_status(name, "completed")
    return rule, completed_values


@pytest.mark.parametrize("gate", [False, True])
def test_the_rules_replay_keeps_every_front_member_of_a_study_the_rule_ran(tmp_path, gate):
    """Issue 60: on studies run with the replayed rule where every front member completed, the replay keeps
    them all: the pruned trials compete at the rungs they reached. Without them (what the replay did) a rung
    holds fewer trials and keeps fewer: on some of these seeds it stopped a front member the run kept."""
    undercounted = 0
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        for seed in range(2, 8):
            name = f"ruled-{seed}"
            rule, completed_values = _ruled_study(store, name, seed, gate=gate)
            result = fidelity.study_fidelity(store, name, rung_rule, resamples=20)
            assert result.front_total >= 1 and result.rule_kept == result.front_total, seed
            assert result.completed == len(completed_values)
            finals = fidelity._completed(store, name, OBJECTIVES, None, None, 0).finals
            front = {int(n) for n in finals.index[finals["on_front"].astype(bool)]}
            stopped_alone = fidelity.replay(rule, rule.rungs, completed_values)
            undercounted += bool(front & set(stopped_alone))
    if not gate:
        assert undercounted > 0  # the seeds show the fault the fix removes


def test_where_filters_the_trials(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _within(store)
        result = fidelity.study_fidelity(store, "s", rung_rule, where={"depth": "0"}, resamples=10)
    assert result.completed == 1 and result.epochs == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "study 'nope' not found"),
        (["cheap", "nope"], "study 'nope' not found"),
        (
            ["cheap", "unrelated"],
            "no configuration is shared: none of the 8 completed configurations of 'cheap' was completed by "
            "'unrelated' (matched on depth)",
        ),
        (["cheap", "costs"], "the studies have different objectives (cheap: top1:max,flops:min; costs: top1:max,"),
        (["cheap", "empty"], "study 'empty' has no trials yet"),
        (["cheap", "failed"], "study 'failed' has no completed trial with every objective recorded"),
        (["cheap", "cheap"], "compare a study with another one: 'cheap' was given twice"),
        (["a", "b", "c"], "fidelity takes one study or two (CHEAP EXPENSIVE), got 3"),
        (["cheap", "expensive", "--where", "bogus"], "filter 'bogus' is not KEY=VALUE"),
    ],
)
def test_errors_are_one_line_and_exit_2(tmp_path, args, message):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _across(store)
        for name, objectives in (("unrelated", OBJECTIVES), ("costs", {"top1": "max", "params": "min"})):
            store.create_study(name, _spec(name, 2), objectives)
            store.finish_trial(
                name, 0, status="completed", config={}, parameters={"sampled": {"depth": 100}, "fixed": {}},
                measurement={"flops": 1.0, "params": 1}, final={"top1": 1.0},
            )  # fmt: skip
        store.create_study("empty", _spec("empty", 2), OBJECTIVES)
        store.create_study("failed", _spec("failed", 2), OBJECTIVES)
        store.finish_trial("failed", 0, status="failed", config={}, measurement={"flops": 1.0}, error="boom")
    done = _invoke(*args, "--store", url)
    assert done.exit_code == 2, done.output
    assert message in done.output
    assert len(done.output.strip().splitlines()) == 1


def test_a_stored_name_reaches_the_terminal_escaped(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _within(store, name="s\x1b[31m")
    done = _invoke("s\x1b[31m", "--store", url, "--resamples", "10")
    assert done.exit_code == 0, done.output
    assert "\x1b" not in done.output and "s\\x1b[31m" in done.output


def test_the_report_has_the_panel_with_the_verdict(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store.open(url) as store:
        _within(store, early_stopping={"grace_period": 1, "reduction_factor": 3})
    out = tmp_path / "r.html"
    done = CliRunner().invoke(main, ["report", "s", "--store", url, "-o", str(out), "--static"])
    assert done.exit_code == 0, done.output
    html = out.read_text()
    assert "Does an early epoch rank like the end?" in html
    with load_study("s", url) as study:
        verdict = study.fidelity(rule=rung_rule).verdict
    assert verdict.startswith("epoch-1 ranking is unreliable")
    assert verdict.replace("'", "&#39;") in html
    assert "<td>1</td><td>6</td><td>-1.00</td><td>[-1.00, -1.00]</td>" in html


def test_numpy_numbers_rank_as_numbers_not_as_missing_values():
    """A store frame's integer column is ``np.int64`` (no ``int``): read as missing, every FLOPs count was the
    worst there is and MO-ASHA's replay ranked on accuracy alone."""
    decider = RungDecider(OBJECTIVES, [1], 2)
    assert decider._minimised("flops", np.int64(5)) == 5.0 and decider._minimised("top1", np.float32(7)) == -7.0
    assert decider._minimised("flops", None) == math.inf and decider._minimised("flops", True) == math.inf
    assert fidelity._number(np.int64(3)) == 3.0 and fidelity._number(np.nan) is None
