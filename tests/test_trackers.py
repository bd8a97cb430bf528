"""Experiment trackers (``search.track``): the spec's keys, the missing extra, passwords kept off
every disk, and real searches logged to a local MLflow file store and to TensorBoard event files."""

from __future__ import annotations

import copy
import json
import os
import pickle
import struct
import sys
import time
from pathlib import Path

import pytest
import ray
import yaml
from click.testing import CliRunner
from conftest import fresh_postgres_database, tiny_search_spec
from sqlalchemy.engine import make_url

from harness.search.record import trackers
from harness.search.result_keys import NUMBER_KEY
from harness.store import Store
from search_space.validation import load_spec
from trials.configio import ConfigError

# MLflow's SQL store configures its mappers with a loader option SQLAlchemy 2.1 deprecates: theirs, harmless.
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")

SECRET = "Archsearch-Tracker-Secret-5c1e"
PIP = "pip install 'archsearch[track]'"


def _spec(track, **search) -> dict:
    spec = tiny_search_spec("tracked", n_trials=2)
    spec["search"] = {**spec["search"], **search, "track": track}
    return spec


@pytest.fixture
def driver_environment():
    """A search sets MLflow's variables in the driver (this process): put the environment back."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


# -- the spec's keys ------------------------------------------------------------------------------


def test_track_is_off_by_default_and_takes_mlflow_and_tensorboard():
    assert load_spec(tiny_search_spec()).search.track.model_dump() == {"mlflow": None, "tensorboard": False}
    spec = load_spec(_spec({"mlflow": {"tracking_uri": "file:./mlruns"}, "tensorboard": True}))
    assert spec.search.track.mlflow.tracking_uri == "file:./mlruns" and spec.search.track.mlflow.experiment is None
    assert spec.search.track.tensorboard is True
    named = load_spec(_spec({"mlflow": {"tracking_uri": "sqlite:///m.db", "experiment": "cait"}}))
    assert named.search.track.mlflow.experiment == "cait"


@pytest.mark.parametrize(
    ("track", "path", "fragment"),
    [
        ({"wandb": {"project": "x"}}, "search.track.wandb", "Extra inputs are not permitted"),
        ({"mlflow": {}}, "search.track.mlflow.tracking_uri", "Field required"),
        ({"mlflow": {"tracking_uri": ""}}, "search.track.mlflow.tracking_uri", "at least 1 character"),
        ({"mlflow": {"tracking_uri": "file:x", "run": "y"}}, "search.track.mlflow.run", "Extra inputs"),
        ({"mlflow": "file:./mlruns"}, "search.track.mlflow", "valid dictionary"),
        ({"mlflow": {"tracking_uri": ["file:x"]}}, "search.track.mlflow.tracking_uri", "valid string"),
        ({"tensorboard": "often"}, "search.track.tensorboard", "valid boolean"),
        # a password with no way to MLflow but the URI itself would be stored with the spec
        (
            {"mlflow": {"tracking_uri": f"mysql://u:{SECRET}@h/db"}},
            "search.track.mlflow.tracking_uri",
            "carries a password",
        ),
        (
            {"mlflow": {"tracking_uri": f"https://h/?password={SECRET}"}},
            "search.track.mlflow.tracking_uri",
            "carries a password",
        ),
    ],
)
def test_bad_track_settings_name_the_key(track, path, fragment):
    with pytest.raises(ConfigError) as excinfo:
        load_spec(_spec(track))
    assert excinfo.value.field == path, str(excinfo.value)
    assert fragment in str(excinfo.value) and SECRET not in str(excinfo.value)


def test_the_search_command_refuses_a_bad_track_in_one_line_and_writes_nothing(tmp_path):
    from harness.cli import main

    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(_spec({"mlflow": {"uri": "file:./mlruns"}})))
    store = tmp_path / "store.db"
    result = CliRunner().invoke(main, ["search", str(tmp_path / "bad.yaml"), "--store", f"sqlite:///{store}"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "search.track.mlflow" in result.output
    assert not store.exists()


@pytest.mark.parametrize(
    ("module", "key"), [("mlflow", "search.track.mlflow"), ("tensorboardX", "search.track.tensorboard")]
)
def test_a_tracker_without_the_extra_is_refused_naming_the_key_and_the_fix(monkeypatch, module, key):
    spec = _spec({"mlflow": {"tracking_uri": "file:./mlruns"}, "tensorboard": True})
    monkeypatch.setitem(sys.modules, module, None)  # what an environment without the extra does to `import`
    with pytest.raises(ConfigError) as excinfo:
        load_spec(spec)
    assert str(excinfo.value) == f"{key}: needs the 'track' extra: {PIP}"
    monkeypatch.undo()
    checked = load_spec(spec)
    monkeypatch.setitem(sys.modules, module, None)  # and at the start of a search, before anything is written
    with pytest.raises(ConfigError) as excinfo:
        trackers.tracker_callbacks(checked, "tracked")
    assert str(excinfo.value) == f"{key}: needs the 'track' extra: {PIP}"


# -- passwords --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "public", "env"),
    [
        (
            f"https://alice:{SECRET}@mlflow.example:5000/base",
            "https://mlflow.example:5000/base",
            {"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": SECRET},
        ),
        (
            f"postgresql+psycopg://alice:{SECRET}@db.example:5432/mlflow",
            "postgresql+psycopg://alice@db.example:5432/mlflow",
            {"PGPASSWORD": SECRET},
        ),
        (
            f"postgresql://alice@db.example/mlflow?password={SECRET}",
            "postgresql://alice@db.example/mlflow",
            {"PGPASSWORD": SECRET},
        ),
        ("file:./mlruns", "file:./mlruns", {}),
    ],
)
def test_a_tracking_password_leaves_the_spec_for_the_drivers_environment(uri, public, env, driver_environment):
    spec = load_spec(_spec({"mlflow": {"tracking_uri": uri}}))
    stored, secrets = trackers.without_secrets(spec, "sqlite:///store.db")
    assert stored.search.track.mlflow.tracking_uri == public and secrets.env == env
    assert SECRET not in stored.model_dump_json() and SECRET not in repr(secrets)
    assert SECRET.encode() not in pickle.dumps(secrets) + pickle.dumps(stored)
    callbacks = trackers.tracker_callbacks(stored, "tracked")
    assert SECRET.encode() not in ray.cloudpickle.dumps(callbacks)  # what Ray writes into tuner.pkl
    trackers.set_driver_environment(stored, secrets)
    assert all(os.environ[k] == v for k, v in env.items())


def test_a_postgresql_tracking_password_must_be_the_postgresql_stores(monkeypatch):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    spec = load_spec(_spec({"mlflow": {"tracking_uri": f"postgresql://u:{SECRET}@h/mlflow"}}))
    trackers.without_secrets(spec, f"postgresql://u:{SECRET}@h/store")  # the same password: one PGPASSWORD
    for store in ("postgresql://u:other@h/store", "postgresql://u@h/store"):  # the latter: ~/.pgpass
        with pytest.raises(ConfigError) as excinfo:
            trackers.without_secrets(spec, store)
        assert excinfo.value.field == "search.track.mlflow.tracking_uri" and SECRET not in str(excinfo.value)


# -- names MLflow refuses -----------------------------------------------------------------------------


class _Trial:
    """What Ray's MLflowLoggerCallback reads of a trial: its config, name and directory."""

    def __init__(self, config: dict):
        self.config, self.local_path = config, None

    def __str__(self) -> str:
        return "search_trainable_00000"


def test_bracketed_parameter_names_reach_mlflow_and_each_run_is_named_by_its_trial_number(tmp_path, driver_environment):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert trackers.mlflow_name("depths[3]") == "depths.3" and trackers.mlflow_name("a:b(c)") == "a_b_c_"
    spec = load_spec(_spec({"mlflow": {"tracking_uri": uri}}))
    [callback] = trackers.tracker_callbacks(spec, "coat")
    callback = copy.deepcopy(ray.cloudpickle.loads(ray.cloudpickle.dumps(callback)))  # as Ray keeps it
    callback.setup()
    trial = _Trial({"depths[3]": 2, "layout": "CCTT", NUMBER_KEY: 7, "archsearch_priced": {"flops": 1e6}})
    callback.log_trial_start(trial)
    callback.log_trial_result(1, trial, {"top1": 0.5, "training_iteration": 1, "config": trial.config, "node": "x"})
    callback.log_trial_end(trial)
    client = MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("coat").experiment_id])
    assert run.info.run_name == "trial 7" and run.data.tags[trackers.NUMBER_TAG] == "7"
    assert run.data.tags[trackers.STUDY_TAG] == "coat" and run.info.status == "FINISHED"
    assert run.data.params["depths.3"] == "2" and run.data.params["archsearch_priced/flops"] == "1000000.0"
    assert run.data.metrics["top1"] == 0.5 and run.data.metrics["config/depths.3"] == 2


# -- end to end --------------------------------------------------------------------------------------


def _scalars(event_file: Path) -> dict[str, list[tuple[int, float]]]:
    """The scalars of a TensorBoard event file (TFRecords of ``Event`` protos), by tag."""
    from tensorboardX.proto.event_pb2 import Event

    data, scalars, offset = event_file.read_bytes(), {}, 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        event = Event.FromString(data[offset + 12 : offset + 12 + length])  # after the length and its CRC
        offset += 12 + length + 4  # the record and its CRC
        for value in event.summary.value:
            if value.HasField("simple_value"):
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def _search(spec: dict, tmp_path: Path, name: str):
    from harness.search.driver import run_search

    url = f"sqlite:///{tmp_path / 'store.db'}"
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = run_search(load_spec(spec), url, study_name=name, results_dir=tmp_path / "ray")
    finally:
        ray.shutdown()
    return summary, url


@pytest.mark.slow
def test_a_search_logs_each_trial_to_an_mlflow_file_store_and_tensorboard(tmp_path, driver_environment):
    from mlflow import MlflowClient

    from harness.store import Store

    os.environ.pop(trackers.FILE_STORE_OPT_IN, None)  # the spec's file: URI is the opt-in (MLflow 3)
    mlruns = f"file:{tmp_path / 'mlruns'}"
    spec = _spec({"mlflow": {"tracking_uri": mlruns}, "tensorboard": True})
    spec["training"] = {"epochs": 2, "lr": 1e-3}
    spec["params"] = {"depth": {"choice": [1, 2]}, "lr": {"float": [1e-4, 1e-2]}}
    summary, url = _search(spec, tmp_path, "tracked")
    assert summary.counts["completed"] == 2

    with Store.open(url, create=False) as store:
        curves = store.learning_curves("tracked")
        configs = {int(row["number"]): row for _, row in store.trials("tracked").iterrows()}
    client = MlflowClient(tracking_uri=mlruns)
    experiment = client.get_experiment_by_name("tracked")  # the study's name
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(int(r.data.tags[trackers.NUMBER_TAG]) for r in runs) == sorted(configs) == [0, 1]
    for run in runs:
        number = int(run.data.tags[trackers.NUMBER_TAG])
        assert run.info.run_name == f"trial {number}" and run.info.status == "FINISHED"
        assert run.data.tags[trackers.STUDY_TAG] == "tracked"
        # the searched parameters as params, each epoch's metrics as metrics: the store's epochs
        assert float(run.data.params["lr"]) == pytest.approx(configs[number]["config.training.lr"])
        assert int(run.data.params["depth"]) == configs[number]["config.model.depth"]
        history = client.get_metric_history(run.info.run_id, "top1")
        stored = curves[curves["number"] == number].sort_values("epoch")
        assert [m.step for m in history] == [1, 2] == list(stored["epoch"])
        assert [m.value for m in history] == pytest.approx(list(stored["top1"]))
        assert {"train_loss", "eval_loss", "flops", "params"} <= set(run.data.metrics)

    event_files = sorted((tmp_path / "ray" / "tracked").glob("*/events.out.tfevents.*"))
    assert len(event_files) == 2  # one per trial, in its directory under the results dir
    for event_file in event_files:
        number = json.loads((event_file.parent / "result.json").read_text().splitlines()[0])[NUMBER_KEY]
        stored = curves[curves["number"] == number].sort_values("epoch")
        top1 = _scalars(event_file)["ray/tune/top1"]
        assert [step for step, _ in top1] == [1, 2]
        assert [value for _, value in top1] == pytest.approx(list(stored["top1"]), rel=1e-6)  # float32 there


@pytest.mark.slow
def test_a_tracking_password_reaches_no_file_of_the_search(tmp_path, driver_environment):
    """MLflow on a PostgreSQL database whose URI carries a password (the server trusts local
    connections, so it is accepted and ignored): the runs are logged, and the password is nowhere
    on disk: not in the results dir (Tune's pickles, result.json), the store or Ray's session dir."""
    from mlflow import MlflowClient

    from harness.store import Store

    database, drop = fresh_postgres_database()
    try:
        tracking = make_url(database).set(password=SECRET).render_as_string(hide_password=False)
        os.environ.pop("PGPASSWORD", None)
        started = time.time()
        summary, url = _search(_spec({"mlflow": {"tracking_uri": tracking}}), tmp_path, "secret")
        assert summary.counts["completed"] == 2
        assert "PGPASSWORD" not in os.environ  # libpq had it for the search alone: put back as it was
        sessions = [p for p in Path("/tmp/ray").glob("session_2*") if p.stat().st_mtime >= started - 5]
        written = [*tmp_path.rglob("*"), *(f for s in sessions for f in s.rglob("*"))]
        assert any(p.name == "tuner.pkl" for p in written) and (tmp_path / "store.db") in written
        for path in written:
            if path.is_file() and not path.is_symlink():
                try:
                    assert SECRET.encode() not in path.read_bytes(), path
                except OSError:  # a socket or a file Ray removed meanwhile
                    continue
        with Store.open(url, create=False) as store:  # the spec as stored: the URI without its password
            assert store.study("secret")["spec"]["search"]["track"]["mlflow"]["tracking_uri"] == database
        client = MlflowClient(tracking_uri=database)
        assert len(client.search_runs([client.get_experiment_by_name("secret").experiment_id])) == 2
    finally:
        drop()


def test_a_tracking_database_that_holds_archsearchs_or_optunas_tables_is_refused_before_anything_runs(tmp_path):
    """Adversarial pass D23: MLflow pointed at such a database (the store's own) failed mid-search with
    "Can't locate revision" (its Alembic table is theirs) and left its tables there."""
    store = tmp_path / "store.db"
    with Store.open(f"sqlite:///{store}") as opened:
        opened.create_study("other", {"name": "other"}, {"top1": "max"})
    before = store.read_bytes()
    spec = load_spec(_spec({"mlflow": {"tracking_uri": f"sqlite:///{store}"}}))
    with pytest.raises(ConfigError, match=r"^search\.track\.mlflow\.tracking_uri: .* holds archsearch's or Optuna's"):
        trackers.without_secrets(spec, f"sqlite:///{tmp_path / 'elsewhere.db'}")
    assert store.read_bytes() == before
    fresh = load_spec(_spec({"mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}))
    trackers.without_secrets(fresh, f"sqlite:///{store}")  # a database of its own (not there yet): fine
