"""How a search's study ends up consistent: its final status, the hopeless-search rule, and the
reconciliation of the store, Optuna and Ray's saved state (after a search, and on resume).

A driver, a database or a node can stop between a trial's end and its record; these functions make
the three agree again, each outcome recorded once. :mod:`harness.search` calls them at the end of a
search and on ``--resume``; the hopeless-search stopper calls the same rule while it runs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import optuna

from harness.failures import common_error, shared_searched_value
from harness.optuna_searcher import tell_outcome
from harness.output import nest_keys
from harness.result_keys import NUMBER_KEY, STATUS_KEY, split_tune_config
from harness.store import Store
from harness.store.urls import optuna_storage_url
from search_space.sampling import build_trial_config, split_params
from search_space.spec import SearchSpec


def final_status(store, name: str, counts: dict[str, int], spec: SearchSpec) -> tuple[str, str | None, bool]:
    """(status, one-line reason, whether the spec is to blame) of a search that has ended.

    ``completed`` if any trial completed; otherwise ``failed``, with the trials' common error, or
    the constraint that excluded every sampled config.
    """
    if counts.get("completed", 0) > 0:
        return "completed", None, False
    ran = sum(counts.get(s, 0) for s in ("pruned", "failed", "diverged"))
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


HOPELESS_AFTER = 3  # this many failed trials, none completed, all with the same error: the search stops


def hopeless_after(spec: SearchSpec) -> int:
    """How many trials must fail the same way before a search is hopeless: 3, or ``n_trials`` if fewer."""
    return min(HOPELESS_AFTER, spec.search.n_trials)


def hopeless_reason(store, name: str, after: int, spec: dict | None = None) -> str | None:
    """The common error when no trial completed and at least ``after`` failed all the same way,
    over different sampled values (what :class:`harness.tune_callbacks.HopelessSearchStopper`
    stops a search on), else None."""
    counts = store.counts(name, epochs=False)
    if counts["completed"] or counts["pruned"] or counts["failed"] < after:
        return None
    common = common_error(store.trial_errors(name, ("failed",), limit=50))
    if common is None or spec is None:
        return common
    failed = store.trials(name, statuses=("failed",), limit=50, flatten_config=False)
    return None if shared_searched_value(spec, list(failed.get("config", []))) else common


def reconcile(store, name: str, optuna_storage, *, stopped: str | None = None) -> dict[str, int]:
    """After a search ends: no Optuna trial RUNNING, no store trial ``running``.

    Anything still running when the Tuner has returned was lost with an earlier driver: it is
    told FAIL to Optuna and recorded ``failed`` (interrupted) in the store, once. With
    ``stopped`` (the search was ended on purpose), such trials are PRUNED in Optuna and ``interrupted``
    in the store, with that reason: they were cancelled, not stopped early by the scheduler.
    ``optuna_storage``: the search's Optuna storage, or its URL.
    """
    if isinstance(optuna_storage, str):  # a URL: the search's own storage was not at hand
        optuna_storage = optuna.storages.RDBStorage(optuna_storage)
    study = optuna.load_study(study_name=name, storage=optuna_storage)
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
                status="interrupted" if stopped else "failed",
                config=nest_keys(config),
                error=stopped or "interrupted: the search driver stopped while this trial ran, and it was not resumed",
            )
            fixed["store"] += 1
    return fixed


def replay_finished(tuner, spec: SearchSpec, store_url: str, name: str) -> int:
    """On resume: record the trials Ray holds as finished whose outcome the store or Optuna missed.

    A driver or a database that stopped between a trial's end and its record leaves Ray's saved
    state ahead of the store and of Optuna; Ray will not run or report those trials again. Their
    last results (with the outcome mark) come from the restored experiment and are written now,
    once: the store's record is idempotent, and Optuna is told only what it does not hold yet.
    Returns how many store records were written.
    """
    try:
        results = list(tuner.get_results())
    except Exception:  # no results saved yet: nothing to replay
        return 0
    finished = [
        r for r in results if r.error is None and (r.metrics or {}).get(STATUS_KEY) and NUMBER_KEY in (r.config or {})
    ]
    if not finished:
        return 0
    spec_dict = spec.model_dump(mode="json")
    study = optuna.load_study(study_name=name, storage=optuna.storages.RDBStorage(optuna_storage_url(store_url)))
    written = 0
    with Store.open(store_url) as store:
        trials = store.trials(name)
        recorded = dict(zip(trials.get("number", []), trials.get("status", []), strict=False))
        for result in finished:
            number = int(result.config[NUMBER_KEY])
            if recorded.get(number) not in ("completed", "failed", "diverged", "pruned"):
                record_outcome(store, name, spec_dict, dict(result.config), dict(result.metrics))
                written += 1
            tell_outcome(study, number, dict(result.metrics), False, list(spec.objectives))
    return written


class DispatchedTrial(NamedTuple):
    """What the store records of a dispatched Tune trial's config."""

    number: int  # the store's trial number (Optuna's)
    config: dict[str, Any]  # the trial config the worker builds: the spec's base, sampled and fixed values applied
    parameters: dict[str, dict[str, Any]]  # {"sampled": ..., "fixed": ...}


def dispatched_trial(spec: dict[str, Any], tune_config: dict[str, Any]) -> DispatchedTrial:
    """The store's view of a Tune trial's config (the same config the worker builds, see
    :func:`harness.trainable.worker_trial_config`)."""
    number, _, params = split_tune_config(tune_config)
    search_spec = SearchSpec.model_validate(spec)
    return DispatchedTrial(number, build_trial_config(search_spec, params), split_params(search_spec, params))


def record_outcome(store, study: str, spec: dict[str, Any], params: dict[str, Any], result: dict[str, Any]) -> None:
    """Write a finished trial's final record from its last Tune result (its outcome mark, cost, final metrics)."""
    number, config, parameters = dispatched_trial(spec, params)
    status = result.get(STATUS_KEY) or "pruned"  # no outcome mark: stopped early by the scheduler
    final = {k.removeprefix("final_"): v for k, v in result.items() if k.startswith("final_")}
    if status == "pruned" and result.get("top1") is not None:
        final = {"top1": result.get("top1"), "epochs": result.get("epoch")}
    measurement = {k.removeprefix("cost_"): v for k, v in result.items() if k.startswith("cost_")}
    if result.get("resumed_from_epoch"):
        final["resumed_from_epoch"] = result["resumed_from_epoch"]
    gpus = result.get("worker_gpus")
    device = f"GPU {gpus} on node {result.get('worker_node', '?')[:8]}" if gpus else measurement.get("device")
    store.finish_trial(
        study,
        number,
        status=status,
        config=config,
        measurement=measurement or None,
        final=final or None,
        error=result.get("error"),
        diverged_at_step=result.get("diverged_at_step"),
        device=device,
        host=result.get("hostname"),
        optuna_number=number,
        parameters=parameters,
    )
