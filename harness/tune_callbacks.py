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
from dataclasses import dataclass
from typing import Any

from ray.tune import Callback
from ray.tune.stopper import Stopper

from dashboards.pareto import front_mask
from harness import interrupts, stop_rules
from harness.interrupts import stop_on_store_failure, store_failures
from harness.result_keys import NUMBER_KEY, STATUS_KEY
from harness.store import Store
from harness.study_outcome import DispatchedTrial, dispatched_trial, hopeless_reason, record_outcome
from trials.data_config import DATA_STARVED_FRACTION, is_data_starved

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


@dataclass
class DataWait:
    """One running trial's epochs and how many of them were data-starved (the progress line's flag)."""

    number: Any = None
    epochs: int = 0
    starved: int = 0
    worst: float = 0.0

    def add(self, result: dict[str, Any]) -> None:
        self.number = result.get(NUMBER_KEY, self.number)
        fraction = result.get("data_wait_fraction")
        self.epochs += 1
        if is_data_starved(fraction):
            self.starved += 1
            self.worst = max(self.worst, float(fraction))

    def note(self) -> str:
        """``data-starved: trial 7 3/5 epochs ...`` when any epoch was, else empty."""
        if not self.starved:
            return ""
        return (
            f"data-starved: trial {self.number} {self.starved}/{self.epochs} epochs waited over "
            f"{100 * DATA_STARVED_FRACTION:.0f}% for data (worst {100 * self.worst:.0f}%): more search.resources.cpus"
        )


class ProgressCallback(Callback):
    """One status line per finished trial: done / running / pruned / failed / infeasible / front size.

    The counts are COUNT queries (cheap at any size); the front needs every trial's objectives,
    so it is refreshed at most once a second (``_FRONT_MIN_INTERVAL_S``: trials of a fast search
    end many times a second, and a front query per end was a third of the driver's own time per
    trial), and on a large study at most once per ``_FRONT_REFRESH_FACTOR`` times the seconds its
    last refresh took. The line shows the last known size meanwhile; the search's closing
    summary prints the exact front. The progress line never costs more than a few percent of
    the driver's time, even at 100k trials. A trial with data-starved epochs (more than
    ``DATA_STARVED_FRACTION`` of an epoch spent waiting for batches) says so on its line, counted
    from the epoch results Tune hands this callback (no store query).
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
        self._data_wait: dict[str, DataWait] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {
            **self.__dict__, "_store": None, "stream": None, "_front_size": None, "_front_due": 0.0, "_data_wait": {}
        }  # fmt: skip

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info: Any) -> None:
        if result.get("epoch"):
            self._data_wait.setdefault(trial.trial_id, DataWait()).add(result)

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
        data_wait = self._data_wait.pop(getattr(trial, "trial_id", None), None) or DataWait()
        if interrupts.current() is not None:  # stopping: the one line that says why comes at the end
            return
        try:
            line = self._line()
        except Exception as error:  # progress display must never fail a trial
            line = f"[{self.study}] (progress unavailable: {type(error).__name__}: {error})"
        if note := data_wait.note():
            line += f"  {note}"
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
