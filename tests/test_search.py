"""The search end to end with real Ray Tune, real Optuna and a real store (SQLite here)."""

from __future__ import annotations

import os

import numpy as np
import optuna
import pytest
import ray

from dashboards.pareto import non_dominated, pareto_front
from search_space.validation import load_spec


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def tiny_spec(**changes) -> dict:
    spec = {
        "name": "tiny",
        "family": "cait",
        "base_model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2, "ca_depth": 1},
        "data": {"name": "synthetic", "num_classes": 4, "train_size": 128, "val_size": 64, "batch_size": 32},
        "training": {"epochs": 2, "lr": 1e-3},
        "measure": {"batch_size": 4, "repeats": 1, "warmup": 0, "latency": False},
        # lr makes every sampled configuration distinct (a repeated one would be a duplicate, not trained)
        "params": {"embed_dim": {"choice": [32, 48, 64]}, "depth": {"int": [1, 2]}, "lr": {"float": [1e-4, 1e-2]}},
        "objectives": {"top1": "max", "flops": "min"},
        "search": {"sampler": "random", "n_trials": 4, "concurrency": 2, "seed": 1},
    }
    spec.update(changes)
    return spec


def run(spec_dict: dict, tmp_path, name: str):
    from harness.search.driver import run_search
    from harness.store import Store

    url = f"sqlite:///{tmp_path / 'store.db'}"
    summary = run_search(load_spec(spec_dict), url, study_name=name, results_dir=tmp_path / "ray")
    store = Store.open(url, create=False)
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'store.db'}")
    return summary, store, study


@pytest.mark.slow
def test_a_multi_objective_search_matches_ray_optuna_and_the_store(local_ray, tmp_path):
    summary, store, study = run(tiny_spec(), tmp_path, "mo")
    trials = store.trials("mo")
    assert summary.counts["completed"] == 4 and len(trials) == 4
    # Per trial, Tune keeps only result.json (its ResultGrid and a restore read it): no CSV or
    # TensorBoard copy of what the store holds, and the variable that says so is put back.
    trial_dirs = [d for d in (tmp_path / "ray" / "mo").iterdir() if d.is_dir()]
    assert len(trial_dirs) == 4 and all((d / "result.json").stat().st_size > 0 for d in trial_dirs)
    assert not [f for d in trial_dirs for f in d.iterdir() if f.name == "progress.csv" or "tfevents" in f.name]
    assert "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS" not in os.environ
    # One to one: the store's numbers are Optuna's trial numbers, with the same outcome and values.
    by_number = {t.number: t for t in study.trials}
    assert sorted(trials["number"]) == sorted(by_number)
    for _, row in trials.iterrows():
        ot = by_number[row["number"]]
        assert ot.state == optuna.trial.TrialState.COMPLETE and row["status"] == "completed"
        assert ot.values == pytest.approx([row["top1"], row["flops"]])
        assert ot.params["embed_dim"] == row["config.model.embed_dim"]
        assert ot.params["depth"] == row["config.model.depth"]
    curves = store.learning_curves("mo")
    assert sorted(curves.groupby("number")["epoch"].max()) == [2, 2, 2, 2]
    # How each trial ran is in its record: eager on CPU (no graphs), data workers within the 1 CPU
    # Ray assigned it (the spec's default resources), cuDNN/TF32 as set.
    assert (trials["compiled"] == 0.0).all() and (trials["compiled_graphs"] == 0.0).all()
    assert (trials["data_workers"] == 0.0).all() and (trials["cpus"] == 1.0).all()
    assert {"cudnn_benchmark", "tf32_matmul"} <= set(trials.columns)
    # The reported front is the non-dominated set of the completed trials.
    points = trials[["top1", "flops"]].to_numpy(dtype=float) * np.array([-1.0, 1.0])
    expected = set(trials["number"][non_dominated(points)])
    assert set(summary.front["number"]) == expected
    assert {t.number for t in study.best_trials} == expected
    # `archsearch pareto` on the study the search produced agrees with the store and Optuna.
    import json

    from click.testing import CliRunner

    from harness.cli import main

    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = CliRunner().invoke(
        main, ["pareto", "mo", "--objectives", "top1:max,flops:min", "--store", url, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    assert {row["number"] for row in json.loads(result.output)} == expected
    # ... and so does the report's front table.
    from dashboards.report import write_report

    html = write_report(store, ["mo"], {"top1": "max", "flops": "min"}, tmp_path / "report.html").read_text()
    table = html[html.index("Pareto front") :].split("</table>")[0]
    shown = {int(n) for n in __import__("re").findall(r"<tr>\s*<td[^>]*>(\d+)</td>", table)}
    assert shown == expected


@pytest.mark.slow
def test_constraints_failures_and_divergence_are_recorded_and_the_search_goes_on(local_ray, tmp_path):
    spec = tiny_spec(
        params={
            "embed_dim": {"choice": [32, 64]},
            "lr": {"choice": [1e-3, 1e7]},  # 1e7 diverges
            "data.name": {"choice": ["synthetic", "cifar10"]},  # cifar10 without data_dir fails to build
        },
        training={"epochs": 1, "lr": 1e-3, "grad_clip": None, "warmup_epochs": 0},
        constraints=["flops <= 1.5e6"],  # embed_dim 64 is over budget
        search={"sampler": "random", "n_trials": 8, "concurrency": 2, "seed": 3},
    )
    _, store, study = run(spec, tmp_path, "outcomes")
    trials = store.trials("outcomes")
    statuses = trials.set_index("number")["status"].to_dict()
    trained = trials[~trials["status"].isin(["infeasible", "duplicate"])]
    # 4 of the 8 configurations are feasible (embed_dim 32): each is trained (infeasible and duplicate
    # proposals take no budget), then the space has nothing new and the search ends short of n_trials 8.
    combos = set(zip(trained["config.training.lr"], trained["config.data.name"], strict=True))
    assert combos == {(1e-3, "synthetic"), (1e-3, "cifar10"), (1e7, "synthetic"), (1e7, "cifar10")}
    assert len(trained) <= 8
    # No dispatched trial violates the constraint (the closed-form cost is exact).
    assert (trials[trials["status"] != "infeasible"]["flops"].dropna() <= 1.5e6).all()
    infeasible = trials[trials["status"] == "infeasible"]
    assert (infeasible["config.model.embed_dim"] == 64).all()
    for number in infeasible["number"]:  # the sampler is told why (Optuna's constraint attributes)
        trial = study.trials[number]
        assert any(key.startswith("constraints") for key in trial.system_attrs), trial.system_attrs
    assert infeasible["error"].str.contains("flops <= 1.5e6").all()
    # Every outcome reaches the store and Optuna, one to one.
    by_number = {t.number: t for t in study.trials}
    assert set(statuses) == set(by_number)
    for number, status in statuses.items():
        row = trials.set_index("number").loc[number]
        state = by_number[number].state
        if status == "duplicate":  # the same config as a trial that was running: told that trial's outcome
            assert state == by_number[int(row["duplicate_of"])].state, (number, state)
            continue
        if row["config.data.name"] == "cifar10" and status != "infeasible":
            assert status == "failed" and "data_dir" in row["error"]
        elif row["config.training.lr"] == 1e7 and status != "infeasible":
            assert status == "diverged" and row["diverged_at_step"] >= 1
        expected_state = {
            "completed": optuna.trial.TrialState.COMPLETE,
            "infeasible": optuna.trial.TrialState.PRUNED,
            "failed": optuna.trial.TrialState.FAIL,
            "diverged": optuna.trial.TrialState.FAIL,
        }[status]
        assert state == expected_state, (number, status, state)
    front = pareto_front(trials, {"top1": "max", "flops": "min"})
    assert set(front["status"]) <= {"completed"}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pareto", "single"])
def test_asha_stopped_trials_are_pruned_and_kept_off_the_front(local_ray, tmp_path, mode):
    """MO-ASHA (the default with two objectives) and Ray's single-metric ASHA alike: stopped trials
    are pruned, told PRUNED to Optuna, and never on the front."""
    spec = tiny_spec(
        # warmup_epochs keeps the 8 sampled configurations distinct (a repeat would be a duplicate)
        params={
            "lr": {"choice": [3e-3, 1e-6]},
            "embed_dim": {"choice": [32, 48]},
            "warmup_epochs": {"float": [0, 0.5]},
        },
        training={"epochs": 4, "lr": 1e-3},
        objectives={"top1": "max", "flops": "min"},
        search={
            "sampler": "random",
            "n_trials": 8,
            "initial_spread": 0,  # the sampler alone: the sequence this test was written on
            "concurrency": 2,
            "seed": 2,
            # rank_gate off: 8 trials never measure a rung's rank transfer, and this is the plain rule's plumbing
            "early_stopping": {"metric": "top1", "grace_period": 1, "reduction_factor": 2, "mode": mode,
                               "rank_gate": False},
        },
    )
    summary, store, study = run(spec, tmp_path, "asha")
    trials = store.trials("asha").set_index("number")
    pruned = trials[trials["status"] == "pruned"]
    assert len(pruned) >= 1 and summary.counts["pruned"] == len(pruned)
    assert (trials["status"].isin(["completed", "pruned"])).all()
    curves = store.learning_curves("asha").groupby("number")["epoch"].max()
    for number in pruned.index:
        assert curves[number] < 4  # stopped before the end of its budget
        assert study.trials[number].state == optuna.trial.TrialState.PRUNED
    assert not set(summary.front["number"]) & set(pruned.index)


@pytest.mark.slow
def test_a_search_with_the_default_early_stopping_runs_its_rank_gate_under_tune(local_ray, tmp_path, capfd):
    """The default early stopping (MO-ASHA behind the rank gate) under Ray Tune: Tune pickles the scheduler
    with its experiment state, and the gate's announcer leaves the driver's session behind (a search with
    early stopping once failed on it); the gate speaks in the search's own lines."""
    spec = tiny_spec(
        params={"lr": {"choice": [3e-3, 1e-6]}, "embed_dim": {"choice": [32, 48]}},
        training={"epochs": 3, "lr": 1e-3},
        objectives={"top1": "max", "flops": "min"},
        # One trial at a time: the order in which trials reach rung 1, which decides whether MO-ASHA asks to
        # stop one there (the gate speaks only then), is the proposals' order, not two workers' race (an
        # idle clean-clone run once had the good trial second, and nothing to say).
        search={"sampler": "random", "n_trials": 4, "initial_spread": 0, "concurrency": 1, "seed": 2,
                "early_stopping": {"metric": "top1", "grace_period": 1, "reduction_factor": 2}},
    )
    summary, _, _ = run(spec, tmp_path, "gated")
    assert summary.counts["completed"] + summary.counts["pruned"] == 4
    err = capfd.readouterr().err
    assert "[gated] early stopping, rung 1: not pruning yet" in err and "never pickled" not in err


@pytest.mark.slow
def test_a_pruned_configuration_run_again_resumes_from_its_checkpoint_under_tune(local_ray, tmp_path):
    """Issue 60: once the space has nothing new, a configuration MO-ASHA pruned runs again from the checkpoint
    its pruned trial left (as ASHA's promotions continue a paused trial), not from epoch 1: its record says so,
    and the store holds each of its epochs once, the first under the pruned trial, the rest under the retry."""
    spec = tiny_spec(
        params={"lr": {"choice": [3e-3, 1e-6]}},  # two configurations: the second meets the first at rung 1
        training={"epochs": 3, "lr": 1e-3},
        search={"sampler": "random", "n_trials": 4, "initial_spread": 0, "concurrency": 1, "seed": 0,
                "early_stopping": {"metric": "top1", "grace_period": 1, "reduction_factor": 2, "mode": "pareto",
                                   "rank_gate": False}},
    )  # fmt: skip
    _, store, study = run(spec, tmp_path, "resume")
    trials = store.trials("resume").set_index("number")
    pruned = trials.index[trials["status"] == "pruned"]
    assert len(pruned) == 1, f"MO-ASHA pruned {len(pruned)} trials: the test no longer exercises the retry"
    retried = trials[trials["resumed_from_trial"].notna()] if "resumed_from_trial" in trials else trials.iloc[:0]
    assert len(retried) == 1 and int(retried["resumed_from_trial"].iloc[0]) == pruned[0]
    retry = int(retried.index[0])
    assert retried.loc[retry, "status"] == "completed" and int(retried.loc[retry, "resumed_from_epoch"]) == 1
    assert study.trials[retry].user_attrs["retry_of"] == pruned[0]
    curves = store.learning_curves("resume")
    assert sorted(curves[curves["number"] == pruned[0]]["epoch"]) == [1]
    assert sorted(curves[curves["number"] == retry]["epoch"]) == [2, 3]  # epoch 1 was not trained again


@pytest.mark.slow
def test_a_grid_search_runs_each_point_once_and_ends_without_an_error(local_ray, tmp_path, capfd):
    # 3 grid points, one of them infeasible, and more trials asked for than the grid has: each point
    # runs (or is rejected) once, then the search ends, with no Optuna `Study.stop` error from Tune.
    spec = tiny_spec(
        training={"epochs": 1, "lr": 1e-3},
        params={"embed_dim": {"choice": [32, 48, 64]}},
        constraints=["params <= 80000"],
        search={"sampler": "grid", "n_trials": 6, "concurrency": 2, "seed": 0},
    )
    summary, store, study = run(spec, tmp_path, "grid")
    trials = store.trials("grid")
    assert sorted(trials["config.model.embed_dim"]) == [32, 48, 64]
    assert trials["number"].is_unique and len(study.trials) == 3
    statuses = dict(zip(trials["config.model.embed_dim"], trials["status"], strict=True))
    assert statuses[32] == statuses[48] == "completed" and statuses[64] == "infeasible"
    assert summary.counts["completed"] == 2
    err = capfd.readouterr().err
    assert "Study.stop" not in err and "Error stopping trial" not in err


def test_spec_errors_name_the_key_and_nothing_runs(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    path = tmp_path / "spec.yaml"
    path.write_text(
        "name: bad\nfamily: cait\nbase_model: cait_tiny32\nobjectives: {top1: max}\n"
        "params:\n  embed_dim: {choice: [96, 192, 100]}\n  num_heads: 8\n"
    )
    result = CliRunner().invoke(main, ["search", str(path), "--store", f"sqlite:///{tmp_path / 's.db'}"])
    assert result.exit_code == 2
    assert "params.embed_dim.choice[2]: 100 is not divisible by num_heads 8" in result.output
    assert not (tmp_path / "s.db").exists()


@pytest.mark.slow
def test_sigkill_of_the_driver_then_resume_completes_exactly_the_requested_trials(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    from harness.store import Store

    spec = tiny_spec(
        name="killed",
        params={**tiny_spec()["params"], "ca_depth": {"fixed": 2}, "mlp_ratio": 2.0},  # fixed: kept on resume
        training={"epochs": 6, "lr": 1e-3},
        data={"name": "synthetic", "num_classes": 4, "train_size": 512, "val_size": 64, "batch_size": 32},
        search={"sampler": "tpe", "n_trials": 8, "concurrency": 2, "seed": 5},
    )
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    exe = os.path.join(os.path.dirname(sys.executable), "archsearch")
    common = ["--store", url, "--results-dir", str(tmp_path / "ray")]
    driver = subprocess.Popen(
        [exe, "search", str(spec_path), *common],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 180
    completed = 0
    while time.time() < deadline and driver.poll() is None:
        time.sleep(1.0)
        if (tmp_path / "store.db").exists():
            try:
                with Store.open(url, create=False) as store:
                    completed = store.counts("killed")["completed"] if "killed" in store.study_names() else 0
            except Exception:
                continue
            if completed >= 5:  # late: trials dispatched after Ray's last snapshot are likely in flight
                break
    assert driver.poll() is None, "the search ended before it could be killed"
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and what it started in its session
    driver.wait()
    with Store.open(url, create=False) as store:
        before = store.counts("killed")
        row = store.studies().set_index("name").loc["killed"]  # its driver is dead: not "running"
    assert 5 <= before["completed"] < 8
    assert row["status"] == "interrupted" and "stopped before the search ended" in row["message"], row

    resumed = subprocess.run(
        [exe, "search", "--resume", "killed", *common], capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with Store.open(url, create=False) as store:
        trials = store.trials("killed")
        counts = store.counts("killed")
    dispatched = trials[trials["status"] != "infeasible"]
    assert counts["running"] == 0
    assert store_status(url, "killed") == "completed"
    said = "\n".join(f"{r.number} {r.status}: {r.error}" for r in dispatched.itertuples() if r.status != "completed")
    assert (dispatched["status"] == "completed").sum() == 8, said
    assert trials["number"].is_unique
    assert set(dispatched["config.model.ca_depth"]) == {2} and set(dispatched["config.model.mlp_ratio"]) == {2.0}
    study = optuna.load_study(study_name="killed", storage=url)
    states = [t.state for t in study.trials]
    assert optuna.trial.TrialState.RUNNING not in states
    # Optuna holds the trained trials' values, and copies of them for the configurations the restored
    # sampler proposed again (stored ``duplicate``, not trained, not counted towards n_trials).
    told = set(dispatched[dispatched["status"].isin(["completed", "duplicate"])]["number"])
    assert {t.number for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE} == told


@pytest.mark.slow
@pytest.mark.parametrize("form", ["fixed", "bare"])
def test_fixed_and_bare_parameters_reach_every_trial_of_a_search(local_ray, tmp_path, form):
    """Issue 37's specs, through a real search: the stored configs carry the fixed values, the
    stored parameters keep them apart from the sampled ones, and the stored (fvcore) FLOPs and
    parameter counts are the cost model's for that config: what was priced is what was trained."""
    from search_space.sampling import cost_violations

    values = {"ca_depth": 2, "mlp_ratio": 2.0}  # the base has ca_depth 1, mlp_ratio 4.0
    fixed = values if form == "bare" else {name: {"fixed": value} for name, value in values.items()}
    spec_dict = tiny_spec(
        name=f"fixed-{form}",
        params={"depth": {"choice": [1, 2]}, **fixed},
        training={"epochs": 1, "lr": 1e-3},
        search={"sampler": "random", "n_trials": 2, "concurrency": 1, "seed": 0},
    )
    spec = load_spec(spec_dict)
    summary, store, _ = run(spec_dict, tmp_path, f"fixed-{form}")
    trials = store.trials(f"fixed-{form}", flatten_config=False)
    trained = trials[trials["status"] == "completed"]
    assert summary.counts["completed"] == len(trained) >= 1
    for row in trained.itertuples():
        assert row.config["model"]["ca_depth"] == 2 and row.config["model"]["mlp_ratio"] == 2.0
        assert row.parameters == {"sampled": {"depth": row.config["model"]["depth"]}, "fixed": values}
        priced, _ = cost_violations(spec, row.config)
        assert (row.flops, row.params, row.flops_source) == (priced["flops"], priced["params"], "fvcore")


@pytest.mark.slow
def test_a_stop_rule_that_ends_the_search_before_any_trial_completes_is_completed_and_named(local_ray, tmp_path):
    """``max_hours: 1e-6``: the user's rule ended it, so the study is ``completed`` with the rule as its
    message (it was ``failed: no trial ran``)."""
    spec = tiny_spec(name="hours", search={"sampler": "random", "n_trials": 4, "seed": 0, "stop": {"max_hours": 1e-6}})
    summary, store, _ = run(spec, tmp_path, "hours")
    assert summary.status == "completed" and summary.message.startswith("stopped early: max_hours")
    assert store.study("hours")["status"] == "completed"


def store_status(url: str, name: str) -> str:
    from harness.store import Store

    with Store.open(url, create=False) as store:
        return store.study(name)["status"]


@pytest.mark.slow
def test_a_configuration_already_trained_or_running_is_recorded_as_a_duplicate_not_trained_again(local_ray, tmp_path):
    spec = tiny_spec(
        name="dups",
        training={"epochs": 1, "lr": 1e-3},
        params={"embed_dim": {"choice": [32, 48, 64]}, "depth": {"int": [1, 2]}},  # 6 distinct configurations
        search={"sampler": "tpe", "n_trials": 10, "concurrency": 2, "seed": 3},
    )
    summary, store, study = run(spec, tmp_path, "dups")
    trials = store.trials("dups")
    assert set(trials["status"]) <= {"completed", "duplicate"}
    keys = trials["config.model.embed_dim"].astype(str) + "/" + trials["config.model.depth"].astype(str)
    trained = trials[trials["status"] == "completed"]
    duplicates = trials[trials["status"] == "duplicate"]
    # Duplicates take no budget: the searcher asks again until the 6 configurations are all trained,
    # then ends (nothing new is left), short of n_trials 10.
    assert len(trained) == 6 and keys[trained.index].is_unique and len(trials) == 6 + len(duplicates)
    for _, row in duplicates.iterrows():  # each points at the trial that trained the same configuration
        original = int(row["duplicate_of"])
        assert keys[row.name] == keys[trials.index[trials["number"] == original][0]]
        assert original in set(trained["number"])
    assert summary.counts["duplicate"] == len(duplicates)
    states = {t.number: t for t in study.trials}
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in states.values()) and len(states) == len(trials)
    for _, row in duplicates.iterrows():  # Optuna was told the original's values
        assert states[row["number"]].values == states[int(row["duplicate_of"])].values
    assert set(summary.front["number"]) <= set(trained["number"])


@pytest.mark.slow
def test_a_flat_front_stops_the_search_before_n_trials_and_says_so(local_ray, tmp_path):
    """``search.stop.hypervolume_plateau``: every trial here reaches the same point (lr ~1e-9 leaves
    the seeded model untrained, FLOPs are fixed), so the front is flat from the first trial and
    the study ends after window + 1 completed trials, ``completed`` with the plateau as its
    message. The same study without the rule runs all its trials."""
    from click.testing import CliRunner

    from harness.cli import main
    from harness.store import Store

    flat = {
        "params": {"lr": {"float": [1e-9, 2e-9]}},
        "training": {"epochs": 1, "lr": 1e-3},
        "search": {"sampler": "random", "n_trials": 8, "concurrency": 1, "seed": 1},
    }
    stopped_spec = tiny_spec(**flat)
    stopped_spec["search"] = {**flat["search"], "stop": {"hypervolume_plateau": {"window": 2, "min_gain": 0.001}}}
    summary, store, _ = run(stopped_spec, tmp_path, "plateau")
    with store:
        counts = store.counts("plateau")
        study = store.study("plateau")
        interrupted = store.trials("plateau", statuses=("interrupted",))
    assert summary.status == "completed" and counts["completed"] == 3  # window + 1: the first gain measured
    assert counts["completed"] + counts["interrupted"] < 8 and counts["running"] == 0
    assert study["status"] == "completed" and "hypervolume plateau" in study["status_message"]
    assert "over the last 2 completed trials" in study["status_message"]
    assert all("stopped with the search" in e for e in interrupted.get("error", []))
    listed = CliRunner().invoke(main, ["studies", "--store", f"sqlite:///{tmp_path / 'store.db'}", "--format", "json"])
    assert "hypervolume plateau" in listed.output
    from dashboards.report import write_report

    with Store.open(f"sqlite:///{tmp_path / 'store.db'}", create=False) as reader:
        html = write_report(reader, ["plateau"], None, tmp_path / "report.html").read_text()
    assert "hypervolume plateau" in html and "Hypervolume against finished trials" in html

    verified = {**flat, "search": {**flat["search"], "verify_front": True}}  # and the front re-measured alone
    full, store, _ = run(tiny_spec(**verified, name="full"), tmp_path, "full")
    assert full.status == "completed" and full.message is None
    with store:
        assert store.counts("full")["completed"] == 8
        assert store.study("full")["status_message"] is None
        assert set(store.verified("full")["number"]) == set(full.front["number"])
    assert full.verified["on_verified_front"].dtype == bool
    assert list((tmp_path / "ray" / "full").glob("*/checkpoint_*")) == []  # completed: checkpoints removed


@pytest.mark.slow
def test_a_warm_start_enqueues_the_earlier_front_first_skips_what_the_new_space_excludes_and_reuses_results(
    local_ray, tmp_path, capfd
):
    """``search.warm_start``: the earlier front (and its ``top`` best) are the new study's first
    trials; with ``reuse_results`` an identical trial config is copied, not retrained; values the
    new space excludes are skipped and counted."""
    earlier_spec = tiny_spec(name="earlier", search={"sampler": "random", "n_trials": 4, "concurrency": 2, "seed": 1,
                                                     "initial_spread": 0})  # fmt: skip
    _, store, earlier = run(earlier_spec, tmp_path, "earlier")
    from dashboards.pareto import study_front

    with store:
        front = [int(n) for n in study_front(store, "earlier", {"top1": "max", "flops": "min"})["number"]]
    assert front
    front_params = [earlier.trials[n].params for n in front]

    warm = {"study": "earlier", "top": 1, "reuse_results": True}
    later_search = {**earlier_spec["search"], "n_trials": len(front) + 2, "warm_start": warm}
    later_spec = tiny_spec(name="later", search=later_search)
    summary, store, later = run(later_spec, tmp_path, "later")
    with store:
        trials = store.trials("later").set_index("number").sort_index()
        records = store.trial_records("later", list(range(len(front))))
    assert [later.trials[i].params for i in range(len(front))] == front_params  # the earlier front first
    assert all(later.trials[i].user_attrs["warm_start"] == f"earlier#{n}" for i, n in enumerate(front))
    reused = trials[trials["reused_from"].notna()] if "reused_from" in trials else trials.iloc[:0]
    assert len(reused) >= len(front) and set(reused["status"]) == {"completed"}  # copied, not retrained
    assert all(records[i]["epochs"] for i in range(len(front)))  # the learning curve comes along
    assert summary.counts["completed"] == len(front) + 2
    assert "warm start from earlier: enqueued" in capfd.readouterr().err
    # After the enqueued trials the seeded sampler proposes the earlier study's trials again: one the
    # later study already holds is a duplicate, any other the earlier study completed is copied (not
    # only the enqueued ones: a sampled repeat of earlier trial 0 was retrained before).
    enqueued = len([t for t in later.trials if "warm_start" in t.user_attrs])
    repeats = range(enqueued, min(len(later.trials), enqueued + len(earlier.trials)))
    assert len(repeats) >= 2
    for number in repeats:
        again = number - enqueued  # the earlier trial this proposal repeats
        assert later.trials[number].params == earlier.trials[again].params
        if any(t.params == earlier.trials[again].params for t in later.trials[:enqueued]):
            assert trials.loc[number, "status"] == "duplicate"
        else:
            assert trials.loc[number, "status"] == "completed"
            assert trials.loc[number, "reused_from"] == f"earlier#{again}"

    narrowed = tiny_spec(
        name="narrow",
        params={**earlier_spec["params"], "lr": {"float": [2e-2, 3e-2]}},  # every earlier lr is outside
        search={**earlier_spec["search"], "n_trials": 2, "warm_start": {"study": "earlier"}, "keep_checkpoints": True},
    )
    run(narrowed, tmp_path, "narrow")
    kept = list((tmp_path / "ray" / "narrow").glob("*/checkpoint_*"))  # two epochs each, the last one kept
    assert len(kept) == 2 and len({path.parent for path in kept}) == 2
    from harness.search.worker.trainable import load_checkpoint

    assert [load_checkpoint(path)["epoch"] for path in kept] == [2, 2]  # the trained weights: the final epoch's
    err = capfd.readouterr().err
    assert f"enqueued 0, skipped {len(front)}" in err and "lr=" in err and "outside the new space" in err
