"""``archsearch studies --delete NAME --yes`` and ``--rename OLD NEW``: ours and Optuna's rows
together, in one transaction, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os

import optuna
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.store import Store, admin
from harness.store.liveness import driver_identity
from harness.store.urls import optuna_storage_url


def _study(url: str, name: str, trials: int = 2) -> None:
    """A study as a search leaves it: our rows (trials, costs, epochs, a verification) and Optuna's
    (params, values, attributes)."""
    storage = optuna.storages.RDBStorage(optuna_storage_url(url))
    study = optuna.create_study(study_name=name, storage=storage, directions=["maximize", "minimize"])
    study.set_user_attr("owner", "test")
    with Store.open(url) as store:
        store.create_study(name, {"name": name}, {"top1": "max", "flops": "min"})
        for number in range(trials):
            trial = study.ask({"depth": optuna.distributions.IntDistribution(1, 4)})
            trial.set_user_attr("archsearch", number)
            study.tell(trial, [50.0 + number, 1e6])
            store.finish_trial(
                name,
                number,
                status="completed",
                config={"model": {"depth": trial.params["depth"]}},
                measurement={"flops": 1e6, "params": 1000},
                final={"top1": 50.0 + number},
                epochs=[{"epoch": 1, "top1": 50.0}, {"epoch": 2, "top1": 50.0 + number}],
            )
            store.record_verified(name, number, {"throughput": 10.0, "rounds": 1})
        store.set_study_status(name, "completed")
    storage.engine.dispose()


def _state(url: str) -> dict:
    """What the store and Optuna hold, per study: our trial/epoch/verified counts, Optuna's trials."""
    storage = optuna.storages.RDBStorage(optuna_storage_url(url))
    try:
        optuna_trials = {
            name: len(optuna.load_study(study_name=name, storage=storage).trials)
            for name in optuna.get_all_study_names(storage)
        }
    finally:
        storage.engine.dispose()
    with Store.open(url, create=False) as store:
        ours = {
            name: (len(store.trials(name)), len(store.learning_curves(name)), len(store.verified(name)))
            for name in store.study_names()
        }
    return {"ours": ours, "optuna": optuna_trials}


def _studies_listed(url: str) -> list[str]:
    result = CliRunner().invoke(main, ["studies", "--store", url, "--format", "json"])
    assert result.exit_code == 0, result.output
    return [row["name"] for row in json.loads(result.output)]


def test_delete_removes_ours_and_optunas_rows_and_leaves_other_studies(store_url):
    _study(store_url, "a", trials=3)
    _study(store_url, "b")
    before = _state(store_url)
    assert before == {"ours": {"a": (3, 6, 3), "b": (2, 4, 2)}, "optuna": {"a": 3, "b": 2}}
    result = CliRunner().invoke(main, ["studies", "--store", store_url, "--delete", "a", "--yes"])
    assert result.exit_code == 0, result.output
    assert "deleted study a: 3 trials, 6 epochs, and its Optuna study" in result.output
    assert _studies_listed(store_url) == ["b"]
    assert _state(store_url) == {"ours": {"b": (2, 4, 2)}, "optuna": {"b": 2}}
    with Store.open(store_url, create=False) as store, store.engine.connect() as conn:  # no orphan left: all b's
        left = conn.exec_driver_sql("SELECT COUNT(*) FROM archsearch_epochs").scalar()
        params = conn.exec_driver_sql("SELECT COUNT(*) FROM trial_params").scalar()
        values = conn.exec_driver_sql("SELECT COUNT(*) FROM trial_values").scalar()
    assert (left, params, values) == (4, 2, 4)


def test_delete_without_yes_or_of_an_unknown_study_is_refused_in_one_line(store_url):
    _study(store_url, "a")
    runner = CliRunner()
    for args, said in (
        (["--delete", "a"], "add --yes"),
        (["--delete", "nope", "--yes"], "study 'nope' not found"),
        (["--delete", "a", "--rename", "a", "c", "--yes"], "one at a time"),
        (["--purge-results"], "goes with --delete"),
    ):
        result = runner.invoke(main, ["studies", "--store", store_url, *args])
        assert result.exit_code == 2, result.output
        assert said in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert _studies_listed(store_url) == ["a"]


def test_a_failure_inside_the_delete_leaves_everything(store_url, monkeypatch):
    _study(store_url, "a")
    _study(store_url, "b")
    before = _state(store_url)
    real = admin.delete_optuna_rows

    def fail_after_deleting(conn, name):
        real(conn, name)  # ours and Optuna's rows gone inside the transaction, then the failure
        raise RuntimeError("disk gone")

    monkeypatch.setattr(admin, "delete_optuna_rows", fail_after_deleting)
    with Store.open(store_url, create=False) as store, pytest.raises(RuntimeError, match="disk gone"):
        store.delete_study("a")
    assert _state(store_url) == before


def test_a_study_whose_driver_is_alive_is_neither_deleted_nor_renamed(store_url):
    _study(store_url, "a")
    with Store.open(store_url, create=False) as store:  # the driver: a live process that is not this one
        store.set_study_status("a", "running", driver=driver_identity(os.getppid()))
    for args in (["--delete", "a", "--yes"], ["--rename", "a", "c"]):
        result = CliRunner().invoke(main, ["studies", "--store", store_url, *args])
        assert result.exit_code == 2, result.output
        assert "its search is running" in result.output, result.output
    assert _studies_listed(store_url) == ["a"]


def test_rename_changes_ours_and_optunas_name_and_refuses_a_taken_or_bad_name(store_url):
    _study(store_url, "a")
    _study(store_url, "b")
    runner = CliRunner()
    result = runner.invoke(main, ["studies", "--store", store_url, "--rename", "a", "c.v2"])
    assert result.exit_code == 0, result.output
    assert "renamed study a to c.v2" in result.output
    assert sorted(_studies_listed(store_url)) == ["b", "c.v2"]
    assert _state(store_url) == {"ours": {"b": (2, 4, 2), "c.v2": (2, 4, 2)}, "optuna": {"b": 2, "c.v2": 2}}
    for new, said in (("b", "a study of that name exists"), ("../x", "not a valid study name")):
        result = runner.invoke(main, ["studies", "--store", store_url, "--rename", "c.v2", new])
        assert result.exit_code == 2 and said in result.output, result.output
    optuna.create_study(study_name="only-optuna", storage=optuna_storage_url(store_url))
    result = runner.invoke(main, ["studies", "--store", store_url, "--rename", "c.v2", "only-optuna"])
    assert result.exit_code == 2 and "Optuna already has a study of that name" in result.output, result.output
    assert sorted(_studies_listed(store_url)) == ["b", "c.v2"]


def test_purge_results_removes_the_experiment_dir_only_when_all_of_it_is_ours(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    results = tmp_path / "results"
    _study(url, "a")
    _study(url, "b")
    (results / "a" / "trial_0").mkdir(parents=True, mode=0o700)
    (results / "a" / "trial_0" / "result.json").write_text("{}")
    (results / "b").mkdir(mode=0o700)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (results / "b" / "link").symlink_to(outside)
    runner = CliRunner()
    args = ["studies", "--store", url, "--results-dir", str(results), "--yes", "--purge-results"]
    result = runner.invoke(main, [*args, "--delete", "b"])  # a link inside: refused, nothing deleted
    assert result.exit_code == 2 and "symbolic link" in result.output, result.output
    assert sorted(_studies_listed(url)) == ["a", "b"] and (outside / "keep.txt").exists()
    result = runner.invoke(main, [*args, "--delete", "a"])
    assert result.exit_code == 0, result.output
    assert f"removed {results / 'a'}" in result.output
    assert not (results / "a").exists() and (results / "b").exists()
    result = runner.invoke(main, ["studies", "--store", url, "--results-dir", str(results), "--delete", "b", "--yes"])
    assert result.exit_code == 0 and "left (--purge-results removes them)" in result.output, result.output
    assert (results / "b" / "link").is_symlink() and (outside / "keep.txt").exists()
