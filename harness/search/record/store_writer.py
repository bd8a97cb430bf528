"""The store writer: the Tune callback that records every trial's start, epochs and outcome.

The driver is the store's only writer (workers need no database access), which is also what
keeps SQLite happy. Callbacks are pickled with the experiment state, so they keep a store URL
and open the store lazily; the session they report to is bound again on resume.
"""

from __future__ import annotations

import socket
from typing import Any

from ray.tune import Callback

from harness.search.interrupts import store_failures
from harness.search.record.trial_end import ConfigBuilder, DispatchedTrial, dispatched_trial, record_outcome
from harness.search.result_keys import NUMBER_KEY, STATUS_KEY
from harness.search.session import SearchSession, SessionBound
from harness.store import Store
from search_space.sampling import build_trial_config
from trials.status import TrialStatus

EPOCH_KEYS = (
    "epoch", "step", "train_loss", "eval_loss", "top1", "top5", "lr", "epoch_time", "data_wait_fraction",
    "train_eval_loss",
)  # fmt: skip


class StoreCallback(SessionBound, Callback):
    """Writes every trial's start, each epoch, and its outcome into the store; counts each trial end
    in the session (``trials_ended``, what the hopeless-search stopper watches)."""

    def __init__(
        self,
        store_url: str,
        study: str,
        spec: dict[str, Any],
        session: SearchSession | None = None,
        build: ConfigBuilder = build_trial_config,
    ):
        self.store_url = store_url
        self.study = study
        self.spec = spec
        self.build = build  # a module-level function: pickled by name with the callback
        self.session = session
        self._store = None
        self._last: dict[str, dict[str, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return self._unbound_state({**self.__dict__, "_store": None})

    def __setstate__(self, state: dict[str, Any]) -> None:
        """An older pickle's missing fields, filled here once: no method checks for them."""
        super().__setstate__({"build": build_trial_config, "_last": {}, **state})

    @property
    def store(self):
        if self._store is None:
            self._store = self._session().hold(Store.open(self.store_url))  # writes under the driver's lease
        return self._store

    def _trial_config(self, trial) -> DispatchedTrial:
        return dispatched_trial(self.spec, dict(trial.config), self.build)

    def on_trial_start(self, iteration: int, trials: list, trial, **info: Any) -> None:
        try:
            number, config, parameters = self._trial_config(trial)
            self.store.start_trial(
                self.study,
                number,
                config,
                seed=config.get("seed"),
                optuna_number=number,
                host=socket.gethostname(),
                parameters=parameters,
            )
        except store_failures() as error:
            self._session().stop_on_store_failure("recording a trial's start", error)

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info: Any) -> None:
        self._last[trial.trial_id] = result
        if result.get("epoch"):
            number = result[NUMBER_KEY]
            row = {k: result.get(k) for k in EPOCH_KEYS}
            row["images_per_s"] = result.get("train_images_per_s")
            row["wall_time"] = result.get("time_total_s")
            try:
                self.store.record_epoch(self.study, number, row)
            except store_failures() as error:
                self._session().stop_on_store_failure(f"recording an epoch of trial {number}", error)

    def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
        result = self._last.pop(trial.trial_id, None) or trial.last_result or {}
        ruled = self._session().rule_reason
        if ruled and not result.get(STATUS_KEY):  # cut short by a stop rule: cancelled, not pruned
            result = {**result, STATUS_KEY: TrialStatus.INTERRUPTED, "error": f"stopped with the search: {ruled}"}
        try:
            record_outcome(self.store, self.study, self.spec, dict(trial.config), result, self.build)
        except store_failures() as error:
            self._session().stop_on_store_failure("recording a finished trial", error)
        self._session().trial_ended()

    def on_trial_error(self, iteration: int, trials: list, trial, **info: Any) -> None:
        self._last.pop(trial.trial_id, None)
        error = None
        error_file = getattr(trial, "error_file", None)
        if error_file:
            try:
                with open(error_file) as handle:
                    error = handle.read()[-4000:]
            except OSError:
                error = None
        try:
            number, config, parameters = self._trial_config(trial)
            self.store.finish_trial(
                self.study,
                number,
                status=TrialStatus.FAILED,
                config=config,
                error=error or "the trial raised",
                optuna_number=number,
                parameters=parameters,
            )
        except store_failures() as failure:
            self._session().stop_on_store_failure("recording a failed trial", failure)
        self._session().trial_ended()
