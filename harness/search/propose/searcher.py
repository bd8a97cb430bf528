"""The searcher: a Ray Tune ``Searcher`` composed over an Optuna study's public ask/tell.

Ray's seam is composition (``ConcurrencyLimiter(Searcher)`` wraps a searcher); this one holds an
``optuna.Study`` and asks it for each Tune trial (the spec's define-by-run space function fills the
asked trial), tells it each outcome once (:class:`harness.search.outcome.TrialOutcome`), and adds
what a NAS search needs:

1. Infeasible configs never occupy a worker: ``suggest`` asks Optuna again until the sampled
   config passes the spec's constraints (closed-form cost model); each infeasible one is told to
   Optuna as PRUNED with its constraint violations (the sampler's ``constraints_func`` sees them)
   and stored as ``infeasible`` with the config it would have trained (unvalidated where its model
   does not build, in the shape of a valid trial's) and its sampled and fixed values, so every view
   reads it like any other trial.
2. Outcomes are told explicitly: a trial that completed its budget is COMPLETE with its values;
   one stopped early by the scheduler (ASHA) is PRUNED, not COMPLETE with truncated values that
   would pollute the Pareto front; a failed or diverged one is FAIL.
3. Each Tune trial's config carries its Optuna trial number (``archsearch_number``), the key the
   store uses, so Ray's, Optuna's and the store's trials match one to one.
4. A configuration identical to one already completed or running in the study (the full trial
   config after sampling, seed included) is not trained again: Optuna is told the original's
   values (at once, or when the original finishes), the store records it ``duplicate`` with a
   reference to the original, and the searcher asks again: duplicates take no budget
   (``n_trials`` counts trained trials), and a discrete space whose every configuration has been
   tried ends the search with one line. TPE and NSGA-II re-propose points of small discrete
   spaces; without this a GPU would spend a whole trial, or a slot of the budget, on a result the
   study already has.
   As soon as the sampler has nothing better (it proposes a configuration already trained), or once
   nothing new is left (every configuration tried), a configuration that early stopping pruned is
   dispatched again while the budget allows (:data:`READMIT_PRUNED`), each once, to the end of its
   budget (the config carries :data:`harness.search.result_keys.RETRY_KEY`: the scheduler never
   judges it), those that got furthest first (then MO-ASHA's order of their last values); while
   trials still run, one of them may yet be pruned, so the searcher waits (None) rather than ending.
   It resumes from the pruned trial's last checkpoint (:data:`~harness.search.result_keys.RESUME_KEY`,
   as ASHA's promotions continue a paused trial): early stopping then only defers epochs, never spends
   the ones a pruned configuration already trained a second time.

5. On resume, the budget is the store's: Ray restores the searcher as it was at its last experiment
   snapshot, so trials dispatched after it (a driver killed between two snapshots) are unknown to
   the restored searcher and to Ray. Those that finished count towards ``n_trials`` (and their
   configurations are not trained again); those that were running are lost with the driver,
   recorded ``interrupted`` and told FAIL, and their slot of the budget is dispatched again, so a
   killed and resumed search completes exactly the trials it was asked for.

The searcher is pickled for ``Tuner.restore``; it holds a store URL, never an open connection.
"""

from __future__ import annotations

import json
import math
import numbers
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
from ray.tune.search import Searcher

from harness.output import nest_keys
from harness.search import adapter as fields
from harness.search.checkpoints import kept_checkpoint
from harness.search.interrupts import store_failures
from harness.search.outcome import OPTUNA_STATE, TrialOutcome
from harness.search.propose.samplers import STATUS_ATTR, TuneGridSampler
from harness.search.result_keys import NUMBER_KEY, PRICED_KEY, RESUME_KEY, RETRY_KEY, STATUS_KEY
from harness.search.session import SearchSession, SessionBound
from harness.search.stop.early_stopping import promotion_order
from harness.store import LeaseLost, Store
from harness.store.lease_guard import guard_writes
from harness.store.urls import optuna_storage_url
from search_space.sampling import Feasibility, SpaceFunction, build_trial_config, discrete_space_size, split_params
from search_space.spec import COST_METRICS, SearchSpec
from trials.configio import ConfigError
from trials.status import TrialStatus

MAX_INFEASIBLE_IN_A_ROW = 200
REASON_ATTR = "archsearch_reason"  # beside STATUS_ATTR (samplers.py): why it never trained
MAX_REASON = 500
READMIT_PRUNED = True  # pruned configurations run again when nothing better is proposed (module docstring, 4)


class ArchsearchSearch(SessionBound, Searcher):
    """Optuna's ask/tell behind Ray Tune's ``Searcher``, plus infeasible and duplicate configurations
    (see the module docstring)."""

    def __init__(
        self, spec: SearchSpec, store_url: str, study_name: str, storage, sampler, session: SearchSession | None = None
    ):
        super().__init__(metric=list(spec.objectives), mode=list(spec.objectives.values()))
        self.session = session
        self.spec = spec
        self.store_url = store_url
        self.archsearch_study = study_name
        self._store = None
        self.infeasible = 0
        self.duplicates = 0
        self.dispatched = 0
        self._seen: dict[str, int] = {}  # config key -> Optuna number of the trial that trains it
        self._outcomes: dict[int, TrialOutcome] = {}  # Optuna number -> what Optuna was told of it
        self._waiting: dict[int, list[int]] = {}  # original's number -> duplicates waiting for its outcome
        self._synced = False  # with the store, in this process (never pickled: a restored searcher syncs again)
        self._reusable: dict[str, dict[str, Any]] = {}  # config key -> an earlier study's record (warm start)
        self._space_size = discrete_space_size(spec)  # None: a float range, the space is not enumerable
        self._infeasible_keys: set[str] = set()  # distinct infeasible proposals (their params)
        self._params_of: dict[int, dict[str, Any]] = {}  # Optuna number -> its sampled params (a retry's)
        self._pruned: dict[int, tuple[int, list[float]]] = {}  # pruned, not yet retried: (epochs, last values)
        self._nothing_new = False  # the sampler proposed only duplicates MAX_INFEASIBLE_IN_A_ROW times in a row
        self._retries: set[int] = set()  # Optuna numbers of pruned configurations run again (never twice)
        # The experiment dir holding the trials' checkpoints (set by the driver): a pruned configuration run
        # again resumes from its last one (RESUME_KEY). None: a retry trains from epoch 1.
        self.checkpoints_in: str | None = None
        # A multi-objective study's learning curves, held until the trial completes (on_trial_result)
        self._curves: dict[str, dict[int, float]] = {}
        self._counted_on_resume: set[int] = set()  # trials the store had beyond Ray's snapshot (see _sync_with_store)
        self._exhausted_said = False  # "every configuration has been tried" was said
        self.space: Any = SpaceFunction(spec)  # the define-by-run function that fills an asked trial
        self.study = optuna.create_study(
            storage=storage,  # None: in memory (a replay)
            sampler=sampler,
            pruner=optuna.pruners.NopPruner(),  # early stopping is the scheduler's (harness.search.stop)
            study_name=study_name,
            load_if_exists=True,
            directions=["minimize" if d == "min" else "maximize" for d in spec.objectives.values()],
        )
        self._asked: dict[str, optuna.Trial] = {}  # Tune trial id -> the Optuna trial asked for it
        self._told: set[str] = set()  # Tune trial ids whose outcome Optuna has been told
        self._guarded = False  # Optuna's writes are checked under the session's lease (never pickled)
        if session is not None and isinstance(storage, optuna.storages.RDBStorage):
            guard_writes(storage.engine, session)
            self._guarded = True
        fields.check_study(self.study)  # an Optuna that renamed a field the adapter reads: say so now

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None
        state["_synced"] = False
        state["_guarded"] = False  # an unpickled study's storage has an engine of its own, unguarded
        return self._unbound_state(state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(_upgraded(state))

    def save(self, checkpoint_path: str) -> None:
        """Ray's searcher checkpoint: the state as pickled (no open store, no session, not synced)."""
        with open(checkpoint_path, "wb") as handle:
            pickle.dump(self.__getstate__(), handle)

    def restore(self, checkpoint_path: str) -> None:
        """Back to a checkpoint's state; the session bound by this driver stays."""
        with open(checkpoint_path, "rb") as handle:
            state = pickle.load(handle)
        session = self.session
        self.__dict__.update(_upgraded(state))
        self.session = session
        if session is not None and session.store_url is not None:
            self.rebind(session.store_url, session.study)

    def rebind(self, store_url: str, study: str) -> None:
        """The driver's store and study win over the pickled ones (see :meth:`SessionBound.rebind`):
        the Optuna study is loaded again from that store, under that name, with the pickled sampler
        (its state: a resumed TPE goes on where it stopped), on a storage whose writes are made under
        the driver's lease (:func:`harness.store.lease_guard.guard_writes`)."""
        if (self.store_url, self.archsearch_study) == (store_url, study) and (self._guarded or self.session is None):
            return
        self.store_url, self.archsearch_study, self._store = store_url, study, None
        storage = leased_optuna_storage(store_url, self.session)
        self._guarded = self.session is not None
        self.study = optuna.load_study(study_name=study, storage=storage, sampler=self.study.sampler)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return False  # the space is the spec's, set at construction; Tune's param space stays empty

    @property
    def sampler(self) -> optuna.samplers.BaseSampler:
        return self.study.sampler

    def asked_trial(self, trial_id: str) -> optuna.Trial | None:
        return self._asked.get(trial_id)

    def _ask(self, trial_id: str) -> dict[str, Any]:
        """Ask Optuna for ``trial_id`` (again for the same trial if it was asked before) and fill it with
        the define-by-run space: its sampled values and the spec's fixed ones."""
        trial = self._asked.get(trial_id)
        if trial is None:
            trial = self._asked[trial_id] = self.study.ask()
        fixed = self.space(trial)
        return nest_keys({**trial.params, **(fixed or {})}, sep="/")  # as Ray Tune nests a config

    def _forget(self, trial_id: str) -> None:
        """A Tune trial id that will not run (an infeasible, duplicate or reused proposal)."""
        self._asked.pop(trial_id, None)

    @property
    def store(self):
        if self._store is None:
            store = Store.open(self.store_url)
            self._store = self.session.hold(store) if self.session is not None else store  # the driver's lease
        return self._store

    def trial_config(self, params: dict[str, Any]) -> dict[str, Any]:
        """The config a proposal trains (its identity for duplicates); a replay against a table
        (``benchmarks.search_quality``) overrides this and the space function, nothing else."""
        return build_trial_config(self.spec, params)

    def _budget_spent(self) -> bool:
        """Trained trials count towards ``n_trials``; duplicates and infeasible ones take no budget."""
        return self.dispatched >= self.spec.search.n_trials

    def _space_exhausted(self) -> bool:
        """Whether every configuration of a discrete space has been dispatched or found infeasible:
        the sampler can only propose duplicates from here, so the search ends instead of asking on."""
        size = self._space_size
        tried = len(self._seen) + len(self._infeasible_keys)
        if size is None or tried < size:
            return False
        if self._exhausted_said:
            return True
        self._exhausted_said = True
        self._say(
            f"[{self.archsearch_study}] stopping: every configuration of the space has been tried "
            f"({len(self._seen)} trained, {tried - len(self._seen)} infeasible, of {size}): nothing new is left",
        )
        return True

    def _suggest(self, trial_id: str) -> dict | None:
        if not self._synced:
            self._sync_with_store()
        rejected = TrialStatus.INFEASIBLE
        for _ in range(MAX_INFEASIBLE_IN_A_ROW):
            if self._grid_done() or self._budget_spent():
                return Searcher.FINISHED
            if self._nothing_new or self._space_exhausted():
                return self._retry_pruned(trial_id)
            params = self._ask(trial_id)
            ot_trial = self._asked[trial_id]
            feasibility = self._feasibility(ot_trial)
            if feasibility.feasible:
                config = self.trial_config(params)
                key = config_key(config)
                reused = self._reusable.pop(key, None)
                if reused is not None and self._record_reused(ot_trial, config, params, reused):
                    self._seen[key] = ot_trial.number
                    self.dispatched += 1  # a completed trial of this study, trained by an earlier one
                    self._forget(trial_id)
                    continue
                original = self._seen.get(key)
                outcome = self._outcomes.get(original) if original is not None else None
                if original is None or (outcome is not None and outcome.retried_if_proposed_again):
                    self._seen[key] = ot_trial.number
                    self.dispatched += 1
                    # params holds the sampled and the fixed values (SpaceFunction returns the fixed
                    # ones); the priced cost travels with them, and the worker checks its model against it.
                    priced = {metric: (feasibility.cost or {}).get(metric) for metric in ("flops", "params")}
                    self._params_of[ot_trial.number] = dict(ot_trial.params)
                    return {**params, NUMBER_KEY: ot_trial.number, PRICED_KEY: priced}
                self._record_duplicate(ot_trial, config, params, original)
                rejected = TrialStatus.DUPLICATE
                if READMIT_PRUNED and self._pruned:  # the sampler has nothing better: a pruned one comes back
                    self._forget(trial_id)
                    return self._retry_pruned(trial_id)
            else:
                self._record_infeasible(ot_trial, params, feasibility)
                self._infeasible_keys.add(config_key(params))
                rejected = TrialStatus.INFEASIBLE
            self._forget(trial_id)
        # The sampler keeps proposing what the constraints exclude (or what was trained already): end
        # the search cleanly (the driver records the outcome) instead of raising inside Tune; after
        # duplicates only, pruned configurations are retried first (item 4 of the module docstring).
        self._say(
            f"[{self.archsearch_study}] stopping: {MAX_INFEASIBLE_IN_A_ROW} {rejected} configurations in a row",
        )
        if rejected == TrialStatus.DUPLICATE:
            self._nothing_new = True
            return self._retry_pruned(trial_id)
        return Searcher.FINISHED

    def _retry_pruned(self, trial_id: str) -> dict | str | None:
        """Nothing new is left: dispatch a configuration early stopping pruned again, to the end of its
        budget (the furthest it got first, then MO-ASHA's order of its last values); None (ask again
        later) while a running trial may yet be pruned; else the search is finished."""
        pruned = self._pruned
        if not READMIT_PRUNED or not pruned:
            running = [t for t in self._asked if t not in self._told and t != trial_id]
            waiting = READMIT_PRUNED and self.spec.search.early_stopping is not None and running
            return None if waiting else Searcher.FINISHED
        numbers = sorted(pruned, key=lambda n: (-pruned[n][0], n))
        furthest = [n for n in numbers if pruned[n][0] == pruned[numbers[0]][0]]
        original = furthest[int(promotion_order(np.array([pruned[n][1] for n in furthest]))[0])]
        resume = self.resume_point(original, pruned[original][0])
        del pruned[original]
        self._forget(trial_id)
        self.study.enqueue_trial(self._params_of[original], user_attrs={"retry_of": original})
        params = self._ask(trial_id)
        ot_trial = self._asked[trial_id]
        feasibility = self._feasibility(ot_trial)
        self._seen[config_key(self.trial_config(params))] = ot_trial.number
        self._params_of[ot_trial.number] = dict(ot_trial.params)
        self._retries.add(ot_trial.number)  # never retried twice
        self.dispatched += 1
        priced = {metric: (feasibility.cost or {}).get(metric) for metric in ("flops", "params")}
        retry = {RETRY_KEY: original, **({RESUME_KEY: resume} if resume else {})}
        return {**params, NUMBER_KEY: ot_trial.number, PRICED_KEY: priced, **retry}

    def resume_point(self, original: int, epochs: int) -> dict[str, Any] | None:
        """Where the retry of pruned trial ``original`` (pruned after ``epochs``) resumes: its last checkpoint
        (:data:`RESUME_KEY`), so early stopping defers its remaining epochs instead of spending the first ones
        twice; None (train from epoch 1) where it left none, or the driver named no experiment dir."""
        if not self.checkpoints_in or epochs < 1:
            return None
        checkpoint = kept_checkpoint(self.checkpoints_in, original)
        return {"checkpoint": str(checkpoint), "epoch": epochs} if checkpoint is not None else None

    def _feasibility(self, ot_trial) -> Feasibility:
        """What the space function found of this trial: handed over in memory, or (a space function
        pickled by an older archsearch) from the trial's user attributes."""
        checked = getattr(self.space, "checked", {}).pop(ot_trial.number, None)
        if checked is not None:
            return checked
        attrs = ot_trial.user_attrs
        return Feasibility(attrs.get("estimated_cost"), attrs.get("constraints", []), attrs.get("build_error"))

    def _sync_with_store(self) -> None:
        """Count in what the store holds of this study beyond this searcher's state (see item 5 of
        the module docstring); a no-op for a new study. Runs once per process, at the first suggest."""
        self._synced = True
        self._counted_on_resume = set()
        if self.archsearch_study not in self.store.study_names():  # not recorded yet: nothing to count
            return
        trials = self.store.trials(self.archsearch_study, flatten_config=False)
        if trials.empty:
            return
        known = {trial.number for trial in self._asked.values()}
        study = self.study
        lost = 0
        for row in trials.itertuples(index=False):
            number, status = int(row.number), row.status
            if number in known or status in (TrialStatus.INFEASIBLE, TrialStatus.DUPLICATE):
                continue
            frozen = fields.frozen_trial(study, number)
            if status in (TrialStatus.RUNNING, TrialStatus.INTERRUPTED):  # lost with the driver: runs again
                TrialOutcome(TrialStatus.INTERRUPTED).tell(study, number)
                self.store.finish_trial(
                    self.archsearch_study,
                    number,
                    status=TrialStatus.INTERRUPTED,
                    config=row.config,
                    error="interrupted: lost with a driver that stopped before Ray saved it; run again as a new trial",
                )
                lost += 1
                continue
            self.dispatched += 1  # finished after the snapshot: it counts, and is not trained again
            self._seen[config_key(row.config)] = number
            self._outcomes[number] = TrialOutcome.of_frozen(frozen)
            self._counted_on_resume.add(number)
        statuses = trials["status"]
        replayed = trials["replayed"].eq(True) if "replayed" in trials else statuses.eq("")
        self.duplicates = int((statuses.eq(TrialStatus.DUPLICATE) & ~replayed).sum())
        self.infeasible = max(self.infeasible, int(statuses.eq(TrialStatus.INFEASIBLE).sum()))
        if lost:
            self._say(
                f"[{self.archsearch_study}] {lost} trial(s) lost with the earlier driver: "
                "recorded interrupted, run again",
            )

    def set_reusable(self, records: dict[str, dict[str, Any]]) -> None:
        """Earlier trials (a warm start's ``reuse_results``) whose config, if proposed again, is copied."""
        self._reusable = dict(records)

    def _record_reused(self, ot_trial, config: dict, params: dict, record: dict[str, Any]) -> bool:
        """Copy an earlier study's identical trial as this trial's result; False if an objective is missing."""
        values = []
        for metric in self.metric:
            value = record["final"].get(metric, record["measurement"].get(metric))
            if not isinstance(value, numbers.Real) or value != value:
                return False
            values.append(float(value))
        outcome = TrialOutcome(TrialStatus.COMPLETED, tuple(values))
        outcome.tell(self.study, ot_trial.number)
        self._outcomes[ot_trial.number] = outcome
        self.store.finish_trial(
            self.archsearch_study,
            ot_trial.number,
            status=TrialStatus.COMPLETED,
            config=config,
            measurement=record["measurement"] or None,
            epochs=record["epochs"],
            final={**record["final"], "reused_from": record["source"]},
            optuna_number=ot_trial.number,
            parameters=split_params(self.spec, params),
        )
        return True

    def _record_duplicate(self, ot_trial, config: dict, params: dict, original: int) -> None:
        # A sampler restored from Ray's snapshot proposes again what it proposed after the snapshot:
        # the first re-proposal of a trial counted on resume is that trial, not a new duplicate.
        counted_on_resume = self._counted_on_resume
        replayed = original in counted_on_resume
        counted_on_resume.discard(original)
        if not replayed:
            self.duplicates += 1
        outcome = self._outcomes.get(original)
        if outcome is not None:
            self._tell_copy(ot_trial.number, outcome)
        else:  # the original still runs: told its outcome when it finishes
            self._waiting.setdefault(original, []).append(ot_trial.number)
        self.store.finish_trial(
            self.archsearch_study,
            ot_trial.number,
            status=TrialStatus.DUPLICATE,
            config=config,
            final={"duplicate_of": original, **({"replayed": True} if replayed else {})},
            error=(
                f"duplicate of trial {original}: proposed again by the sampler restored on resume; "
                "not trained again, not counted towards n_trials"
                if replayed
                else f"duplicate of trial {original}: the same configuration (seed included), not trained again"
            ),
            optuna_number=ot_trial.number,
            parameters=split_params(self.spec, params),
        )

    def _tell_copy(self, number: int, outcome: TrialOutcome) -> None:
        outcome.tell(self.study, number)

    def _grid_done(self) -> bool:
        """A grid search ends when every grid point has been dispatched (see harness.search.propose.samplers)."""
        return isinstance(self.sampler, TuneGridSampler) and self.sampler.all_started(self.study)

    def _record_infeasible(self, ot_trial, params: dict, feasibility: Feasibility) -> None:
        self.infeasible += 1
        reasons = [
            f"{c} (violated by {v:.4g})"
            for c, v in zip(self.spec.constraints, feasibility.violations, strict=False)
            if v > 0
        ]
        error = feasibility.build_error or ("violates " + "; ".join(reasons))
        # Optuna has no state for "never trained": PRUNED, with what archsearch calls it and why as
        # user attributes (optuna-dashboard shows them beside the trial).
        ot_trial.set_user_attr(STATUS_ATTR, str(TrialStatus.INFEASIBLE))
        ot_trial.set_user_attr(REASON_ATTR, error[:MAX_REASON])
        self.study.tell(ot_trial, state=OPTUNA_STATE[TrialStatus.INFEASIBLE])
        try:
            config = self.trial_config(params)
        except ConfigError:  # its model does not build: the config it would have trained, unvalidated
            config = build_trial_config(self.spec, params, validate=False)
        estimate = feasibility.cost
        self.store.finish_trial(
            self.archsearch_study,
            ot_trial.number,
            status=TrialStatus.INFEASIBLE,
            config=config,
            measurement={**estimate, "flops_source": "cost_model"} if estimate else None,
            error=error,
            optuna_number=ot_trial.number,
            parameters=split_params(self.spec, params),
        )

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        ot_trial = self._asked.get(trial_id)
        if trial_id in self._told or ot_trial is None:
            return
        try:
            outcome = TrialOutcome.of_result(result, error, list(self.metric))
            self._verify_lease()  # a study taken over gets nothing more from here
            stored = (result or {}).get(STATUS_KEY)  # diverged is FAIL to Optuna: the attribute says which
            known = stored in {status.value for status in TrialStatus}
            ot_trial.set_user_attr(STATUS_ATTR, str(stored) if known and not error else str(outcome.status))
            curve = self._curves.pop(trial_id, None)
            if curve and outcome.state is optuna.trial.TrialState.COMPLETE:  # a multi-objective curve (on_trial_result)
                self._report_intermediate(ot_trial.number, curve)
            outcome.tell(self.study, ot_trial.number)
            number = ot_trial.number
            retriable = number in self._params_of and number not in self._retries
            if outcome.status is TrialStatus.PRUNED and retriable:
                self._pruned[ot_trial.number] = (_epochs_of(result), self._minimised(result))
            self._outcomes[ot_trial.number] = outcome
            for duplicate in self._waiting.pop(ot_trial.number, []):
                self._tell_copy(duplicate, outcome)
        except store_failures() as failure:  # the database is down: stop, resumable (see harness.search.interrupts)
            self._session().stop_on_store_failure(f"telling Optuna trial {ot_trial.number}'s outcome", failure)
        finally:
            self._told.add(trial_id)

    def _minimised(self, result: dict | None) -> list[float]:
        """A result's objectives, each to be minimised (a missing one the worst)."""
        values = []
        for metric, mode in zip(self.metric, self.mode, strict=True):
            value = (result or {}).get(metric)
            real = isinstance(value, numbers.Real) and not isinstance(value, bool)  # numpy's numbers too
            number = float(value) if real and value == value else math.inf
            values.append(-number if mode == "max" and math.isfinite(number) else number)
        return values

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """Each epoch's value of the first objective that training reports (``top1``, not a cost known
        before it) reaches Optuna as the trial's intermediate value at that epoch, so optuna-dashboard
        and ``optuna.load_study(...).trials[n].intermediate_values`` show the learning curves.

        In a multi-objective study (every archsearch study with a cost) they are held here and written
        when the trial completes, never for a pruned one: Optuna supports intermediate values only in
        single-objective studies, and its TPE sampler, which ranks PRUNED trials by their last
        intermediate value, then asks for the study's single direction and raises (every proposal after
        the first trial early stopping pruned failed)."""
        ot_trial = self._asked.get(trial_id)
        metric = next((m for m in self.spec.objectives if m not in COST_METRICS), None)
        value, epoch = result.get(metric), result.get("epoch")
        if ot_trial is None or trial_id in self._told or not isinstance(epoch, int):
            return
        if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
            return
        if len(self.metric) > 1:
            self._curves.setdefault(trial_id, {})[epoch] = float(value)
            return
        self._report_intermediate(ot_trial.number, {epoch: float(value)})

    def _report_intermediate(self, number: int, values: dict[int, float]) -> None:
        for epoch, value in sorted(values.items()):
            try:
                self._verify_lease()  # an intermediate value is Optuna's record of the study too
                fields.report_intermediate(self.study, number, epoch, value)
            except optuna.exceptions.UpdateFinishedTrialError:  # told already (reconciled on resume): kept
                return
            except store_failures() as failure:
                self._session().stop_on_store_failure(f"recording trial {number}'s epoch {epoch}", failure)
                return

    def _verify_lease(self) -> None:
        """:class:`LeaseLost` where this driver's lease on its study is gone (found by any hook, or
        now): every write this searcher makes to Optuna's study (an asked trial, an intermediate
        value, an outcome) is the driver's to make only while it holds the study."""
        session = self.session
        if session is None or session.lease is None:
            return
        if session.lease_lost:
            raise LeaseLost(f"this driver lost its lease on study {session.study!r}")
        self.store.verify_lease(session.study)

    def suggest(self, trial_id: str) -> dict | None:
        try:
            self._verify_lease()  # asking Optuna writes a trial to its study
            return self._suggest(trial_id)
        except store_failures() as failure:
            self._session().stop_on_store_failure("asking Optuna for a configuration", failure)
            return None


def leased_optuna_storage(store_url: str, session: SearchSession | None) -> optuna.storages.RDBStorage:
    """Optuna's storage in the store's database, each write made under ``session``'s lease on its
    study (:func:`harness.store.lease_guard.guard_writes`; no session: unguarded)."""
    storage = optuna.storages.RDBStorage(optuna_storage_url(store_url))
    if session is not None:
        guard_writes(storage.engine, session)
    return storage


def _epochs_of(result: dict | None) -> int:
    """How many epochs a finished trial ran (Tune's iteration count, or the trainable's epoch)."""
    value = (result or {}).get("training_iteration", (result or {}).get("epoch"))
    return int(value) if isinstance(value, (int, float)) else 0


def config_key(config: dict) -> str:
    """Identity of a trial configuration: the full config after sampling, seed included."""
    return json.dumps(config, sort_keys=True, default=str)


# What Ray Tune's OptunaSearch, which this searcher extended before it was composed over Optuna's
# ask/tell, kept under other names: a searcher pickled by an older archsearch is read with them.
_FORMER_FIELDS = {"_ot_study": "study", "_ot_trials": "_asked", "_completed_trials": "_told", "_space": "space"}


# Each field a searcher pickled by an older archsearch may lack, and its value for such a searcher.
_FIELD_DEFAULTS: dict[str, Callable[[], Any]] = {
    "_asked": dict, "_told": set, "_seen": dict, "_outcomes": dict, "_waiting": dict, "_reusable": dict,
    "_infeasible_keys": set, "_params_of": dict, "_pruned": dict, "_retries": set, "_counted_on_resume": set,
    "_synced": bool, "_nothing_new": bool, "_exhausted_said": bool, "infeasible": int, "duplicates": int,
    "dispatched": int, "_curves": dict, "_guarded": bool, "checkpoints_in": lambda: None,
}  # fmt: skip


def _upgraded(state: dict[str, Any]) -> dict[str, Any]:
    """A pickled searcher's state in today's fields: the one place an older pickle is read (OptunaSearch's
    field names, outcome tuples, fields added since); every other method reads today's fields alone."""
    state = dict(state)
    for old, new in _FORMER_FIELDS.items():
        if old in state and new not in state:
            state[new] = state.pop(old)
    if state.get("_outcomes"):
        state["_outcomes"] = {number: TrialOutcome.coerce(o) for number, o in state["_outcomes"].items()}
    for field, default in _FIELD_DEFAULTS.items():
        if field not in state:
            state[field] = default()
    if "_space_size" not in state and "spec" in state:
        state["_space_size"] = discrete_space_size(state["spec"])
    return state
