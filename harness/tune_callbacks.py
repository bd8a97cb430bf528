"""Tune callbacks that run in the driver: the store writer and the live progress line.

The driver is the store's only writer (workers need no database access), which is also what
keeps SQLite happy. Callbacks are pickled with the experiment state, so they keep a store URL
and open the store lazily.
"""

from __future__ import annotations

import socket
import sys
import time
from collections import Counter
from typing import Any

from ray.tune import Callback
from ray.tune.stopper import Stopper

from dashboards.pareto import front_mask
from harness import interrupts, stop_rules
from harness.interrupts import stop_on_store_failure, store_failures
from harness.result_keys import NUMBER_KEY, STATUS_KEY
from harness.store import Store
from harness.study_outcome import DispatchedTrial, dispatched_trial, hopeless_reason, record_outcome

# Trials whose end this driver process recorded, per study: the hopeless-search check runs again
# only when this moved (a search turns hopeless only when a trial ends).
_ENDED: Counter[str] = Counter()

EPOCH_KEYS = (
    "epoch", "step", "train_loss", "eval_loss", "top1", "top5", "lr", "epoch_time", "data_wait_fraction",
    "train_eval_loss",
)  # fmt: skip


class StoreCallback(Callback):
    """Writes every trial's start, each epoch, and its outcome into the store."""

    def __init__(self, store_url: str, study: str, spec: dict[str, Any]):
        self.store_url = store_url
        self.study = study
        self.spec = spec
        self._store = None
        self._last: dict[str, dict[str, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None}

    @property
    def store(self):
        if self._store is None:
            self._store = Store.open(self.store_url)
        return self._store

    def _trial_config(self, trial) -> DispatchedTrial:
        return dispatched_trial(self.spec, dict(trial.config))

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
            stop_on_store_failure("recording a trial's start", error)

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
                stop_on_store_failure(f"recording an epoch of trial {number}", error)

    def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
        result = self._last.pop(trial.trial_id, None) or trial.last_result or {}
        ruled = stop_rules.current()
        if ruled and not result.get(STATUS_KEY):  # cut short by a stop rule: cancelled, not pruned
            result = {**result, STATUS_KEY: "interrupted", "error": f"stopped with the search: {ruled}"}
        try:
            record_outcome(self.store, self.study, self.spec, dict(trial.config), result)
        except store_failures() as error:
            stop_on_store_failure("recording a finished trial", error)
        _ENDED[self.study] += 1

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
                status="failed",
                config=config,
                error=error or "the trial raised",
                optuna_number=number,
                parameters=parameters,
            )
        except store_failures() as failure:
            stop_on_store_failure("recording a failed trial", failure)
        _ENDED[self.study] += 1


class ProgressCallback(Callback):
    """One status line per finished trial: done / running / pruned / failed / infeasible / front size.

    The counts are COUNT queries (cheap at any size); the front needs every trial's objectives,
    so it is refreshed at most once a second (``_FRONT_MIN_INTERVAL_S``: trials of a fast search
    end many times a second, and a front query per end was a third of the driver's own time per
    trial), and on a large study at most once per ``_FRONT_REFRESH_FACTOR`` times the seconds its
    last refresh took. The line shows the last known size meanwhile; the search's closing
    summary prints the exact front. The progress line never costs more than a few percent of
    the driver's time, even at 100k trials.
    """

    _FRONT_REFRESH_FACTOR = 20.0
    _FRONT_MIN_INTERVAL_S = 1.0

    def __init__(self, store_url: str, study: str, objectives: dict[str, str], stream=None):
        self.store_url = store_url
        self.study = study
        self.objectives = objectives
        self.stream = stream
        self._store = None
        self._front_size: int | None = None
        self._front_due = 0.0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None, "stream": None, "_front_size": None, "_front_due": 0.0}

    def _front(self) -> int:
        now = time.monotonic()
        if self._front_size is None or now >= self._front_due:
            outcomes = self._store.outcomes(self.study, list(self.objectives), strict=False)
            self._front_size = int(front_mask(outcomes, self.objectives).sum())
            took = time.monotonic() - now
            self._front_due = now + max(self._FRONT_MIN_INTERVAL_S, self._FRONT_REFRESH_FACTOR * took)
        return self._front_size

    def _line(self) -> str:
        if self._store is None:
            self._store = Store.open(self.store_url)
        counts = self._store.counts(self.study, epochs=False)
        stop_rules.refresh()  # the plateau reading that counts this trial end
        return (
            f"[{self.study}] done {counts['completed']}  running {counts['running']}  pruned {counts['pruned']}  "
            f"failed {counts['failed'] + counts['diverged']}  infeasible {counts['infeasible']}  "
            f"duplicate {counts['duplicate']}  "
            f"pareto front {self._front()}"
            + (f"  {note}" if (note := stop_rules.progress_note()) else "")
        )

    def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
        if interrupts.current() is not None:  # stopping: the one line that says why comes at the end
            return
        try:
            line = self._line()
        except Exception as error:  # progress display must never fail a trial
            line = f"[{self.study}] (progress unavailable: {type(error).__name__}: {error})"
        print(line, file=self.stream or sys.stderr, flush=True)

    on_trial_error = on_trial_complete


class HopelessSearchStopper(Stopper):
    """Stops the whole search when every trial so far failed, the last ``after`` of them (and all
    the others) for the same reason: a broken environment or config that no sampled value fixes
    would otherwise burn the whole budget. Trials that fail at once fail in bursts, so it is asked at
    every step of Tune's loop (about ten a second), and it queries the store (a COUNT, about a
    millisecond) only when :class:`StoreCallback` recorded a trial's end since its last look, and once
    at the start (a resumed study may be hopeless already)."""

    def __init__(self, store_url: str, study: str, after: int = 3, spec: dict | None = None):
        self.store_url = store_url
        self.study = study
        self.after = max(1, after)
        self.spec = spec
        self._store = None
        self._looked_at: int | None = None  # _ENDED[study] at the last look
        self.reason: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None, "_looked_at": None}

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        if self.reason is not None:
            return True
        if self._looked_at == _ENDED[self.study]:
            return False
        self._looked_at = _ENDED[self.study]
        try:
            if self._store is None:
                self._store = Store.open(self.store_url)
            reason = hopeless_reason(self._store, self.study, self.after, self.spec)
            failed = self._store.counts(self.study, epochs=False)["failed"] if reason else 0
        except store_failures() as error:
            stop_on_store_failure("counting the trials", error)
            return False
        if reason is None:
            return False
        self.reason = reason
        print(
            f"[{self.study}] stopping: the first {failed} trials all failed with: {reason}",
            file=sys.stderr,
            flush=True,
        )
        return True
