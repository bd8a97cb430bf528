"""Experiment trackers (``search.track``): the spec's trackers as Ray Tune logger callbacks.

Ray Tune's own integrations do the logging, on the driver, from the results the trials report:
``MLflowLoggerCallback`` (one MLflow run per trial: the trial's config as params, every reported
number as a metric at its epoch) and ``TBXLoggerCallback`` (TensorBoard event files in each trial's
directory under the results dir, beside Tune's ``result.json``). Both need the optional ``track``
extra; Ray's MLflow module imports MLflow, so it is bound lazily (a search without MLflow never
loads it).

A tracking URI may carry a password (``https://user:pw@host``, ``postgresql://user:pw@host/db``).
The spec is stored with the study and pickled by Ray (the trainable's parameters, the callbacks,
the searcher), so :func:`without_secrets` takes the password out of the spec before anything sees
it; :func:`set_driver_environment` hands it to MLflow in the driver process only, as the store's
password goes to libpq (harness.search.driver): a server's user and password through
``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``, a PostgreSQL database's through
``PGPASSWORD``. Where there is no such route, the spec is refused (search_space.validation).
"""

from __future__ import annotations

import importlib.util
import os
import re
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from ray.tune.logger import TBXLoggerCallback
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import make_url

from harness.search.result_keys import NUMBER_KEY
from harness.store.urls import mask_url, split_secret
from search_space.spec import SearchSpec
from search_space.url_secrets import secret_parts
from search_space.validation import TRACK_EXTRA, tracking_secret_route
from trials.configio import ConfigError
from trials.lazy import lazy_import

ray_mlflow = lazy_import("ray.air.integrations.mlflow")  # imports MLflow: only when a search tracks to it

STUDY_TAG = "archsearch.study"  # on every run: the study it belongs to
NUMBER_TAG = "archsearch.number"  # on every run: the trial's number (the store's key), also its run name
FILE_STORE_OPT_IN = "MLFLOW_ALLOW_FILE_STORE"  # MLflow 3 refuses a file store (maintenance mode) without it


class TrackerSecrets:
    """Environment variables that carry a tracking URI's credentials to MLflow in the driver.

    Kept in memory only; its ``repr`` names the variables, never their values (a traceback may print it).
    """

    def __init__(self, env: dict[str, str] | None = None):
        self.env = dict(env or {})

    def __repr__(self) -> str:
        return f"TrackerSecrets({', '.join(sorted(self.env)) or 'none'})"

    def __reduce__(self):  # never pickled with its values, whatever picks it up
        return (TrackerSecrets, ())


def without_secrets(spec: SearchSpec, store_url: str) -> tuple[SearchSpec, TrackerSecrets]:
    """(the spec with its tracking URI's password taken out, that password as environment variables).

    A server URL loses its whole ``user:password@`` (requests would send a user left in the URL in
    place of MLflow's own credentials); a PostgreSQL URL keeps its user. Raises :class:`ConfigError`
    where the password cannot reach libpq beside the store's (one ``PGPASSWORD`` for both).
    """
    tracking = spec.search.track.mlflow
    if tracking is None:
        return spec, TrackerSecrets()
    uri = tracking.tracking_uri
    check_tracking_database(uri)
    route = tracking_secret_route(uri)
    if route is None:
        return spec, TrackerSecrets()
    if route == "mlflow":
        parts = urlsplit(uri)
        public = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        env = {"MLFLOW_TRACKING_PASSWORD": unquote(parts.password or "")}
        if parts.username:
            env["MLFLOW_TRACKING_USERNAME"] = unquote(parts.username)
    else:
        public, password = split_secret(uri)
        if password is None:
            raise ConfigError("search.track.mlflow.tracking_uri", "is not a PostgreSQL URL: postgresql://USER@HOST/DB")
        _check_one_libpq_password(password, store_url)
        env = {"PGPASSWORD": password}
    left = secret_parts(public)
    if left:  # a reading of the URL the split did not share (a '#', a '/' in the password): refused, not kept
        raise ConfigError(
            "search.track.mlflow.tracking_uri",
            f"still carries {left[0]} once its password is taken out; percent-encode '#', '/', '?' and '@' in it",
        )
    track = spec.search.track.model_copy(update={"mlflow": tracking.model_copy(update={"tracking_uri": public})})
    search = spec.search.model_copy(update={"track": track})
    return spec.model_copy(update={"search": search}), TrackerSecrets(env)


SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow's database-backed tracking stores
FOREIGN_TABLES = ("studies", "trials", "trial_values")  # Optuna's (archsearch's all start archsearch_)


def check_tracking_database(uri: str) -> None:
    """A SQL tracking URI names a database MLflow can have to itself, or the search is refused
    before anything runs (one line naming the key).

    MLflow migrates its schema with Alembic under the table ``alembic_version``, as archsearch's
    store and Optuna's storage do: pointed at a database holding theirs (the store's own, say),
    MLflow failed mid-search with "Can't locate revision", after creating its tables there."""
    scheme = urlsplit(uri).scheme.lower().split("+")[0]
    if scheme not in SQL_SCHEMES:
        return
    key = "search.track.mlflow.tracking_uri"
    try:
        url = make_url(uri)
    except Exception:  # a URL SQLAlchemy cannot parse: MLflow's own check says what is wrong
        return
    if scheme == "sqlite" and (not url.database or not os.path.exists(url.database)):
        return  # a new file: MLflow creates its schema there
    engine = create_engine(url, connect_args={"connect_timeout": 5} if scheme == "postgresql" else {})
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
    except Exception:  # not reachable from here (a cluster's database): MLflow says so where it runs
        return
    finally:
        engine.dispose()
    theirs = sorted(t for t in tables if t.startswith("archsearch_") or t in FOREIGN_TABLES)
    if theirs:
        raise ConfigError(
            key,
            f"{mask_url(uri)} holds archsearch's or Optuna's tables ({', '.join(theirs[:3])}, ...): MLflow keeps "
            "its own schema and migrations there and cannot share them; give it a database of its own",
        )


def _check_one_libpq_password(password: str, store_url: str) -> None:
    """A PostgreSQL store and a PostgreSQL tracking database share the driver's ``PGPASSWORD``."""
    if urlsplit(store_url).scheme.lower().split("+")[0] != "postgresql":
        return
    _, store_password = split_secret(store_url)
    current = store_password if store_password is not None else os.environ.get("PGPASSWORD")
    if current != password:  # None: ~/.pgpass, which a PGPASSWORD set for the tracker would override
        raise ConfigError(
            "search.track.mlflow.tracking_uri",
            "carries a password other than the store's, and libpq takes one through PGPASSWORD: put both in "
            "~/.pgpass (one line per server) and leave them out of the URLs",
        )


def set_driver_environment(spec: SearchSpec, secrets: TrackerSecrets) -> None:
    """Set what MLflow reads in the driver: the tracking URI's credentials and, for a file store that
    the spec names, MLflow 3's opt-in to it (a user's own ``MLFLOW_ALLOW_FILE_STORE`` stands).

    Called after the local Ray has started: its processes do not inherit any of it.
    """
    os.environ.update(secrets.env)
    tracking = spec.search.track.mlflow
    if tracking is not None and is_file_store(tracking.tracking_uri):
        os.environ.setdefault(FILE_STORE_OPT_IN, "true")


def is_file_store(uri: str) -> bool:
    """Whether MLflow reads ``uri`` as its file store: ``file:`` or a bare path."""
    return urlsplit(uri).scheme.lower() in ("", "file")


def tracker_callbacks(spec: SearchSpec, study_name: str) -> list[Any]:
    """The Ray Tune logger callbacks ``spec.search.track`` asks for (none by default).

    Built before the search writes anything: a missing ``track`` extra is a one-line error naming the key.
    """
    track = spec.search.track
    callbacks: list[Any] = []
    if track.mlflow is not None:
        _require("mlflow", "search.track.mlflow")
        try:
            mlflow_callback = ray_mlflow.MLflowLoggerCallback(
                tracking_uri=track.mlflow.tracking_uri,
                experiment_name=track.mlflow.experiment or study_name,
                tags={STUDY_TAG: study_name},
                save_artifact=False,  # the checkpoints stay in the results dir, not copied to MLflow
            )
        except ImportError:
            raise ConfigError("search.track.mlflow", TRACK_EXTRA) from None
        mlflow_callback.mlflow_util = MlflowNames(mlflow_callback.mlflow_util)
        callbacks.append(mlflow_callback)
    if track.tensorboard:
        _require("tensorboardX", "search.track.tensorboard")
        try:
            callbacks.append(TBXLoggerCallback())
        except ImportError:
            raise ConfigError("search.track.tensorboard", TRACK_EXTRA) from None
    return callbacks


def _require(module: str, key: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ConfigError(key, TRACK_EXTRA)


_INDEX = re.compile(r"\[(\d+)\]")
_REFUSED = re.compile(r"[^\w./\- ]")  # MLflow's names: alphanumerics, _ . / - and spaces (colons not on Windows)


def mlflow_name(key: str) -> str:
    """A param or metric name MLflow accepts: ``depths[3]`` -> ``depths.3``, other refused characters -> ``_``."""
    return _REFUSED.sub("_", _INDEX.sub(r".\1", key))


def _renamed(values: dict[str, Any]) -> dict[str, Any]:
    return {mlflow_name(str(k)): _renamed(v) if isinstance(v, dict) else v for k, v in values.items()}


class MlflowNames:
    """Ray's MLflow logging helper with names MLflow accepts, and each run named by its trial number.

    A searched CoAtNet parameter is called ``depths[3]``; MLflow refuses brackets in a param or
    metric name (the config is logged as params, and again as ``config/...`` with each result),
    and Ray's callback would fail the search on it. Everything else goes to Ray's helper unchanged.
    """

    def __init__(self, util: Any):
        self.util = util

    def __getattr__(self, name: str) -> Any:
        if name == "util" or name.startswith("__"):  # while being copied or unpickled: no recursion
            raise AttributeError(name)
        return getattr(self.util, name)

    def log_params(self, params_to_log: dict[str, Any], run_id: str | None = None) -> None:
        self.util.log_params(params_to_log=_renamed(params_to_log), run_id=run_id)
        number = params_to_log.get(NUMBER_KEY)
        if run_id is not None and number is not None:  # the config of a trial's start: name its run
            client = ray_mlflow.mlflow.MlflowClient(tracking_uri=ray_mlflow.mlflow.get_tracking_uri())
            client.set_tag(run_id, NUMBER_TAG, str(number))
            client.update_run(run_id, name=f"trial {number}")

    def log_metrics(self, step: int, metrics_to_log: dict[str, Any], run_id: str | None = None) -> None:
        self.util.log_metrics(step=step, metrics_to_log=_renamed(metrics_to_log), run_id=run_id)
