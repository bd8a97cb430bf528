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
        ray.init(
            num_cpus=max(os.cpu_count() or 1, int(spec.search.concurrency * spec.search.resources.cpus)),
            include_dashboard=False,
            log_to_driver=False,
        )


def run_search(
    spec: SearchSpec,
    store_url: str,
    *,
    study_name: str | None = None,
    address: str | None = None,
    results_dir: str | Path | None = None,
    verbose: int = 0,
) -> SearchSummary:
    """Run the search the spec describes; every trial lands in the store at ``store_url``."""
    import time

    import optuna
    from ray import tune

    from harness.pareto_front import pareto_front
    from harness.searcher import ArchsearchSearch
    from harness.store import Store
    from harness.trainable import search_trainable
    from harness.tune_callbacks import ProgressCallback, StoreCallback
    from search_space.sampling import make_sampler

    started = time.perf_counter()
    name = study_name or spec.name
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with Store.open(store_url) as store:
        store.create_study(name, spec.model_dump(mode="json"), dict(spec.objectives))
    storage = optuna.storages.RDBStorage(_optuna_storage_url(store_url))
    searcher = ArchsearchSearch(spec, store_url, name, storage, make_sampler(spec))
    scheduler = None
    es = spec.search.early_stopping
    if es is not None:
        from ray.tune.schedulers import ASHAScheduler

        budget = spec.training.get("epochs", 10)
        scheduler = ASHAScheduler(
            metric=es.metric,
            mode=spec.objectives.get(es.metric, "max"),
            time_attr="training_iteration",
            max_t=budget,
            grace_period=es.grace_period,
            reduction_factor=es.reduction_factor,
        )
    _init_ray(address, spec)
    resources = {"cpu": spec.search.resources.cpus, "gpu": spec.search.resources.gpus}
    trainable = tune.with_resources(
        tune.with_parameters(search_trainable, spec=spec.model_dump(mode="json")), resources
    )
    spec_dict = spec.model_dump(mode="json")
    storage_path = Path(results_dir or Path.cwd() / "ray_results").resolve()
    tuner = tune.Tuner(
        trainable,
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
            callbacks=[
                StoreCallback(store_url, name, spec_dict),
                ProgressCallback(store_url, name, dict(spec.objectives)),
            ],
            failure_config=tune.FailureConfig(max_failures=spec.search.retries),
            verbose=verbose,
        ),
    )
    tuner.fit()
    with Store.open(store_url) as store:
        store.set_study_status(name, "completed")
        counts = store.counts(name)
        front = pareto_front(store.trials(name), dict(spec.objectives))
    return SearchSummary(name, store.url, counts, front, time.perf_counter() - started)
