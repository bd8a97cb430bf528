"""The contract that matters most (issue 37): what a trial trains is exactly what the spec and the
sampled values say, and what was priced before dispatch is what was trained.

Specs are generated (every domain kind: int, float, choice, fixed, bare value; on every target kind:
model fields, CoAtNet per-stage entries, ``training.*``, ``data.*``; both families) and run through
the real searcher (:class:`harness.search.propose.searcher.ArchsearchSearch` over Optuna's RDB storage and
the store), a few trials each. For every dispatched trial:

- the config the worker builds (the trainable's own :func:`harness.search.worker.trainable.worker_trial_config`)
  holds, at every parameter's target, the value Optuna sampled or the spec fixed, and the spec's
  base everywhere else (checked with this file's own reading of a config, not the product's);
- the model the worker builds (the trial runner's own build, on the trial's data) has exactly the
  parameters and the fvcore FLOPs the searcher priced before dispatch;
- the store records that config, and the sampled and fixed values apart.

Before the fix the dispatched config dropped every fixed value: the worker trained the base's.
"""

from __future__ import annotations

import re
from typing import Any

import optuna
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.search.propose.samplers import make_sampler
from harness.search.propose.searcher import ArchsearchSearch
from harness.search.record.trial_end import record_outcome
from harness.search.result_keys import PRICED_KEY, STATUS_KEY
from harness.search.worker.trainable import worker_trial_config
from harness.store import Store
from search_space.spec import SearchSpec
from trials import runner
from trials.config.trial_config import load_trial_config
from trials.measurement.measure import count_flops_or_none
from trials.models.build import count_parameters, resolve_config

BASES = {
    "cait": {
        "family": "cait",
        "patch_size": 8,
        "embed_dim": 16,
        "num_heads": 2,
        "depth": 1,
        "ca_depth": 1,
        "mlp_ratio": 2.0,
    },
    "coatnet": {
        "family": "coatnet",
        "layout": "CCTT",
        "depths": [1, 1, 1, 1, 1],
        "dims": [8, 8, 16, 16, 32],
        "head_size": 16,
        "mlp_ratio": 2.0,
        "expansion": 2,
    },
}
DATA = {"name": "synthetic", "num_classes": 3, "train_size": 8, "val_size": 8, "batch_size": 8}
TRAINING = {"epochs": 1, "lr": 1.0e-3, "warmup_epochs": 0}

# Per family, per target kind: (parameter name, values it may take, the values' type). Every value
# is valid with every other; the bases above are not among them where it matters, so a dropped
# value shows.
TARGETS: dict[str, dict[str, list[tuple[str, list[Any], type]]]] = {
    "cait": {
        "model": [
            ("depth", [2, 3], int),
            ("ca_depth", [2, 3], int),
            ("mlp_ratio", [3.0, 4.0], float),
            ("drop_path_rate", [0.05, 0.1], float),
            ("talking_heads", [False], bool),
        ],
        "training": [("lr", [2.0e-3, 3.0e-3], float), ("epochs", [2, 3], int)],
        "data": [("data.batch_size", [4, 6], int), ("data.num_classes", [4, 5], int)],
    },
    "coatnet": {
        "model": [
            ("layout", ["CCCT", "CTTT"], str),
            ("mlp_ratio", [3.0, 4.0], float),
            ("expansion", [3, 4], int),
        ],
        "stage": [("depths[3]", [2, 3], int), ("dims[3]", [32, 48], int), ("depths[1]", [2], int)],
        "training": [("weight_decay", [0.01, 0.02], float), ("training.label_smoothing", [0.1, 0.2], float)],
        "data": [("data.train_size", [12, 16], int)],
    },
}
KINDS = ("int", "float", "choice", "fixed", "bare")
_STAGE = re.compile(r"^(\w+)\[(\d)\]$")


def _domain(kind: str, values: list[Any], kind_type: type) -> Any | None:
    """The spec's domain of ``kind`` over ``values``; None where the kind does not fit the values' type."""
    if kind == "int":  # stepped so that every value in the range is one of values (dims stay divisible)
        if kind_type is not int:
            return None
        step = min(b - a for a, b in zip(sorted(values), sorted(values)[1:], strict=False)) if len(values) > 1 else 1
        return {"int": [min(values), max(values)], "step": step}
    if kind == "float":
        return {"float": [min(values), max(values)]} if kind_type is float else None
    if kind == "choice":
        return {"choice": list(values)}
    if kind == "fixed":
        return {"fixed": values[-1]}
    return values[-1]  # a bare value: fixed too


def _spec(family: str, params: dict[str, Any], sampler: str, name: str) -> SearchSpec:
    return SearchSpec.model_validate(
        {
            "name": name,
            "family": family,
            "base_model": BASES[family],
            "data": DATA,
            "training": TRAINING,
            "params": params,
            "objectives": {"top1": "max", "flops": "min"},
            "search": {"sampler": sampler, "n_trials": 3, "seed": 0},
        }
    )


def _value_at(config: dict[str, Any], name: str, family: str) -> Any:
    """This test's own reading of a parameter's target in a trial config."""
    if name.startswith("data."):
        return config["data"][name.removeprefix("data.")]
    if name.startswith("training.") or name in ("lr", "epochs", "weight_decay"):
        return config["training"][name.removeprefix("training.")]
    stage = _STAGE.match(name)
    if stage:
        return config["model"][stage[1]][int(stage[2])]
    return config["model"][name]


def _same(a: Any, b: Any) -> bool:
    return (a == b and type(a) is type(b)) or (isinstance(a, float) and isinstance(b, int) and a == b)


def _check_trial(spec: SearchSpec, tune_config: dict, store, sampled: dict[str, Any]) -> dict[str, Any]:
    """Check one dispatched trial (see the module docstring); returns the result to tell the searcher."""
    family = spec.family
    fixed = {n: d.fixed for n, d in spec.params.items() if hasattr(d, "fixed")}
    assert set(sampled) | set(fixed) == set(spec.params)
    number, config = worker_trial_config(spec, tune_config)  # the trainable's own call (checks the price too)

    # 1. Every parameter's value is the sampled or the fixed one ...
    for name, value in {**sampled, **fixed}.items():
        found = _value_at(config, name, family)
        assert _same(found, value), f"{name}: the worker builds {found!r}, the spec/sampler says {value!r}"
    # ... and the spec's base everywhere else.
    targeted = {(_STAGE.match(n)[1] if _STAGE.match(n) else n) for n in spec.params}
    # The base at the data's shape (32 px, 3 channels, its classes): the model the trial builds (issue 56).
    searched_data = {n.removeprefix("data."): v for n, v in {**sampled, **fixed}.items() if n.startswith("data.")}
    classes = {**DATA, **searched_data}["num_classes"]
    base = resolve_config(BASES[family]).replace(image_size=32, in_chans=3, num_classes=classes)
    base = base.to_dict()
    for field, value in base.items():
        if field in targeted:
            continue
        assert config["model"][field] == value, f"model.{field}: {config['model'][field]!r} is not the base's {value!r}"
    for field in ("depths", "dims"):
        if field in targeted:  # the stages not searched keep the base's
            indices = {int(_STAGE.match(n)[2]) for n in spec.params if n.startswith(f"{field}[")}
            for i, value in enumerate(base[field]):
                assert i in indices or config["model"][field][i] == value
    data_params = {n.removeprefix("data."): v for n, v in {**sampled, **fixed}.items() if n.startswith("data.")}
    assert config["data"] == {**DATA, **data_params, "augment": {"hflip": True}}  # synthetic's default, recorded
    training = {
        n.removeprefix("training."): v
        for n, v in {**sampled, **fixed}.items()
        if n.startswith("training.") or n in ("lr", "epochs", "weight_decay")
    }
    assert config["training"] == {**TRAINING, **training}

    # 2. The model the trial builds costs what the searcher priced before dispatch.
    priced = tune_config[PRICED_KEY]
    trainer = runner._build(load_trial_config(config), {})  # the runner's own build: data, then model
    assert trainer.model.config.to_dict() == config["model"]  # the config stored is the model built
    assert count_parameters(trainer.model) == priced["params"]
    assert count_flops_or_none(trainer.model, trainer.data.image_size, torch.device("cpu")) == priced["flops"]

    # 3. The driver records that config, and the sampled and fixed values apart.
    top1 = float(number % 3)
    result = {STATUS_KEY: "completed", "top1": top1, "flops": float(priced["flops"]), "final_top1": top1}
    result |= {"cost_flops": priced["flops"], "cost_params": priced["params"]}
    record_outcome(store, spec.name, spec.model_dump(mode="json"), tune_config, result)
    row = store.trials(spec.name, flatten_config=False).set_index("number").loc[number]
    assert row["config"] == config
    assert row["parameters"] == {"sampled": sampled, "fixed": fixed}
    return result


def _run_searcher(spec: SearchSpec, url: str) -> int:
    """Dispatch the spec's trials through the real searcher; check each. Returns how many ran."""
    store = Store.open(url)
    store.create_study(spec.name, spec.model_dump(mode="json"), dict(spec.objectives))
    storage = optuna.storages.RDBStorage(url)
    searcher = ArchsearchSearch(spec, url, spec.name, storage, make_sampler(spec))
    ran = 0
    for i in range(spec.search.n_trials):
        tune_config = searcher.suggest(f"t{i}")
        if not isinstance(tune_config, dict):  # FINISHED: a grid, or a space smaller than the budget
            break
        ot_trial = searcher.asked_trial(f"t{i}")
        result = _check_trial(spec, tune_config, store, dict(ot_trial.params))
        searcher.on_trial_complete(f"t{i}", result)
        ran += 1
    store.close()
    return ran


def _params_for(family: str, kinds: dict[str, str]) -> dict[str, Any]:
    params = {}
    for targets in TARGETS[family].values():
        for name, values, kind_type in targets:
            kind = kinds.get(name)
            domain = _domain(kind, values, kind_type) if kind else None
            if domain is not None:
                params[name] = domain
    return params


@pytest.mark.parametrize("family", sorted(TARGETS))
@pytest.mark.parametrize("kind", KINDS)
def test_every_domain_kind_on_every_target_kind_reaches_the_trial(tmp_path, family, kind):
    """One spec per (family, domain kind): that kind on every target where it fits, the rest fixed."""
    names = [name for targets in TARGETS[family].values() for name, _, _ in targets]
    params = _params_for(family, {name: kind for name in names})
    for targets in TARGETS[family].values():  # targets the kind does not fit (int on a float): fixed
        for name, values, _ in targets:
            params.setdefault(name, {"fixed": values[0]})
    if kind in ("fixed", "bare"):  # something must be sampled: one choice
        params["depth" if family == "cait" else "layout"] = {"choice": TARGETS[family]["model"][0][1]}
    spec = _spec(family, params, "random", f"every-{family}-{kind}")
    assert _run_searcher(spec, f"sqlite:///{tmp_path / 'store.db'}") >= 1


@st.composite
def generated_specs(draw) -> tuple[SearchSpec, str]:
    family = draw(st.sampled_from(sorted(TARGETS)))
    kinds = {}
    for targets in TARGETS[family].values():
        for name, _, _ in targets:
            kind = draw(st.sampled_from((None, *KINDS)))
            if kind is not None:
                kinds[name] = kind
    params = _params_for(family, kinds)
    if not any(isinstance(d, dict) and "fixed" not in d for d in params.values()):
        name, values = ("dims[3]", [32, 48]) if family == "coatnet" else ("mlp_ratio", [3.0])
        params[name] = {"choice": values}
    floats = any(isinstance(d, dict) and "float" in d for d in params.values())
    samplers = ("random", "tpe", "gp", "nsga2")
    sampler = draw(st.sampled_from(samplers if floats else (*samplers, "grid")))
    return _spec(family, params, sampler, "generated"), family


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=generated_specs())
def test_generated_specs_train_exactly_what_they_say_and_what_was_priced(tmp_path_factory, case):
    spec, _ = case
    assert _run_searcher(spec, f"sqlite:///{tmp_path_factory.mktemp('contract') / 'store.db'}") >= 1


def test_a_grid_with_fixed_and_bare_values_trains_them_at_every_point(tmp_path):
    """The DeiT-style grid of issue 37: class attention fixed off, the rest a grid."""
    params = {"depth": {"choice": [2, 3]}, "ca_depth": {"fixed": 0}, "cls_insert_layer": 0, "mlp_ratio": 3.0}
    spec = _spec("cait", params, "grid", "deit-grid")
    assert _run_searcher(spec, f"sqlite:///{tmp_path / 'store.db'}") == 2  # the whole grid, then FINISHED


def test_duplicates_are_recorded_with_the_fixed_values(tmp_path):
    """A proposal of a config already trained is stored ``duplicate`` with the config that was trained
    (fixed values applied) and its parameters apart; the searcher then asks again."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    spec = _spec("cait", {"depth": {"choice": [2, 3]}, "mlp_ratio": {"fixed": 3.0}}, "random", "dups")
    spec = SearchSpec.model_validate({**spec.model_dump(mode="json"), "search": {"n_trials": 2, "seed": 0}})
    store = Store.open(url)
    store.create_study("dups", spec.model_dump(mode="json"), dict(spec.objectives))
    searcher = ArchsearchSearch(spec, url, "dups", optuna.storages.RDBStorage(url), make_sampler(spec))
    for _ in range(2):  # the same configuration proposed twice
        searcher.study.enqueue_trial({"depth": 2})
    for i in range(3):
        tune_config = searcher.suggest(f"t{i}")
        if not isinstance(tune_config, dict):
            break
        result = _check_trial(spec, tune_config, store, dict(searcher.asked_trial(f"t{i}").params))
        searcher.on_trial_complete(f"t{i}", result)
    rows = store.trials("dups", flatten_config=False)
    assert list(rows["status"]) == ["completed", "duplicate", "completed"]
    assert [c["model"]["depth"] for c in rows["config"]] == [2, 2, 3]
    assert all(c["model"]["mlp_ratio"] == 3.0 for c in rows["config"])
    assert [p["sampled"] for p in rows["parameters"]] == [{"depth": 2}, {"depth": 2}, {"depth": 3}]
    assert all(p["fixed"] == {"mlp_ratio": 3.0} for p in rows["parameters"])
    store.close()


def _with_warm_start(spec: SearchSpec, **warm: Any) -> SearchSpec:
    search = {**spec.search.model_dump(mode="json", exclude_none=True), "warm_start": warm}
    return SearchSpec.model_validate({**spec.model_dump(mode="json", exclude_none=True), "search": search})


def test_a_warm_start_enqueues_what_the_earlier_trials_trained_and_reuses_them_with_fixed_values(tmp_path, capsys):
    """The earlier study fixed mlp_ratio; the new one searches it: the enqueued trials take the value
    the earlier trials trained (Optuna's record of them has no fixed values), and the new spec's own
    fixed value (ca_depth) applies to them. With reuse_results, an identical config is copied."""
    from harness.search.propose import warm_start

    url = f"sqlite:///{tmp_path / 'store.db'}"
    earlier = _spec("cait", {"depth": {"choice": [2, 3]}, "mlp_ratio": {"fixed": 3.0}}, "random", "earlier")
    assert _run_searcher(earlier, url) >= 1
    params = {"depth": {"choice": [2, 3]}, "mlp_ratio": {"choice": [3.0, 4.0]}, "ca_depth": 3}
    spec = _with_warm_start(_spec("cait", params, "random", "later"), study="earlier", top=0)
    store = Store.open(url)
    store.create_study("later", spec.model_dump(mode="json"), dict(spec.objectives))
    searcher = ArchsearchSearch(spec, url, "later", optuna.storages.RDBStorage(url), make_sampler(spec))
    report = warm_start.apply(searcher, spec, url, spec.name)
    assert report.enqueued >= 1 and report.skipped == 0
    for i in range(report.enqueued):
        tune_config = searcher.suggest(f"w{i}")
        assert tune_config["mlp_ratio"] == 3.0 and tune_config["ca_depth"] == 3, tune_config
        _check_trial(spec, tune_config, store, dict(searcher.asked_trial(f"w{i}").params))

    # reuse_results: the same space again; every config it proposes was trained by "earlier".
    again = _spec("cait", {"depth": {"choice": [2, 3]}, "mlp_ratio": 3.0}, "random", "again")
    again = _with_warm_start(again, study="earlier", top=0, reuse_results=True)
    store.create_study("again", again.model_dump(mode="json"), dict(again.objectives))
    searcher = ArchsearchSearch(again, url, "again", optuna.storages.RDBStorage(url), make_sampler(again))
    assert len(warm_start.apply(searcher, again, url, again.name).reusable) >= 1
    # Another seed trains other models: nothing of the earlier study is reusable, and none is promised.
    search = {**again.search.model_dump(mode="json", exclude_none=True), "seed": 1}
    reseeded = SearchSpec.model_validate({**again.model_dump(mode="json", exclude_none=True), "name": "reseeded",
                                          "search": search})  # fmt: skip
    store.create_study("reseeded", reseeded.model_dump(mode="json"), dict(reseeded.objectives))
    other = ArchsearchSearch(reseeded, url, "reseeded", optuna.storages.RDBStorage(url), make_sampler(reseeded))
    assert warm_start.apply(other, reseeded, url, reseeded.name).reusable == {}
    searcher.suggest("r0")  # every proposal is copied or a duplicate: nothing is dispatched to train
    rows = store.trials("again", flatten_config=False)
    reused = rows[rows["status"] == "completed"]
    assert len(reused) >= 1 and all(c["model"]["mlp_ratio"] == 3.0 for c in reused["config"])
    assert all(p["fixed"] == {"mlp_ratio": 3.0} for p in reused["parameters"])
    store.close()
