"""The SQL store, against SQLite AND PostgreSQL (the ``store_url`` fixture runs each test on both)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, inspect, text

from harness.cli import main
from harness.store import DEFAULT_STORE_URL, ENV_VAR, Store, StoreError, mask_url, resolve_store_url
from harness.store.engine import _alembic_config

CONFIG = {"model": {"family": "cait", "depth": 4, "embed_dim": 64}, "training": {"lr": 1e-3}, "seed": 0}
MEASUREMENT = {"params": 1000, "flops": 5000, "throughput": 12.5, "batch_size": 8, "dtype": "fp32", "device": "cpu"}


def epochs(n: int, offset: float = 0.0) -> list[dict]:
    return [{"epoch": e, "step": 10 * e, "train_loss": 2.0 / e, "top1": 10.0 * e + offset} for e in range(1, n + 1)]


@pytest.fixture
def store(store_url):
    with Store.open(store_url) as s:
        s.create_study("s1", {"name": "s1"}, {"top1": "max", "flops": "min"})
        yield s


def table_names(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


# -- schema --------------------------------------------------------------------------------------


def test_open_creates_prefixed_tables_at_the_head_revision(store_url):
    with Store.open(store_url) as store:
        assert store.schema_version() == "0011"
    tables = table_names(store_url.replace("postgresql://", "postgresql+psycopg://"))
    assert tables == {
        "archsearch_alembic_version",
        "archsearch_studies",
        "archsearch_verified",
        "archsearch_trials",
        "archsearch_measurements",
        "archsearch_epochs",
        "archsearch_test_predictions",
    }


def test_store_coexists_with_optuna_tables_in_the_same_database(store_url):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = store_url.replace("postgresql://", "postgresql+psycopg://")
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(study_name="opt", storage=storage, directions=["maximize", "minimize"])
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)), n_trials=3)
    with Store.open(store_url) as store:
        store.create_study("ours", {}, {"top1": "max"})
        store.finish_trial("ours", 0, status="completed", config=CONFIG, epochs=epochs(2))
        assert store.counts("ours")["completed"] == 1
    tables = table_names(url)
    assert {"studies", "trials", "alembic_version", "archsearch_studies", "archsearch_alembic_version"} <= tables
    # Optuna still reads its study (and its own alembic version) after ours was created.
    again = optuna.load_study(study_name="opt", storage=optuna.storages.RDBStorage(url))
    assert len(again.trials) == 3


def test_a_store_made_by_an_older_archsearch_opens_in_a_newer_one(store_url):
    from alembic import command

    url = store_url.replace("postgresql://", "postgresql+psycopg://")
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0001")  # what archsearch at schema 0001 created
        conn.execute(
            text(
                "INSERT INTO archsearch_studies (name, spec, objectives, status, created_at, updated_at, "
                'archsearch_version) VALUES (\'old\', \'{}\', \'[{"name": "top1", "direction": "max"}]\', '
                "'completed', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, '0.0.1')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO archsearch_trials (study_id, number, status, config, final) "
                "SELECT id, 0, 'completed', '{\"model\": {\"depth\": 3}}', '{\"top1\": 42.0}' FROM archsearch_studies"
            )
        )
    engine.dispose()
    with Store.open(store_url) as store:
        assert store.schema_version() == "0011"
        frame = store.trials("old")
        assert frame["top1"].tolist() == [42.0]
        assert frame["config.model.depth"].tolist() == [3]
        assert frame["diverged_at_step"].isna().all()  # the column 0002 added
        assert store.studies()["message"].isna().all()  # the column 0003 added


def test_a_store_of_a_newer_schema_is_refused_and_left_alone(store_url):
    Store.open(store_url).close()
    url = store_url.replace("postgresql://", "postgresql+psycopg://")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE archsearch_alembic_version SET version_num = '0099'"))
    with pytest.raises(StoreError, match="schema version 0099, newer than this archsearch"):
        Store.open(store_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM archsearch_alembic_version")).scalar() == "0099"
    engine.dispose()


# -- writes --------------------------------------------------------------------------------------


def test_a_studys_objectives_come_back_in_the_specs_order(store):
    objectives = [{"name": "flops", "direction": "min"}, {"name": "top1", "direction": "max"}]
    store.create_study("s2", {"name": "s2"}, objectives)
    assert list(store.objectives("s1").items()) == [("top1", "max"), ("flops", "min")]
    assert list(store.objectives("s2").items()) == [("flops", "min"), ("top1", "max")]
    with pytest.raises(StoreError, match="s3"):
        store.objectives("s3")


def test_writing_an_epoch_twice_updates_it(store):
    store.start_trial("s1", 0, CONFIG, seed=7, host="node-1")
    store.record_epoch("s1", 0, {"epoch": 1, "top1": 5.0})
    store.record_epoch("s1", 0, {"epoch": 1, "top1": 6.0})
    store.record_epoch("s1", 0, {"epoch": 2, "top1": 9.0})
    curves = store.learning_curves("s1")
    assert curves[["epoch", "top1"]].values.tolist() == [[1, 6.0], [2, 9.0]]
    assert store.counts("s1")["running"] == 1


def test_finishing_a_trial_twice_keeps_one_complete_record(store):
    store.start_trial("s1", 3, CONFIG, seed=7, host="node-1", device="cpu")
    for _ in range(2):
        store.finish_trial(
            "s1", 3, status="completed", config=CONFIG, measurement=MEASUREMENT, epochs=epochs(3), final={"top1": 30.0}
        )
    counts = store.study_counts("s1")
    assert counts.by_status["completed"] == 1 and counts.epochs == 3 and counts.total == 1
    row = store.trials("s1").iloc[0]
    assert (row["number"], row["status"], row["params"], row["flops"], row["top1"]) == (
        3,
        "completed",
        1000,
        5000,
        30.0,
    )
    assert (row["seed"], row["host"]) == (7, "node-1")  # kept from the start record
    assert row["config.model.depth"] == 4 and row["config.training.lr"] == 1e-3


def test_a_retried_start_keeps_one_row_and_the_first_start_time(store):
    store.start_trial("s1", 5, CONFIG, seed=7, host="node-1")
    first = store.trials("s1").iloc[0]["started_at"]
    store.finish_trial("s1", 5, status="failed", config=CONFIG, error="node lost")
    time.sleep(0.01)
    store.start_trial("s1", 5, CONFIG, seed=7, host="node-2")  # Ray Tune retries it elsewhere
    rows = store.trials("s1")
    assert len(rows) == 1
    row = rows.iloc[0]
    assert (row["status"], row["host"]) == ("running", "node-2")
    assert row["started_at"] == first


def test_a_failed_write_leaves_nothing_behind(store):
    bad_epochs = [*epochs(2), {"top1": 1.0}]  # the third has no epoch number
    with pytest.raises(StoreError, match="needs an 'epoch' number"):
        store.finish_trial("s1", 5, status="completed", config=CONFIG, measurement=MEASUREMENT, epochs=bad_epochs)
    assert store.counts("s1") == {**dict.fromkeys(store.counts("s1"), 0)}
    assert store.trials("s1").empty


def test_non_finite_final_metrics_are_stored_as_null(store):
    store.finish_trial("s1", 0, status="diverged", config=CONFIG, final={"top1": float("nan")}, diverged_at_step=12)
    row = store.trials("s1").iloc[0]
    assert row["status"] == "diverged" and row["diverged_at_step"] == 12
    assert row["top1"] is None or row["top1"] != row["top1"]


def test_unknown_status_and_unknown_study_are_errors(store):
    with pytest.raises(StoreError, match="unknown trial status 'done'"):
        store.finish_trial("s1", 0, status="done", config=CONFIG)
    with pytest.raises(StoreError, match=r"study 'nope' not found .*known studies: s1"):
        store.trials("nope")
    with pytest.raises(StoreError, match="already exists"):
        store.create_study("s1", {}, {"top1": "max"}, exist_ok=False)
    assert store.create_study("s1", {}, {"top1": "max"}) == store.create_study("s1", {}, {"top1": "max"})


def test_studies_lists_counts_by_status(store):
    for number, status in enumerate(["completed", "completed", "pruned", "failed", "infeasible", "diverged"]):
        store.finish_trial("s1", number, status=status, config=CONFIG)
    store.start_trial("s1", 9, CONFIG)
    store.create_study("s2", {}, {"top1": "max"})
    frame = store.studies().set_index("name")
    columns = ["trials", "completed", "pruned", "failed", "infeasible", "diverged", "running"]
    assert frame.loc["s1", columns].tolist() == [7, 2, 1, 1, 1, 1, 1]
    assert frame.loc["s1", "objectives"] == "top1:max,flops:min"
    assert frame.loc["s2", "trials"] == 0
    record = store.study("s1")
    assert record["archsearch_version"] and record["spec"] == {"name": "s1"}


def test_a_real_trial_result_round_trips(store):
    from trials.runner import run_trial

    result = run_trial(
        {
            "model": {"preset": "cait_tiny32", "depth": 1, "embed_dim": 32, "num_heads": 2},
            "data": {"name": "synthetic", "num_classes": 4, "train_size": 64, "val_size": 32, "batch_size": 32},
            "training": {"epochs": 2},
            "measure": {"batch_size": 2, "repeats": 1, "warmup": 0},
        }
    )
    assert result.status == "completed"
    data = result.to_dict()
    # As a search records a trial: its start, each epoch as it is reported, then its final record.
    store.start_trial("s1", 0, data["config"], seed=data["config"].get("seed"), host="here")
    for epoch in data["epochs"]:
        store.record_epoch("s1", 0, epoch)
    store.finish_trial(
        "s1", 0, status=data["status"], config=data["config"], measurement=data["cost"], final=data["final"]
    )
    row = store.trials("s1").iloc[0]
    assert row["params"] == result.cost.params and row["flops"] == result.cost.flops
    assert row["top1"] == pytest.approx(result.final["top1"])
    assert row["config.model.embed_dim"] == 32 and row["config.data.name"] == "synthetic"
    curves = store.learning_curves("s1")
    assert curves["epoch"].tolist() == [1, 2]
    assert curves["images_per_s"].notna().all()


# -- URLs and the command line ---------------------------------------------------------------------


def test_store_url_resolution(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert resolve_store_url(None) == DEFAULT_STORE_URL == "sqlite:///archsearch.db"
    monkeypatch.setenv(ENV_VAR, "sqlite:////tmp/x.db")
    assert resolve_store_url(None) == "sqlite:////tmp/x.db"
    assert resolve_store_url("postgresql://h/db") == "postgresql://h/db"


def test_credentials_never_appear_in_errors():
    assert mask_url("postgresql://alice:s3cret@db.example:5432/x") == "postgresql://alice:***@db.example:5432/x"
    with pytest.raises(StoreError) as excinfo:
        Store.open("postgresql://alice:s3cret@127.0.0.1:1/x")
    assert "s3cret" not in str(excinfo.value) and "cannot connect" in str(excinfo.value)
    with pytest.raises(StoreError) as excinfo:
        Store.open("mysql://alice:s3cret@localhost/x")
    assert "s3cret" not in str(excinfo.value) and "unsupported store URL scheme 'mysql'" in str(excinfo.value)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["studies", "--store", "mysql://u:pw@h/db"], "unsupported store URL scheme"),
        (["studies", "--store", "postgresql://u:pw@127.0.0.1:1/db"], "cannot connect to the store"),
        (["trials", "nope", "--store", "sqlite:///{tmp}/missing.db"], "no store at"),
    ],
)
def test_cli_bad_store_input_is_a_one_line_error_with_exit_2(tmp_path, args, fragment):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert fragment in result.output and "pw" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "missing.db").exists()  # nothing written


def test_cli_studies_and_trials(store, store_url):
    store.finish_trial("s1", 0, status="completed", config=CONFIG, measurement=MEASUREMENT, final={"top1": 31.0})
    store.finish_trial("s1", 1, status="failed", config={**CONFIG, "seed": 1}, error="boom")
    runner = CliRunner()
    result = runner.invoke(main, ["studies", "--store", store_url, "--format", "json"])
    assert result.exit_code == 0, result.output
    (study,) = json.loads(result.output)
    assert (study["name"], study["trials"], study["completed"], study["failed"]) == ("s1", 2, 1, 1)
    result = runner.invoke(main, ["trials", "s1", "--store", store_url, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["number"] for r in rows] == [0, 1]
    assert rows[0]["params"] == 1000 and rows[0]["flops"] == 5000 and rows[0]["throughput"] == 12.5
    assert rows[0]["top1"] == 31.0 and rows[1]["top1"] is None and rows[1]["status"] == "failed"
    table = runner.invoke(main, ["trials", "s1", "--store", store_url])
    assert table.exit_code == 0 and "config.seed" in table.output.splitlines()[0]  # the varying config key
    unknown = runner.invoke(main, ["trials", "nope", "--store", store_url])
    assert unknown.exit_code == 2 and "study 'nope' not found" in unknown.output
    csv = runner.invoke(main, ["trials", "s1", "--store", store_url, "--format", "csv"])
    assert csv.exit_code == 0 and csv.output.splitlines()[0].startswith("number,status")


def test_default_store_is_sqlite_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    with Store.open() as store:
        store.create_study("here", {}, {"top1": "max"})
    assert Path("archsearch.db").exists()
    result = CliRunner().invoke(main, ["studies", "--format", "json"])
    assert [s["name"] for s in json.loads(result.output)] == ["here"]


def test_migrations_build_exactly_the_schema_the_code_declares(store_url):
    """schema.py and migrations/versions must not drift apart (a change to one needs the other)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from harness.store.schema import VERSION_TABLE, Base

    Store.open(store_url).close()
    engine = create_engine(store_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "version_table": VERSION_TABLE})
        assert compare_metadata(context, Base.metadata) == []
    engine.dispose()


def test_trial_records_are_whole_records_each_with_its_own_curve(store):
    """What a warm start copies: every trial (or those named, or those of some statuses), each with
    its config, final metrics, measurement and its own epochs in order (one scan of the epochs
    table for a whole study, bucketed by trial)."""
    for number, status in enumerate(["completed", "failed", "completed"]):
        config = {**CONFIG, "training": {"lr": 1e-3 * (number + 1)}}
        store.finish_trial(
            "s1", number, status=status, config=config, measurement=MEASUREMENT if status == "completed" else None,
            epochs=epochs(number + 1, offset=number / 10), final={"top1": 30.0 + number},
        )  # fmt: skip
    every = store.trial_records("s1")
    assert sorted(every) == [0, 1, 2] and every[1]["status"] == "failed" and every[1]["measurement"] == {}
    completed = store.trial_records("s1", statuses=("completed",))
    assert sorted(completed) == [0, 2] and completed[2] == every[2]
    assert store.trial_records("s1", [2, 5]) == {2: every[2]} and store.trial_records("s1", []) == {}
    record = every[2]
    assert record["config"]["training"]["lr"] == 3e-3 and record["final"]["top1"] == 32.0
    assert record["measurement"]["flops"] == 5000 and record["measurement"]["device"] == "cpu"
    assert [(e["epoch"], e["top1"]) for e in record["epochs"]] == [(1, 10.2), (2, 20.2), (3, 30.2)]
    assert [e["epoch"] for e in every[0]["epochs"]] == [1] and len(every[1]["epochs"]) == 2


def test_outcomes_is_the_lean_frame_of_trials(store):
    store.finish_trial("s1", 0, status="completed", config=CONFIG, measurement=MEASUREMENT, final={"top1": 31.0})
    store.finish_trial("s1", 1, status="failed", config=CONFIG, error="boom")
    lean, full = store.outcomes("s1"), store.trials("s1")
    assert list(lean["number"]) == list(full["number"]) == [0, 1]
    import pandas as pd

    for column in ("status", "params", "flops", "throughput", "top1"):
        pd.testing.assert_series_equal(lean[column], full[column], check_dtype=False)
    assert lean["top1"].tolist()[0] == 31.0
    assert not any(c.startswith("config.") for c in lean.columns)


def _ranked_study(store) -> None:
    """Five trials with top1 in the final JSON and flops measured; one failed without metrics."""
    for number, (status, top1, flops) in enumerate(
        [("completed", 50.0, 4e6), ("completed", 70.0, 9e6), ("failed", None, None), ("completed", 60.0, 1e6),
         ("pruned", 65.0, 2e6)]
    ):  # fmt: skip
        store.finish_trial(
            "s1",
            number,
            status=status,
            config={"model": {"depth": number, "layout": "CCTT" if number % 2 else None}},
            measurement={"flops": flops, "params": 10 * number} if flops else None,
            final={"top1": top1, "best_top1": top1} if top1 is not None else None,
        )


def test_outcomes_reads_only_the_named_metrics_in_sql(store):
    _ranked_study(store)
    lean = store.outcomes("s1", ["top1", "flops"], config_keys=["config.model.layout"])
    assert list(lean["number"]) == [0, 1, 2, 3, 4]
    assert lean["top1"].tolist()[:2] == [50.0, 70.0] and np.isnan(lean["top1"].iloc[2])
    assert lean["flops"].tolist()[3] == 1e6
    assert "best_top1" not in lean.columns  # not asked for: not decoded
    layouts = [v if isinstance(v, str) else None for v in lean["config.model.layout"]]
    assert layouts == [None, "CCTT", None, "CCTT", None]
    with pytest.raises(StoreError, match=r"unknown metric 'accuracy'; known: .*top1"):
        store.outcomes("s1", ["accuracy", "flops"])


def test_trials_sorted_and_limited_in_the_database(store):
    _ranked_study(store)
    top = store.trials("s1", sort="top1", descending=True, limit=3)
    assert top["number"].tolist() == [1, 4, 3]
    assert top["config.model.depth"].tolist() == [1, 4, 3]
    cheapest = store.trials("s1", sort="flops", limit=10)
    assert cheapest["number"].tolist() == [3, 4, 0, 1, 2]  # the unmeasured trial last
    assert store.trials("s1", sort="number", descending=True, limit=1)["number"].tolist() == [4]
    with pytest.raises(StoreError, match="unknown metric 'colour'"):
        store.trials("s1", sort="colour")
    configs = store.configs("s1", [3, 1])
    assert configs["number"].tolist() == [1, 3] and configs["config.model.depth"].tolist() == [1, 3]
    assert "config.model.layout" in store.config_columns("s1")


def test_cli_trials_limit_and_sort(store, store_url):
    _ranked_study(store)
    runner = CliRunner()
    result = runner.invoke(
        main, ["trials", "s1", "--store", store_url, "--sort", "top1", "--limit", "2", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    assert [r["number"] for r in json.loads(result.output)] == [1, 4]  # top1 is an objective to maximise: best first
    result = runner.invoke(main, ["trials", "s1", "--store", store_url, "--sort", "top1:asc", "--limit", "2"])
    assert result.exit_code == 0, result.output
    assert "2 of 5 trials, sorted by top1 ascending" in result.output
    for args, fragment in [
        (["--sort", "top1:up"], "must be asc or desc"),
        (["--sort", "colour"], "unknown metric 'colour'"),
        (["--limit", "-1"], "-1"),
    ]:
        bad = runner.invoke(main, ["trials", "s1", "--store", store_url, *args])
        assert bad.exit_code == 2 and fragment in bad.output, bad.output


def test_one_rule_for_store_locations_a_path_is_a_path_and_a_query_is_checked(tmp_path, monkeypatch):
    """Issue 57 (5): ``sqlite:////dir/my?store.db`` silently wrote /dir/my (SQLAlchemy drops a query item
    without '='); a path is now taken literally, a URL's query item the store does not take is refused
    naming it, and each location reads back from the file it wrote."""
    monkeypatch.chdir(tmp_path)
    refused = [f"sqlite:///{tmp_path}/my?store.db", f"sqlite:///{tmp_path}/x.db?", f"sqlite:///{tmp_path}/x.db?a=1&b"]
    for url in refused:
        with pytest.raises(StoreError, match=r"takes no options, got \?"):
            Store.open(url)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written
    located = ((f"{tmp_path}/my?store.db", "my?store.db"), ("a%20b.db", "a%20b.db"), ("sub dir.db", "sub dir.db"))
    for path, file in located:
        with Store.open(path) as store:
            store.create_study(file, {"name": "s"}, {"top1": "max"})
        assert (tmp_path / file).is_file()
        with Store.open(path, create=False) as store:  # the same location reads the same file
            assert store.study_names() == [file]
        with Store.open(f"sqlite:///{quote(str(tmp_path / file))}", create=False) as store:  # and as its URL
            assert store.study_names() == [file]
    result = CliRunner().invoke(main, ["studies", "--store", f"sqlite:///{tmp_path}/my?store.db"])
    assert result.exit_code == 2 and "?store.db" in result.output and len(result.output.strip().splitlines()) == 1
