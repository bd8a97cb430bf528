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


@dataclass
class SearchSummary:
    study: str
    store_url: str
    counts: dict[str, int]
    front: Any  # DataFrame of the Pareto front
    wall_time_s: float


def _optuna_storage_url(store_url: str) -> str:
    from sqlalchemy.engine import make_url

    url = make_url(store_url)
    if url.get_backend_name() == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def _init_ray(address: str | None, spec: SearchSpec) -> None:
    import ray

    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        # address="local": always a fresh local Ray, never a cluster someone else started here.
        cpus = max(os.cpu_count() or 1, int(spec.search.concurrency * spec.search.resources.cpus))
        ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False)


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


def _new_tuner(spec: SearchSpec, store_url: str, name: str, storage_path: Path):
    import optuna
    from ray import tune

    from harness.searcher import ArchsearchSearch
    from harness.tune_callbacks import ProgressCallback, StoreCallback
    from search_space.sampling import make_sampler

    storage = optuna.storages.RDBStorage(_optuna_storage_url(store_url))
    searcher = ArchsearchSearch(spec, store_url, name, storage, make_sampler(spec))
    scheduler = None
    es = spec.search.early_stopping
    if es is not None:
        from ray.tune.schedulers import ASHAScheduler

        scheduler = ASHAScheduler(
            metric=es.metric,
            mode=spec.objectives.get(es.metric, "max"),
            time_attr="training_iteration",
            max_t=spec.training.get("epochs", 10),
            grace_period=es.grace_period,
            reduction_factor=es.reduction_factor,
        )
    spec_dict = spec.model_dump(mode="json")
    callbacks = [StoreCallback(store_url, name, spec_dict), ProgressCallback(store_url, name, dict(spec.objectives))]
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
            storage_path=str(storage_path),
            callbacks=callbacks,
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
    storage_path = Path(results_dir or Path.cwd() / "ray_results").resolve()
    experiment = storage_path / name
    with Store.open(store_url) as store:
        if resume and name not in store.study_names():
            raise StoreError(f"cannot resume: study {name!r} is not in {store.url}")
        if not resume and name in store.study_names() and _has_trials(store, name):
            raise StoreError(
                f"study {name!r} already has trials in {store.url}: use --resume {name} to continue it, "
                "or --name to start a new study"
            )
        _init_ray(address, spec)
        store.create_study(name, spec.model_dump(mode="json"), dict(spec.objectives), hardware=_hardware())
        store.set_study_status(name, "running")
    if resume and tune.Tuner.can_restore(str(experiment)):
        tuner = tune.Tuner.restore(str(experiment), trainable=_trainable(spec), resume_errored=True)
    else:
        if resume:
            raise StoreError(f"cannot resume study {name!r}: no Ray Tune experiment state under {experiment}")
        tuner = _new_tuner(spec, store_url, name, storage_path)
    tuner.fit()
    with Store.open(store_url) as store:
        reconcile(store, name, _optuna_storage_url(store_url))
        store.set_study_status(name, "completed")
        counts = store.counts(name)
        front = study_front(store, name, dict(spec.objectives))
    return SearchSummary(name, store.url, counts, front, time.perf_counter() - started)


def reconcile(store, name: str, optuna_url: str) -> dict[str, int]:
    """After a search ends: no Optuna trial RUNNING, no store trial ``running``.

    Anything still running when the Tuner has returned was lost with an earlier driver: it is
    told FAIL to Optuna and recorded ``failed`` (interrupted) in the store, once.
    """
    import optuna

    from harness.output import nest_keys

    study = optuna.load_study(study_name=name, storage=optuna.storages.RDBStorage(optuna_url))
    fixed = {"optuna": 0, "store": 0}
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        fixed["optuna"] += 1
    trials = store.trials(name, statuses=("running",))  # only those: a large study's configs stay undecoded
    if not trials.empty:
        for _, row in trials.iterrows():
            config = {k.removeprefix("config."): v for k, v in row.items() if k.startswith("config.")}
            store.finish_trial(
                name,
                int(row["number"]),
                status="failed",
                config=nest_keys(config),
                error="interrupted: the search driver stopped while this trial ran, and it was not resumed",
            )
            fixed["store"] += 1
    return fixed


def _has_trials(store, name: str) -> bool:
    return any(n for status, n in store.counts(name).items() if status != "epochs")
