"""Ray Tune's OptunaSearch, with the three things a NAS search needs on top.

1. Infeasible configs never occupy a worker: ``suggest`` asks Optuna again until the sampled
   config passes the spec's constraints (closed-form cost model); each infeasible one is told to
   Optuna as PRUNED with its constraint violations (the sampler's ``constraints_func`` sees them)
   and stored as ``infeasible``.
2. Outcomes are told explicitly: a trial that completed its budget is COMPLETE with its values;
   one stopped early by the scheduler (ASHA) is PRUNED, not COMPLETE with truncated values that
   would pollute the Pareto front; a failed or diverged one is FAIL.
3. Each Tune trial's config carries its Optuna trial number (``archsearch_number``), the key the
   store uses, so Ray's, Optuna's and the store's trials match one to one.

The searcher is pickled for ``Tuner.restore``; it holds a store URL, never an open connection.
"""

from __future__ import annotations

import sys
from typing import Any

import optuna
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from search_space.grid_sampler import TuneGridSampler
from search_space.sampling import SpaceFunction, build_trial_config
from search_space.spec import SearchSpec

NUMBER_KEY = "archsearch_number"
STATUS_KEY = "archsearch_status"  # set on the final report of a trial that ran its whole budget
MAX_INFEASIBLE_IN_A_ROW = 200


class ArchsearchSearch(OptunaSearch):
    def __init__(self, spec: SearchSpec, store_url: str, study_name: str, storage, sampler):
        self.spec = spec
        self.store_url = store_url
        self.archsearch_study = study_name
        self._store = None
        self.infeasible = 0
        super().__init__(
            space=SpaceFunction(spec),
            metric=list(spec.objectives),
            mode=list(spec.objectives.values()),
            sampler=sampler,
            study_name=study_name,
            storage=storage,
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None
        return state

    def save(self, checkpoint_path: str) -> None:
        # OptunaSearch.save pickles __dict__ directly (not __getstate__): drop the open store.
        store, self._store = self._store, None
        try:
            super().save(checkpoint_path)
        finally:
            self._store = store

    @property
    def store(self):
        if self._store is None:
            from harness.store import Store

            self._store = Store.open(self.store_url)
        return self._store

    def suggest(self, trial_id: str) -> dict | None:
        for _ in range(MAX_INFEASIBLE_IN_A_ROW):
            if self._grid_done():
                return Searcher.FINISHED
            params = super().suggest(trial_id)
            if params is None:
                return None
            ot_trial = self._ot_trials[trial_id]
            violations = ot_trial.user_attrs.get("constraints", [])
            build_error = ot_trial.user_attrs.get("build_error")
            if build_error is None and all(v <= 0 for v in violations):
                return {**params, NUMBER_KEY: ot_trial.number}
            self._record_infeasible(ot_trial, params, violations, build_error)
            del self._ot_trials[trial_id]
        # The sampler keeps proposing what the constraints exclude: end the search (cleanly; the
        # driver then records the study as failed, with the reason) instead of raising inside Tune.
        print(
            f"[{self.archsearch_study}] stopping: {MAX_INFEASIBLE_IN_A_ROW} infeasible configurations in a row",
            file=sys.stderr,
            flush=True,
        )
        return Searcher.FINISHED

    def _grid_done(self) -> bool:
        """A grid search ends when every grid point has been dispatched (see search_space.grid_sampler)."""
        return (
            isinstance(self._sampler, TuneGridSampler)
            and self._ot_study is not None
            and self._sampler.all_started(self._ot_study)
        )

    def _record_infeasible(self, ot_trial, params: dict, violations: list[float], build_error: str | None) -> None:
        self.infeasible += 1
        self._ot_study.tell(ot_trial, state=optuna.trial.TrialState.PRUNED)
        try:
            config = build_trial_config(self.spec, params)
        except Exception:  # an invalid combination: keep what was sampled
            config = {"params": params}
        reasons = [
            f"{c} (violated by {v:.4g})" for c, v in zip(self.spec.constraints, violations, strict=False) if v > 0
        ]
        error = build_error or ("violates " + "; ".join(reasons))
        estimate = ot_trial.user_attrs.get("estimated_cost")
        self.store.finish_trial(
            self.archsearch_study,
            ot_trial.number,
            status="infeasible",
            config=config,
            measurement={**estimate, "flops_source": "cost_model"} if estimate else None,
            error=error,
            optuna_number=ot_trial.number,
        )

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return
        ot_trial = self._ot_trials[trial_id]
        status = (result or {}).get(STATUS_KEY)
        state = optuna.trial.TrialState
        try:
            if error or status in ("failed", "diverged"):
                self._ot_study.tell(ot_trial, state=state.FAIL)
            elif status == "completed":
                values = [float(result[m]) for m in self.metric]
                self._ot_study.tell(ot_trial, values)
            else:  # stopped by the scheduler before the end of its budget
                self._ot_study.tell(ot_trial, state=state.PRUNED)
        finally:
            self._completed_trials.add(trial_id)
