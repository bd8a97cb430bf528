"""Making the store, Optuna and Ray's saved state agree again, after a search and on resume.

A driver, a database or a node can stop between a trial's end and its record; these functions make
the three agree again, each outcome recorded once, and none left RUNNING.
"""

from __future__ import annotations

import optuna

from harness.output import nest_keys
from harness.search.outcome import OPTUNA_STATE, TrialOutcome
from harness.search.record.trial_end import record_outcome
from harness.search.result_keys import NUMBER_KEY, STATUS_KEY
from harness.store import Store
from harness.store.urls import optuna_storage_url
from search_space.spec import SearchSpec
from trials.status import TrialStatus


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
    state = OPTUNA_STATE[TrialStatus.PRUNED if stopped else TrialStatus.INTERRUPTED]
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=state)
        fixed["optuna"] += 1
    trials = store.trials(name, statuses=(TrialStatus.RUNNING,))  # only those: a large study's configs stay undecoded
    if not trials.empty:
        for _, row in trials.iterrows():
            config = {k.removeprefix("config."): v for k, v in row.items() if k.startswith("config.")}
            store.finish_trial(
                name,
                int(row["number"]),
                status=TrialStatus.INTERRUPTED if stopped else TrialStatus.FAILED,
                config=nest_keys(config),
                error=stopped or "interrupted: the search driver stopped while this trial ran, and it was not resumed",
            )
            fixed["store"] += 1
    return fixed


def replay_finished(tuner, spec: SearchSpec, store_url: str, name: str, optuna_storage=None) -> int:
    """On resume: record the trials Ray holds as finished whose outcome the store or Optuna missed.

    A driver or a database that stopped between a trial's end and its record leaves Ray's saved
    state ahead of the store and of Optuna; Ray will not run or report those trials again. Their
    last results (with the outcome mark) come from the restored experiment and are written now,
    once: the store's record is idempotent, and Optuna is told only what it does not hold yet.
    ``optuna_storage``: the driver's Optuna storage (its writes under the lease), else one opened here.
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
    storage = optuna_storage or optuna.storages.RDBStorage(optuna_storage_url(store_url))
    study = optuna.load_study(study_name=name, storage=storage)
    written = 0
    with Store.open(store_url) as store:
        trials = store.trials(name)
        recorded = dict(zip(trials.get("number", []), trials.get("status", []), strict=False))
        for result in finished:
            number = int(result.config[NUMBER_KEY])
            if recorded.get(number) not in (
                TrialStatus.COMPLETED,
                TrialStatus.FAILED,
                TrialStatus.DIVERGED,
                TrialStatus.PRUNED,
            ):
                record_outcome(store, name, spec_dict, dict(result.config), dict(result.metrics))
                written += 1
            TrialOutcome.of_result(dict(result.metrics), False, list(spec.objectives)).tell(study, number)
    return written
