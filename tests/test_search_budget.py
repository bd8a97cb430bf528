"""The search's budget (issue 32, item 4): duplicates never take it, a discrete space with nothing new
left ends the search with one line, and parallel TPE does not hand every worker the same proposal.

Driven through the real searcher (Optuna's RDB storage on SQLite and the store), no Ray: the
searcher's own ``suggest`` / ``on_trial_complete`` as Ray Tune calls them.
"""

from __future__ import annotations

import importlib.util

import optuna
import pytest

from harness.search.propose.samplers import (
    STATUS_ATTR,
    InfeasibleAwareBoTorchSampler,
    InfeasibleAwareGPSampler,
    make_sampler,
    optuna_botorch,
)
from harness.search.propose.searcher import ArchsearchSearch
from harness.search.result_keys import STATUS_KEY, split_tune_config
from harness.store import Store
from search_space.sampling import discrete_space_size
from search_space.spec import SearchSpec
from search_space.validation import load_spec
from trials.configio import ConfigError


def _spec(params: dict, sampler: str, n_trials: int, concurrency: int = 1) -> SearchSpec:
    return SearchSpec.model_validate(
        {
            "name": "budget",
            "family": "cait",
            "base_model": {"family": "cait", "patch_size": 8, "embed_dim": 16, "num_heads": 2, "depth": 1},
            "data": {"name": "synthetic", "num_classes": 3, "train_size": 8, "val_size": 8, "batch_size": 8},
            "training": {"epochs": 1},
            "params": params,
            "objectives": {"top1": "max", "flops": "min"},
            "search": {"sampler": sampler, "n_trials": n_trials, "concurrency": concurrency, "seed": 0},
        }
    )


def _searcher(spec: SearchSpec, url: str) -> ArchsearchSearch:
    Store.open(url).create_study(spec.name, spec.model_dump(mode="json"), dict(spec.objectives))
    return ArchsearchSearch(spec, url, spec.name, optuna.storages.RDBStorage(url), make_sampler(spec))


def _drive(searcher: ArchsearchSearch, most: int = 100) -> list[dict]:
    """Ask and complete trials one at a time, as Tune with one worker would; the dispatched configs."""
    dispatched = []
    for i in range(most):
        config = searcher.suggest(f"t{i}")
        if not isinstance(config, dict):
            break
        number, _, params = split_tune_config(config)
        searcher.on_trial_complete(f"t{i}", {STATUS_KEY: "completed", "top1": float(number), "flops": 1.0})
        dispatched.append(params)
    return dispatched


@pytest.mark.parametrize("sampler", ["random", "tpe", "gp", "botorch", "nsga2"])
def test_duplicates_take_no_budget_n_trials_counts_trained_trials(tmp_path, sampler):
    """A space of 6 configurations and n_trials 5: five distinct configurations are trained, whatever
    the sampler repeats on the way (each repeat stored ``duplicate``, not counted)."""
    spec = _spec({"depth": {"choice": [1, 2, 3]}, "mlp_ratio": {"choice": [2.0, 4.0]}}, sampler, 5)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    dispatched = _drive(_searcher(spec, url))
    assert len(dispatched) == 5
    assert len({(p["depth"], p["mlp_ratio"]) for p in dispatched}) == 5
    with Store.open(url) as store:  # the searcher stores what it does not dispatch: the duplicates
        duplicates = store.counts("budget", epochs=False)["duplicate"]
        assert duplicates == len(store.trials("budget"))
    states = [t.state for t in optuna.load_study(study_name="budget", storage=url).trials]
    assert states == [optuna.trial.TrialState.COMPLETE] * (5 + duplicates)  # Optuna told every one


def test_a_discrete_space_with_nothing_new_left_ends_the_search_with_one_line(tmp_path, capsys):
    spec = _spec({"depth": {"choice": [1, 2]}, "mlp_ratio": {"int": [2, 4], "step": 2}}, "nsga2", 50)
    assert discrete_space_size(spec) == 4
    dispatched = _drive(_searcher(spec, f"sqlite:///{tmp_path / 'store.db'}"))
    assert len({(p["depth"], p["mlp_ratio"]) for p in dispatched}) == len(dispatched) == 4
    lines = [line for line in capsys.readouterr().err.splitlines() if "stopping" in line]
    assert lines == ["[budget] stopping: every configuration of the space has been tried (4 trained, 0 infeasible, "
                     "of 4): nothing new is left"]  # fmt: skip


def test_a_continuous_space_has_no_size_and_parallel_tpe_lies_constantly():
    spec = _spec({"drop_path_rate": {"float": [0.0, 0.2]}}, "tpe", 5, concurrency=4)
    assert discrete_space_size(spec) is None
    assert make_sampler(spec)._constant_liar is True
    assert make_sampler(_spec({"depth": {"choice": [1]}}, "tpe", 5, concurrency=1))._constant_liar is False


def test_a_gp_spec_validates_and_gets_optunas_gp_sampler_seeded_by_the_spec(tmp_path):
    """``sampler: gp`` is Optuna's GPSampler with ``search.seed``: two searches of one spec propose the same
    configurations, the 11th (past the sampler's 10 start-up trials) the Gaussian process's; another seed
    others."""
    spec = _spec({"depth": {"choice": [1, 2, 3, 4]}, "mlp_ratio": {"float": [2.0, 4.0]}}, "gp", 11)
    assert load_spec(spec.model_dump(mode="json")).search.sampler == "gp"
    assert isinstance(make_sampler(spec), optuna.samplers.GPSampler)  # InfeasibleAwareGPSampler, a subclass

    def proposals(seed: int, directory: str) -> list[tuple]:
        reseeded = spec.model_copy(update={"search": spec.search.model_copy(update={"seed": seed})})
        (tmp_path / directory).mkdir()
        dispatched = _drive(_searcher(reseeded, f"sqlite:///{tmp_path / directory / 'store.db'}"))
        return [(p["depth"], round(p["mlp_ratio"], 9)) for p in dispatched]

    first = proposals(0, "a")
    assert len(first) == 11
    assert proposals(0, "b") == first
    assert proposals(1, "c") != first


@pytest.mark.parametrize("sampler", [optuna.samplers.GPSampler, InfeasibleAwareGPSampler])
def test_the_gp_sampler_does_not_propose_a_configuration_found_infeasible_again(sampler):
    """An infeasible proposal is told PRUNED (never trained); Optuna's GPSampler fits completed trials only
    and proposes it again on the same data, until the searcher gives up (200 in a row). The sampler
    ``gp`` gets (:class:`InfeasibleAwareGPSampler`) fits it as the worst completed trial and looks elsewhere."""
    space = {"x": optuna.distributions.IntDistribution(0, 19)}
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler(seed=0))
    for x in range(10):  # top-1 rising with x: the GP's best guess is the top of the range
        study.add_trial(optuna.trial.create_trial(values=[x, 1.0], params={"x": x}, distributions=space))
    proposed = _proposals_told_infeasible(study, space, 3)
    assert proposed[0] == 19
    if sampler is InfeasibleAwareGPSampler:
        assert len(set(proposed)) == 3
        assert isinstance(make_sampler(_spec({"depth": {"choice": [1, 2]}}, "gp", 5)), InfeasibleAwareGPSampler)
    else:  # Optuna's own: the same infeasible configuration again and again
        assert proposed == [19, 19, 19]


def _proposals_told_infeasible(study: optuna.Study, space: dict, count: int) -> list[int]:
    """``count`` proposals of ``x``, each told PRUNED and marked infeasible, as the searcher records one."""
    proposed = []
    for _ in range(count):
        trial = study.ask(space)
        proposed.append(trial.params["x"])
        trial.set_user_attr(STATUS_ATTR, "infeasible")
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return proposed


def _plain_botorch(seed: int) -> optuna.samplers.BaseSampler:
    return optuna_botorch.BoTorchSampler(candidates_func=optuna_botorch.qnehvi_candidates_func, seed=seed)


@pytest.mark.parametrize("plain", [True, False], ids=["BoTorchSampler", "InfeasibleAwareBoTorchSampler"])
def test_the_botorch_sampler_does_not_propose_a_configuration_found_infeasible_again(plain):
    """As the gp sampler's test above: optuna-integration's BoTorchSampler (qLogNEHVI here) reads COMPLETE and
    RUNNING trials only, so an infeasible proposal (told PRUNED) is proposed again on the same data; the sampler
    ``botorch`` gets (:class:`InfeasibleAwareBoTorchSampler`) fits it as the worst completed trial, and on a
    discrete space scores only the configurations no trial has (the test below)."""
    pytest.importorskip("botorch")
    sampler = _plain_botorch(0) if plain else InfeasibleAwareBoTorchSampler(seed=0, concurrency=1, objectives=2)
    space = {"x": optuna.distributions.IntDistribution(0, 19)}
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    for x in range(10):  # top-1 rising and cost falling with x: the model looks above 9
        study.add_trial(optuna.trial.create_trial(values=[x, 10.0 - x], params={"x": x}, distributions=space))
    proposed = _proposals_told_infeasible(study, space, 2)
    assert proposed[0] >= 10
    if plain:  # optuna-integration's own: the same infeasible configuration again
        assert proposed[1] == proposed[0]
    else:
        assert proposed[1] != proposed[0]


def test_on_a_discrete_space_the_botorch_sampler_proposes_only_configurations_not_tried():
    """qLogNEHVI is scored on the configurations no trial has (trained, running, a duplicate or infeasible),
    not maximised over the one-hot relaxation and rounded (which, replaying coatnet-mnist5k-n1000, rounded to
    trained configurations 200 times in a row); with none left the sampler proposes nothing of its own."""
    pytest.importorskip("botorch")
    space = {"depth": optuna.distributions.IntDistribution(1, 4), "kind": optuna.distributions.CategoricalDistribution(
        ["a", "b", "c"])}  # fmt: skip
    sampler = InfeasibleAwareBoTorchSampler(seed=0, concurrency=1, objectives=2)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    for depth, kind in [(d, k) for d in range(1, 5) for k in "abc"][:10]:
        values = [depth * 10 + "abc".index(kind), depth]
        study.add_trial(optuna.trial.create_trial(values=values, params={"depth": depth, "kind": kind},
                                                  distributions=space))  # fmt: skip
    untried = {(4, "b"), (4, "c")}
    trial = study.ask(space)
    assert (trial.params["depth"], trial.params["kind"]) in untried
    study.tell(trial, [41.0, 4.0])
    last = study.ask(space)
    assert {(trial.params["depth"], trial.params["kind"]), (last.params["depth"], last.params["kind"])} == untried
    study.tell(last, [42.0, 4.0])
    assert sampler.sample_relative(study, study.ask(), sampler.infer_relative_search_space(study, None)) == {}
    assert sampler.candidates.choices is None  # nothing of a proposal kept: the searcher is pickled with it


def test_a_botorch_spec_validates_and_gets_the_botorch_sampler(tmp_path):
    """``sampler: botorch`` is optuna-integration's BoTorchSampler behind :class:`InfeasibleAwareBoTorchSampler`,
    seeded by the spec; the 11th trial of a search (past the 10 start-up trials) is the model's proposal, a
    configuration not trained before (12 in the space)."""
    pytest.importorskip("botorch")
    spec = _spec({"depth": {"choice": [1, 2, 3, 4, 5, 6]}, "mlp_ratio": {"choice": [2.0, 4.0]}}, "botorch", 11, 2)
    assert load_spec(spec.model_dump(mode="json")).search.sampler == "botorch"
    sampler = make_sampler(spec)
    assert isinstance(sampler, InfeasibleAwareBoTorchSampler)
    assert isinstance(sampler.botorch, optuna_botorch.BoTorchSampler)
    dispatched = _drive(_searcher(spec, f"sqlite:///{tmp_path / 'store.db'}"))
    assert len(dispatched) == 11


def test_a_botorch_spec_where_the_extra_is_missing_is_one_line_naming_the_extra(monkeypatch):
    """Without the ``botorch`` extra, a spec naming it is refused when read (and the sampler when built), in
    one line that says what to install; ``import harness.search.propose.samplers`` needs no BoTorch."""
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "botorch" else found(name, *a))
    spec = _spec({"depth": {"choice": [1, 2]}}, "botorch", 5)
    for refused in (lambda: load_spec(spec.model_dump(mode="json")), lambda: make_sampler(spec)):
        with pytest.raises(ConfigError) as error:
            refused()
        line = str(error.value)
        assert "\n" not in line and "search.sampler" in line and "pip install 'archsearch[botorch]'" in line
    assert isinstance(make_sampler(_spec({"depth": {"choice": [1, 2]}}, "tpe", 5)), optuna.samplers.TPESampler)
