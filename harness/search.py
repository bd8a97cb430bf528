"""``archsearch search``: Optuna proposes, Ray Tune dispatches, the store records.

One Tuner over :func:`harness.trainable.search_trainable`, with :class:`ArchsearchSearch`
(OptunaSearch, multi-objective when the spec says so), optional ASHA on one metric,
``max_concurrent_trials``, per-trial resources, ``reuse_actors`` and ``FailureConfig`` retries.
The Optuna study lives in the same database as the store (Optuna's own tables beside ours), so
``optuna-dashboard STORE_URL`` shows it too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search_space.spec import SearchSpec

HOPELESS_AFTER = 3  # this many failed trials, none completed, all with the same error: the search stops


@dataclass
class SearchSummary:
    study: str
    store_url: str
    counts: dict[str, int]
    front: Any  # DataFrame of the Pareto front
    wall_time_s: float
    status: str = "completed"  # the study's final status: completed, or failed (no trial completed)
    message: str | None = None  # why it failed, in one line
    spec_problem: bool = False  # the failure is the spec's (nothing feasible), not the trials'


class SearchError(RuntimeError):
    """The search cannot start here (e.g. it asks for GPUs the cluster does not have): one line, exit 2."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def _optuna_storage_url(store_url: str) -> str:
    from sqlalchemy.engine import make_url

    url = make_url(store_url)
    if url.get_backend_name() == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def _quiet_ray(verbose: bool) -> None:
    """Keep the terminal to archsearch's own lines: Ray's banners and INFO logs only with ``verbose``.

    The per-trial progress line and the final front are archsearch's; Ray Tune's experiment box,
    TensorBoard hint and "wrote the experiment state" lines are not shown by default.
    """
    import logging

    if verbose:
        return
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # the legacy reporter, silent at verbose=0
    for name in ("ray", "ray.tune", "ray.train", "ray._private.authentication.authentication_token_setup"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _init_ray(address: str | None, spec: SearchSpec) -> None:
    import logging

    import ray

    if ray.is_initialized():
        return
    if address:
        from harness.cluster import join

        join(address)  # the cluster's token, a pre-flight check, one-line errors (ClusterError)
    else:
        # address="local": always a fresh local Ray, never a cluster someone else started here.
        cpus = max(os.cpu_count() or 1, int(spec.search.concurrency * spec.search.resources.cpus))
        ray.init(
            address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
        )


def storage_location(results_dir: str | Path | None) -> tuple[str, bool]:
    """(Ray Tune's storage path, whether the user chose it): a local or shared directory, or a URI."""
    if results_dir is None:
        return str((Path.cwd() / "ray_results").resolve()), False
    text = str(results_dir)
    if "://" in text:  # s3://bucket/path, gs://..., file://...: Ray Tune's (pyarrow) filesystems
        return text.rstrip("/"), True
    return str(Path(text).expanduser().resolve()), True


def check_storage(results_dir_chosen: bool, storage: str) -> None:
    """On a cluster of several nodes, trial checkpoints must live where every node can read them."""
    from harness.cluster import alive_nodes

    nodes = alive_nodes()
    if nodes > 1 and not results_dir_chosen:
        raise SearchError(
            "--results-dir",
            f"the Ray cluster has {nodes} nodes, and trials checkpoint under {storage} on this machine only: a "
            "trial retried on another node could not resume. Pass --results-dir with a directory every node "
            "mounts (NFS, e.g. /shared/ray_results) or cloud storage (s3://bucket/path, gs://bucket/path)",
        )


def check_resources(spec: SearchSpec) -> None:
    """Every trial's resource request fits on some node of the Ray cluster; otherwise Ray would
    queue the trials forever. Raises :class:`SearchError` naming ``search.resources``."""
    import ray

    wanted = spec.search.resources
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive", True)]
    most_gpus = max((r.get("GPU", 0) for r in nodes), default=0)
    most_cpus = max((r.get("CPU", 0) for r in nodes), default=0)
    if wanted.gpus > 0 and most_gpus == 0:
        raise SearchError(
            "search.resources.gpus",
            f"each trial asks for {wanted.gpus:g} GPU but the Ray cluster has none; set gpus: 0 to train on CPUs, "
            "or join a cluster with GPUs (--address)",
        )
    if wanted.gpus > most_gpus:
        raise SearchError(
            "search.resources.gpus", f"each trial asks for {wanted.gpus:g} GPUs but no node has more than {most_gpus:g}"
        )
    if wanted.cpus > most_cpus:
        raise SearchError(
            "search.resources.cpus", f"each trial asks for {wanted.cpus:g} CPUs but no node has more than {most_cpus:g}"
        )


def _hardware() -> dict[str, Any]:
    """What the search runs on (recorded with the study, shown in reports)."""
    import platform

    import ray

    resources = ray.cluster_resources()
    gpu_names = sorted({k for k in resources if k.startswith("accelerator_type:")})
    return {
        "driver": platform.node(),
        "platform": platform.platform(),
        "cluster_cpus": resources.get("CPU", 0),
        "cluster_gpus": resources.get("GPU", 0),
        "gpu_types": [g.removeprefix("accelerator_type:") for g in gpu_names],
        "nodes": len(ray.nodes()),
    }


def _trainable(spec: SearchSpec):
    from ray import tune

    from harness.trainable import search_trainable

    resources = {"cpu": spec.search.resources.cpus, "gpu": spec.search.resources.gpus}
    return tune.with_resources(tune.with_parameters(search_trainable, spec=spec.model_dump(mode="json")), resources)


def _new_tuner(spec: SearchSpec, store_url: str, name: str, storage_path: str):
    import optuna
    from ray import tune

    from harness.searcher import ArchsearchSearch
    from harness.tune_callbacks import HopelessSearchStopper, ProgressCallback, StoreCallback
    from search_space.sampling import make_sampler

    storage = optuna.storages.RDBStorage(_optuna_storage_url(store_url))
    searcher = ArchsearchSearch(spec, store_url, name, storage, make_sampler(spec))
    scheduler = None
    es = spec.search.early_stopping
    if es is not None:
        from ray.tune.schedulers import ASHAScheduler

        scheduler = ASHAScheduler(
            metric=es.metric,
            mode=spec.objectives.get(es.metric, "min" if es.metric.endswith("loss") else "max"),
            time_attr="training_iteration",
            max_t=spec.training.get("epochs", 10),
            grace_period=es.grace_period,
            reduction_factor=es.reduction_factor,
        )
    spec_dict = spec.model_dump(mode="json")
    callbacks = [StoreCallback(store_url, name, spec_dict), ProgressCallback(store_url, name, dict(spec.objectives))]
    stopper = HopelessSearchStopper(store_url, name, min(HOPELESS_AFTER, spec.search.n_trials), spec_dict)
    return tune.Tuner(
        _trainable(spec),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=spec.search.n_trials,
            max_concurrent_trials=spec.search.concurrency,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=storage_path,
            callbacks=callbacks,
            stop=[stopper],  # a list: a bare callable Stopper would be wrapped as a per-trial function
            failure_config=tune.FailureConfig(max_failures=spec.search.retries),
            verbose=0,
        ),
    )


def run_search(
    spec: SearchSpec,
    store_url: str,
    *,
    study_name: str | None = None,
    address: str | None = None,
    results_dir: str | Path | None = None,
    resume: bool = False,
    verbose: bool = False,
) -> SearchSummary:
    """Run the search the spec describes; every trial lands in the store at ``store_url``.

    ``resume``: continue the interrupted search of that study (``Tuner.restore``): finished trials
    are kept, unfinished ones resume from their last checkpoint, and Optuna trials the driver
    lost are reconciled (told FAIL, stored ``failed`` as interrupted) so none stays RUNNING.
    """
    import time

    import optuna
    from ray import tune

    from dashboards.pareto import study_front
    from harness.store import Store, StoreError

    started = time.perf_counter()
    name = study_name or spec.name
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage_path, chosen = storage_location(results_dir)
    experiment = f"{storage_path}/{name}"
    with Store.open(store_url) as store:
        if resume and name not in store.study_names():
            raise StoreError(f"cannot resume: study {name!r} is not in {store.url}")
        if not resume and name in store.study_names() and _has_trials(store, name):
            raise StoreError(
                f"study {name!r} already has trials in {store.url}: use --resume {name} to continue it, "
                "or --name to start a new study"
            )
        if resume:
            store.mark_interrupted()
            if store.study(name)["status"] == "running":
                raise StoreError(
                    f"study {name!r} is still running (its driver is alive): wait for it, or stop it first"
                )
        _quiet_ray(verbose)
        _init_ray(address, spec)
        check_resources(spec)
        if address:
            check_storage(
                chosen, storage_path
            )  # before anything is written: a request no node can meet would wait forever
        store.create_study(name, spec.model_dump(mode="json"), dict(spec.objectives), hardware=_hardware())
        store.set_study_status(name, "running")
    if resume and tune.Tuner.can_restore(experiment):
        tuner = tune.Tuner.restore(experiment, trainable=_trainable(spec), resume_errored=True)
    else:
        if resume:
            _set_status(
                store_url, name, "interrupted", f"cannot resume: no Ray Tune experiment state under {experiment}"
            )
            raise StoreError(f"cannot resume study {name!r}: no Ray Tune experiment state under {experiment}")
        tuner = _new_tuner(spec, store_url, name, storage_path)
    with _Heartbeat(store_url, name):
        try:
            tuner.fit()
        except BaseException as error:  # Ctrl-C, a crash in Ray: the study did not finish
            _set_status(store_url, name, "interrupted", f"interrupted: {type(error).__name__}: {error}"[:500])
            raise
    with Store.open(store_url) as store:
        stopped = hopeless_reason(store, name, min(HOPELESS_AFTER, spec.search.n_trials), spec.model_dump(mode="json"))
        if stopped:  # trials still in flight were stopped with the search, not lost
            reconcile(
                store, name, _optuna_storage_url(store_url), stopped=f"stopped: every trial failed with: {stopped}"
            )
        else:
            reconcile(store, name, _optuna_storage_url(store_url))
        counts = store.counts(name)
        status, message, spec_problem = final_status(store, name, counts, spec)
        store.set_study_status(name, status, message=message)
        front = study_front(store, name, dict(spec.objectives))
    return SearchSummary(name, store.url, counts, front, time.perf_counter() - started, status, message, spec_problem)


def _set_status(store_url: str, name: str, status: str, message: str | None) -> None:
    from harness.store import Store

    try:
        with Store.open(store_url) as store:
            store.set_study_status(name, status, message=message)
    except Exception:  # recording the status must never hide the original error
        pass


def final_status(store, name: str, counts: dict[str, int], spec: SearchSpec) -> tuple[str, str | None, bool]:
    """(status, one-line reason, whether the spec is to blame) of a search that has ended.

    ``completed`` if any trial completed; otherwise ``failed``, with the trials' common error, or
    the constraint that excluded every sampled config.
    """
    if counts.get("completed", 0) > 0:
        return "completed", None, False
    ran = sum(counts.get(s, 0) for s in ("pruned", "failed", "diverged"))
    from harness.failures import common_error

    if ran == 0 and counts.get("infeasible", 0) > 0:
        errors = store.trial_errors(name, ("infeasible",), limit=1)
        detail = f": the last one {errors[0]}" if errors else ""
        return (
            "failed",
            f"all {counts['infeasible']} sampled configurations were infeasible{detail}; "
            f"the constraints {spec.constraints} leave (almost) nothing of the search space",
            True,
        )
    common = common_error(store.trial_errors(name, ("failed",), limit=50))
    if counts.get("failed", 0) and common:
        return "failed", f"every trial failed ({counts['failed']}), all with: {common}", False
    if ran == 0:
        return "failed", "no trial ran", False
    parts = ", ".join(f"{counts[s]} {s}" for s in ("failed", "diverged", "pruned") if counts.get(s))
    return "failed", f"no trial completed ({parts})", False


class _Heartbeat:
    """Touches the study every ``HEARTBEAT_S`` while the search runs, so that a driver that dies on
    another host is recognised (no heartbeat) and its study shown ``interrupted``."""

    def __init__(self, store_url: str, name: str):
        import threading

        self.store_url, self.name = store_url, name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="archsearch-heartbeat", daemon=True)

    def _run(self) -> None:
        from harness.store import Store
        from harness.store.store import HEARTBEAT_S

        try:
            with Store.open(self.store_url) as store:
                while not self._stop.wait(HEARTBEAT_S):
                    store.heartbeat(self.name)
        except Exception:  # a missed heartbeat must never stop the search
            return

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def hopeless_reason(store, name: str, after: int, spec: dict | None = None) -> str | None:
    """The common error when no trial completed and at least ``after`` failed all the same way,
    over different sampled values (what :class:`harness.tune_callbacks.HopelessSearchStopper`
    stops a search on), else None."""
    from harness.failures import common_error, shared_searched_value

    counts = store.counts(name, epochs=False)
    if counts["completed"] or counts["pruned"] or counts["failed"] < after:
        return None
    common = common_error(store.trial_errors(name, ("failed",), limit=50))
    if common is None or spec is None:
        return common
    failed = store.trials(name, statuses=("failed",), limit=50, flatten_config=False)
    return None if shared_searched_value(spec, list(failed.get("config", []))) else common


def reconcile(store, name: str, optuna_url: str, *, stopped: str | None = None) -> dict[str, int]:
    """After a search ends: no Optuna trial RUNNING, no store trial ``running``.

    Anything still running when the Tuner has returned was lost with an earlier driver: it is
    told FAIL to Optuna and recorded ``failed`` (interrupted) in the store, once. With
    ``stopped`` (the search was ended on purpose), such trials are PRUNED / ``pruned`` with that reason.
    """
    import optuna

    from harness.output import nest_keys

    study = optuna.load_study(study_name=name, storage=optuna.storages.RDBStorage(optuna_url))
    fixed = {"optuna": 0, "store": 0}
    state = optuna.trial.TrialState.PRUNED if stopped else optuna.trial.TrialState.FAIL
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=state)
        fixed["optuna"] += 1
    trials = store.trials(name, statuses=("running",))  # only those: a large study's configs stay undecoded
    if not trials.empty:
        for _, row in trials.iterrows():
            config = {k.removeprefix("config."): v for k, v in row.items() if k.startswith("config.")}
            store.finish_trial(
                name,
                int(row["number"]),
                status="pruned" if stopped else "failed",
                config=nest_keys(config),
                error=stopped or "interrupted: the search driver stopped while this trial ran, and it was not resumed",
            )
            fixed["store"] += 1
    return fixed


def _has_trials(store, name: str) -> bool:
    return any(n for status, n in store.counts(name).items() if status != "epochs")
