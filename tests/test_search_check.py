"""``archsearch check SPEC`` and ``run_search(..., dry_run=True)`` (issue 61 item 1): what a search would do,
found without doing it.

* On the quickstart preset it prints the space, its size, the priced cost range (the cost model's exact
  extremes over the space), the time here and the first proposals; ``--format json`` parses.
* A CoAtNet spec with a width that builds only with a convolutional stage is 1/6 refused, for that reason,
  with an example; a params constraint refuses what the cost model prices over it.
* A bad key exits 2 naming it; nothing is written and Ray is never started, whatever the outcome.
* The first proposals are the ones the search's own searcher, on the search's own store and Optuna storage,
  makes first (fast), and the ones a real search under Ray trains first (slow).
* The epoch size the estimate uses is the one the data loaders build.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import optuna
import pytest
import ray
import torch
import yaml
from click.testing import CliRunner

from harness import run_search
from harness.cli import main
from harness.search.dry_run import DryRunSearch, SearchCheck, check_search
from harness.search.engine import build_engine, build_searcher
from harness.search.propose import warm_start
from harness.search.result_keys import split_tune_config
from harness.search.session import SearchSession
from harness.search.worker.trainable import fit_to_resources
from harness.store import Store
from harness.store.urls import optuna_storage_url
from search_space.sampling import build_trial_config, cost_violations, split_params
from search_space.validation import load_spec
from trials.config.data_config import DataConfig, training_images
from trials.config.trial_config import load_trial_config
from trials.data.loading import in_memory_splits
from trials.measurement.timing import training_step_seconds
from trials.models.presets import PRESETS

ROOT = Path(__file__).parents[1]
# The spec below is partly invalid on purpose: its one warning line is not what these tests look at.
pytestmark = pytest.mark.filterwarnings("ignore::search_space.buildable.PartlyInvalidSpace")
QUICKSTART = ROOT / "search_space" / "presets" / "quickstart.yaml"


def coatnet_spec(**search) -> dict:
    """A user's own CoAtNet spec: layouts, a depth, widths of which 80 builds only where stage 3 is
    convolutional (80 is not a multiple of the attention's head size, 32), drop-path, a log-scale learning
    rate, a fixed value and a params constraint."""
    return {
        "name": "mine",
        "family": "coatnet",
        "base_model": "coatnet_tiny32",
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 96, "val_size": 32, "batch_size": 32},
        "training": {"epochs": 1, "lr": 2.0e-3},
        "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
        "params": {
            "layout": {"choice": ["CCCC", "CCCT", "CCTT", "CTTT"]},
            "depths[3]": {"int": [1, 3]},
            "dims[3]": {"choice": [64, 80, 128]},
            "drop_path_rate": {"float": [0.0, 0.2]},
            "lr": {"float": [1.0e-3, 4.0e-3], "log": True},
            "mlp_ratio": 4.0,
        },
        "objectives": {"top1": "max", "params": "min"},
        "constraints": ["params <= 1.0e6"],
        "search": {"sampler": "tpe", "n_trials": 6, "concurrency": 3, "seed": 3, **search},
    }


def _written(tmp_path: Path) -> list[Path]:
    return sorted(p for p in tmp_path.rglob("*") if p.suffix != ".yaml")


def test_check_of_the_quickstart_prints_the_space_its_costs_time_and_first_proposals(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default store and ray_results would land here
    store = tmp_path / "s.db"
    result = CliRunner().invoke(main, ["check", str(QUICKSTART), "--store", f"sqlite:///{store}"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "layout     choice: [CCCC, CCCT, CCTT]" in out
    assert "size: continuous (lr); the other parameters: 144 configurations" in out
    assert "constraints: none" in out and "does not exist yet: the search would create it" in out
    assert "infeasible: none of 144 configs" in out
    # digits: 1,438 training images / 64 = 22 full steps an epoch, 10 epochs
    assert "8 trials, 2 at a time:" in out and "ms/step x 220 steps of 64" in out
    assert "first 2 proposals (tpe, seed 0)" in out and out.count("(initial spread)") == 2
    # The priced range is the cost model's over the whole space: its exact cheapest and dearest config.
    spec = load_spec(QUICKSTART)
    names = ("layout", "depths[3]", "dims[1]", "dims[2]", "dims[3]")
    grid = itertools.product(["CCCC", "CCCT", "CCTT"], [1, 2], [4, 8, 16, 32], [8, 16, 32], [16, 32])
    flops = [cost_violations(spec, build_trial_config(spec, dict(zip(names, combo, strict=True))))[0] for combo in grid]
    record = json.loads(CliRunner().invoke(main, ["check", str(QUICKSTART), "--store", f"sqlite:///{store}",
                                                  "--format", "json", "--no-timing"]).stdout)  # fmt: skip
    (priced,) = [r for r in record["costs"] if r["metric"] == "flops"]
    assert (priced["min"], priced["max"]) == (min(c["flops"] for c in flops), max(c["flops"] for c in flops))
    assert priced["direction"] == "min" and record["unpriced"] == ["top1"] and record["time"] is None
    assert record["size"] is None and record["finite_size"] == 144 and record["infeasible_share"] == 0
    assert [p["source"] for p in record["proposals"]] == ["initial spread"] * 2
    assert _written(tmp_path) == [] and not store.exists()
    assert not ray.is_initialized()


def test_a_width_that_builds_only_on_a_convolutional_stage_is_refused_with_its_reason_and_an_example(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(coatnet_spec(), sort_keys=False))
    store = tmp_path / "s.db"
    result = CliRunner().invoke(main, ["check", str(path), "--store", f"sqlite:///{store}", "--no-timing"])
    assert result.exit_code == 0, result.output
    assert "does not build: layout=CCTT with dims[3]=80 or layout=CTTT with dims[3]=80" in result.output
    assert "e.g. layout=CCTT, depths[3]=1, dims[3]=80" in result.output
    record = json.loads(CliRunner().invoke(main, ["check", str(path), "--store", f"sqlite:///{store}",
                                                  "--format", "json", "--no-timing"]).stdout)  # fmt: skip
    # 4 layouts x 3 depths x 3 widths x 3 drop-path settings; 80 fails with 2 layouts: 2 x 3 x 3 of 108.
    assert record["counted"] == 108 and record["exhaustive"] is True
    (width,) = [r for r in record["refusals"] if r["key"] == "model.dims[3]"]
    assert width["count"] == 18 and width["share"] == pytest.approx(1 / 6)
    assert all(e["dims[3]"] == 80 and e["layout"] in ("CCTT", "CTTT") for e in width["examples"])
    # The params constraint refuses exactly the buildable configs the cost model prices above 1e6.
    spec = load_spec(coatnet_spec())
    over = 0
    for layout, depth, dims in itertools.product(["CCCC", "CCCT", "CCTT", "CTTT"], [1, 2, 3], [64, 80, 128]):
        if dims == 80 and layout in ("CCTT", "CTTT"):
            continue
        params = {"layout": layout, "depths[3]": depth, "dims[3]": dims}
        cost, _ = cost_violations(spec, build_trial_config(spec, params))
        over += 3 * (cost["params"] > 1e6)
    (budget,) = [r for r in record["refusals"] if r["key"] == "params <= 1.0e6"]
    assert over > 0 and budget["count"] == over and all(e["params"] > 1e6 for e in budget["examples"])
    assert record["infeasible_share"] == pytest.approx((18 + over) / 108)
    for proposal in record["proposals"]:  # the search never dispatches what the check refuses
        model = proposal["config"]["model"]
        assert not (model["dims"][3] == 80 and model["layout"][2] == "T") and proposal["cost"]["params"] <= 1e6
        assert model["mlp_ratio"] == 4.0 and proposal["fixed"] == {"mlp_ratio": 4.0}
    assert not store.exists() and not ray.is_initialized()


def test_a_bad_key_exits_2_naming_it_and_writes_nothing(tmp_path):
    spec = coatnet_spec()
    spec["params"]["dims[9]"] = {"choice": [64]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    store = tmp_path / "s.db"
    result = CliRunner().invoke(main, ["check", str(path), "--store", f"sqlite:///{store}"])
    assert result.exit_code == 2
    assert result.output == "Error: params.dims[9]: stage index 9 out of range\n"  # not dims[3]'s, as it once was
    assert not store.exists() and _written(tmp_path) == []


def _search_first_suggestions(spec, url: str, count: int) -> tuple[list[dict], list[dict]]:
    """What the search's searcher proposes first on the search's own store and Optuna storage (as the driver
    builds it), and what it stored as refused on the way."""
    name = spec.name
    with Store.open(url) as store:
        store.create_study(name, spec.model_dump(mode="json"), dict(spec.objectives))
    storage = optuna.storages.RDBStorage(optuna_storage_url(url))
    engine = build_engine(spec, url, name, SearchSession(name), storage=storage, signals=False, progress=False,
                          quiet=True)  # fmt: skip
    suggestions = [engine.searcher.suggest(f"t{i}") for i in range(count)]
    with Store.open(url) as store:
        refused = store.trials(name, flatten_config=False)
    return suggestions, refused.to_dict("records")


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_dry_run_proposes_first_what_the_search_proposes_first(tmp_path, monkeypatch, sampler):
    # top1 alone: no cost objective, so no initial spread, and the sampler itself meets the unbuildable width.
    spec_dict = {**coatnet_spec(sampler=sampler, n_trials=8, concurrency=4), "objectives": {"top1": "max"}}
    monkeypatch.chdir(tmp_path)
    checked = run_search(spec_dict, store=tmp_path / "dry.db", dry_run=True)
    assert isinstance(checked, SearchCheck) and len(checked.proposals) == 4
    assert not (tmp_path / "dry.db").exists() and list(tmp_path.iterdir()) == [] and not ray.is_initialized()
    spec = load_spec(spec_dict)
    suggestions, refused = _search_first_suggestions(spec, f"sqlite:///{tmp_path / 'real.db'}", 4)
    real = []
    for suggestion in suggestions:
        number, cost, params = split_tune_config(suggestion)
        config = build_trial_config(spec, params)
        fit_to_resources(config, spec.search.resources, None)
        real.append((number, split_params(spec, params)["sampled"], cost, load_trial_config(config).to_dict()))
    assert [(p.number, p.sampled, p.cost, p.config) for p in checked.proposals] == real
    assert [(s["number"], s["status"]) for s in checked.skipped] == [(r["number"], r["status"]) for r in refused]


def _earlier_study(url: str, final: dict | None = None, measurement: dict | None = None) -> dict:
    """A study ``earlier`` in the store at ``url`` with one completed trial (stored as a search stores it, with
    ``final`` and ``measurement`` added); returns the trial's sampled values."""
    spec = load_spec({**coatnet_spec(sampler="random"), "name": "earlier"})
    params = {"layout": "CCCT", "depths[3]": 2, "dims[3]": 64, "drop_path_rate": 0.1, "lr": 2.0e-3}
    config = build_trial_config(spec, params)
    with Store.open(url) as store:
        store.create_study("earlier", spec.model_dump(mode="json"), spec.objectives)
        store.start_trial("earlier", 0, config)
        store.finish_trial("earlier", 0, status="completed", config=config, final={"top1": 50.0, **(final or {})},
                           measurement={"params": 1.0e5, **(measurement or {})})  # fmt: skip
    return params


def test_a_dry_run_warm_start_enqueues_first_and_says_nothing(tmp_path, monkeypatch, capsys):
    """``check`` of a spec that warm-starts proposes the earlier study's trial first, from its own in-memory
    study: it printed ``warm start from ...: enqueued 1``, as though the real study had been touched."""
    params = _earlier_study(f"sqlite:///{tmp_path / 's.db'}")
    before = (tmp_path / "s.db").read_bytes()
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    mine = coatnet_spec(sampler="random", warm_start={"study": "earlier"})
    checked = run_search(mine, store=tmp_path / "s.db", dry_run=True)
    assert checked.proposals[0].sampled == params, checked.proposals[0]
    assert "warm start" not in capsys.readouterr().err
    assert (tmp_path / "s.db").read_bytes() == before


@pytest.mark.parametrize(("ranks", "device", "workers", "gpus", "reused"), [
    (1, "cpu (x86_64, 2 threads)", 1, 0, True),
    (2, "cpu (x86_64, 1 threads)", 1, 0, False),  # the reviewer's case: a 2-rank result copied into a 1-rank search
    (1, "cpu (x86_64, 2 threads)", 2, 0, False),
    (2, "cpu (x86_64, 1 threads)", 2, 0, True),
    (1, "cuda (NVIDIA H100 80GB HBM3)", 1, 0, False),  # a GPU's throughput is not a CPU's
    (1, "cpu (x86_64, 2 threads)", 1, 1, False),
])  # fmt: skip
def test_reuse_copies_only_a_result_that_ran_as_this_search_places_its_trials(tmp_path, ranks, device, workers, gpus,
                                                                              reused):  # fmt: skip
    """``reuse_results`` copied a trial trained on 2 data-parallel ranks into a 1-rank search (each rank draws its
    own dropout and drop-path, so the numbers differ), and a CPU trial's throughput into a GPU search."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    _earlier_study(url, final={"world_size": ranks}, measurement={"device": device})
    search = coatnet_spec(sampler="random", warm_start={"study": "earlier", "reuse_results": True},
                          resources={"cpus": 1, "gpus": gpus, "workers": workers})  # fmt: skip
    searcher = build_searcher(load_spec(search), url, "mine", SearchSession("mine"), factory=DryRunSearch, quiet=True)
    assert len(searcher._reusable) == int(reused)
    report = warm_start.apply(searcher, load_spec(search), url, "mine", quiet=True)
    assert (len(report.placed_elsewhere), "not reused (trial 0 ran on" in report.line("mine")) == (1 - reused,) * 2


def test_dry_run_refuses_a_resume_and_a_flag_that_is_not_a_bool(tmp_path):
    with pytest.raises(ValueError, match="dry_run checks a new search"):
        run_search(coatnet_spec(), store=tmp_path / "s.db", dry_run=True, resume=True)
    with pytest.raises(TypeError, match="dry_run must be True or False"):
        run_search(coatnet_spec(), store=tmp_path / "s.db", dry_run="yes")
    assert not (tmp_path / "s.db").exists()


def test_the_time_estimate_multiplies_a_timed_step_by_a_trials_steps(tmp_path):
    spec = load_spec({**coatnet_spec(), "training": {"epochs": 3, "lr": 2.0e-3}})
    checked = check_search(spec, f"sqlite:///{tmp_path / 's.db'}", proposals=0)
    time = checked.time
    assert checked.proposals == [] and [c.which for c in time.configs] == ["cheapest", "median", "dearest"]
    assert [c.flops for c in time.configs] == sorted(c.flops for c in time.configs)
    for timed in time.configs:  # 96 images in batches of 32: 3 steps an epoch, 3 epochs
        assert (timed.batch, timed.steps) == (32, 9) and timed.step_s > 0
        assert timed.trial_s == pytest.approx(9 * timed.step_s)
    low, _, high = time.total_s
    assert low == pytest.approx(min(c.trial_s for c in time.configs) * 6 / 3)
    assert high == pytest.approx(max(c.trial_s for c in time.configs) * 6 / 3)
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(("n_trials", "concurrency", "rounds"), [(2, 4, 1), (5, 2, 3), (4, 4, 1), (1, 1, 1)])
def test_the_time_estimate_counts_whole_rounds_of_trials(tmp_path, n_trials, concurrency, rounds):
    """Trials run ``concurrency`` at a time and a round lasts a trial's time: 2 trials at concurrency 4 take one
    trial's time, not half of it (the estimate said 0.5x one trial's time), and 5 at 2 take three rounds."""
    spec = load_spec({**coatnet_spec(n_trials=n_trials, concurrency=concurrency), "training": {"epochs": 1}})
    time = check_search(spec, f"sqlite:///{tmp_path / 's.db'}", proposals=0).time
    low, _, high = time.total_s
    assert low == pytest.approx(min(c.trial_s for c in time.configs) * rounds)
    assert high == pytest.approx(max(c.trial_s for c in time.configs) * rounds)
    assert low >= min(c.trial_s for c in time.configs)


@pytest.mark.parametrize(
    "data",
    [
        {"name": "synthetic", "train_size": 100},
        {"name": "synthetic", "train_size": 100, "val_fraction": 0.15},
        {"name": "digits"},
        {"name": "digits", "val_fraction": 0.3},
        {"name": "mnist5k", "train_size": 200},
        {"name": "mnist5k"},
    ],
)
def test_the_epoch_size_the_estimate_uses_is_the_one_the_loaders_build(data):
    config = DataConfig(**data)
    train, *_ = in_memory_splits(config)
    assert training_images(config) == len(train.labels)


def test_a_timed_training_step_leaves_the_thread_count_as_it_was():
    before = torch.get_num_threads()
    config = PRESETS["coatnet_tiny32"].replace(num_classes=4)
    assert training_step_seconds(config, 4, threads=1) > 0
    assert torch.get_num_threads() == before


@pytest.mark.slow
def test_dry_run_proposals_are_the_trials_a_real_search_trains_first(tmp_path, monkeypatch):
    spec_dict = {**coatnet_spec(sampler="random", n_trials=2, concurrency=2), "objectives": {"top1": "max"}}
    spec_dict["search"]["resources"] = {"cpus": 1, "gpus": 0}
    monkeypatch.chdir(tmp_path)
    checked = run_search(spec_dict, store=tmp_path / "s.db", dry_run=True)
    assert not (tmp_path / "s.db").exists() and not ray.is_initialized()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        study = run_search(spec_dict, store=tmp_path / "s.db", results_dir=tmp_path / "ray")
    finally:
        ray.shutdown()
    spec = load_spec(spec_dict)
    with Store.open(f"sqlite:///{tmp_path / 's.db'}", create=False) as store:
        trials = store.trials(study.name, flatten_config=False).to_dict("records")
    trained = {}
    for trial in trials:
        if trial["status"] == "completed":
            config = dict(trial["config"])
            fit_to_resources(config, spec.search.resources, None)
            trained[int(trial["number"])] = load_trial_config(config).to_dict()
    assert len(trained) == 2 and trained == {p.number: p.config for p in checked.proposals}
    assert sorted((int(t["number"]), t["status"]) for t in trials if t["status"] != "completed") == sorted(
        (s["number"], s["status"]) for s in checked.skipped
    )
