"""Tune callbacks that run in the driver: the store writer and the live progress line.

The driver is the store's only writer (workers need no database access), which is also what
keeps SQLite happy. Callbacks are pickled with the experiment state, so they keep a store URL
and open the store lazily.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from ray.tune import Callback
from ray.tune.stopper import Stopper

from harness.searcher import NUMBER_KEY, STATUS_KEY

EPOCH_KEYS = ("epoch", "step", "train_loss", "eval_loss", "top1", "top5", "lr", "epoch_time", "data_wait_fraction")


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
            from harness.store import Store

            self._store = Store.open(self.store_url)
        return self._store

    def _trial_config(self, trial) -> tuple[int, dict[str, Any]]:
        from search_space.sampling import build_trial_config
        from search_space.spec import SearchSpec

        params = dict(trial.config)
        number = params.pop(NUMBER_KEY)
        return number, build_trial_config(SearchSpec.model_validate(self.spec), params)

    def on_trial_start(self, iteration: int, trials: list, trial, **info: Any) -> None:
        number, config = self._trial_config(trial)
        self.store.start_trial(
            self.study, number, config, seed=config.get("seed"), optuna_number=number, host=socket.gethostname()
        )

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info: Any) -> None:
        self._last[trial.trial_id] = result
        if result.get("epoch"):
            number = result[NUMBER_KEY]
            row = {k: result.get(k) for k in EPOCH_KEYS}
            row["images_per_s"] = result.get("train_images_per_s")
            row["wall_time"] = result.get("time_total_s")
            self.store.record_epoch(self.study, number, row)

    def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
        result = self._last.pop(trial.trial_id, None) or trial.last_result or {}
        number, config = self._trial_config(trial)
        status = result.get(STATUS_KEY) or "pruned"  # no outcome mark: stopped early by the scheduler
        final = {k.removeprefix("final_"): v for k, v in result.items() if k.startswith("final_")}
        if status == "pruned" and result.get("top1") is not None:
            final = {"top1": result.get("top1"), "epochs": result.get("epoch")}
        measurement = {k.removeprefix("cost_"): v for k, v in result.items() if k.startswith("cost_")}
        if result.get("resumed_from_epoch"):
            final["resumed_from_epoch"] = result["resumed_from_epoch"]
        gpus = result.get("worker_gpus")
        device = f"GPU {gpus} on node {result.get('worker_node', '?')[:8]}" if gpus else measurement.get("device")
        self.store.finish_trial(
            self.study,
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
        )

    def on_trial_error(self, iteration: int, trials: list, trial, **info: Any) -> None:
        self._last.pop(trial.trial_id, None)
        number, config = self._trial_config(trial)
        error = None
        error_file = getattr(trial, "error_file", None)
        if error_file:
            try:
                with open(error_file) as handle:
                    error = handle.read()[-4000:]
            except OSError:
                error = None
        self.store.finish_trial(
            self.study, number, status="failed", config=config, error=error or "the trial raised", optuna_number=number
        )


class ProgressCallback(Callback):
    """One status line per finished trial: done / running / pruned / failed / infeasible / front size.

    The counts are COUNT queries (cheap at any size); the front needs every trial's objectives,
    so on a large study it is refreshed at most once per ``_FRONT_REFRESH_FACTOR`` times the
    seconds its last refresh took (the line shows the last known size meanwhile): the progress
    line never costs more than a few percent of the driver's time, even at 100k trials.
    """

    _FRONT_REFRESH_FACTOR = 20.0

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
        import time

        from dashboards.pareto import front_mask

        now = time.monotonic()
        if self._front_size is None or now >= self._front_due:
            outcomes = self._store.outcomes(self.study, list(self.objectives), strict=False)
            self._front_size = int(front_mask(outcomes, self.objectives).sum())
            took = time.monotonic() - now
            self._front_due = now + self._FRONT_REFRESH_FACTOR * took
        return self._front_size

    def _line(self) -> str:
        from harness.store import Store

        if self._store is None:
            self._store = Store.open(self.store_url)
        counts = self._store.counts(self.study, epochs=False)
        return (
            f"[{self.study}] done {counts['completed']}  running {counts['running']}  pruned {counts['pruned']}  "
            f"failed {counts['failed'] + counts['diverged']}  infeasible {counts['infeasible']}  "
            f"pareto front {self._front()}"
        )

    def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
        try:
            line = self._line()
        except Exception as error:  # progress display must never fail a trial
            line = f"[{self.study}] (progress unavailable: {type(error).__name__}: {error})"
        print(line, file=self.stream or sys.stderr, flush=True)

    on_trial_error = on_trial_complete


class HopelessSearchStopper(Stopper):
    """Stops the whole search when every trial so far failed, the last ``after`` of them (and all
    the others) for the same reason: a broken environment or config that no sampled value fixes
    would otherwise burn the whole budget. Each check is two COUNT queries (about a millisecond): trials
    that fail at once fail in bursts, so it checks at every step of Tune's loop."""

    def __init__(self, store_url: str, study: str, after: int = 3, spec: dict | None = None):
        self.store_url = store_url
        self.study = study
        self.after = max(1, after)
        self.spec = spec
        self._store = None
        self.reason: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None}

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        if self.reason is not None:
            return True
        from harness.failures import common_error
        from harness.store import Store

        if self._store is None:
            self._store = Store.open(self.store_url)
        counts = self._store.counts(self.study, epochs=False)
        if counts["completed"] or counts["pruned"] or counts["failed"] < self.after:
            return False
        common = common_error(self._store.trial_errors(self.study, ("failed",), limit=50))
        if common is None or self._may_depend_on_the_sample():
            return False
        self.reason = common
        print(
            f"[{self.study}] stopping: the first {counts['failed']} trials all failed with: {common}",
            file=sys.stderr,
            flush=True,
        )
        return True

    def _may_depend_on_the_sample(self) -> bool:
        """Whether the failed trials all share the value of some searched parameter (that value,
        e.g. ``data.name: cifar10`` without its files, may be the cause: other values may work)."""
        from harness.failures import shared_searched_value

        if self.spec is None:
            return False
        failed = self._store.trials(self.study, statuses=("failed",), limit=50, flatten_config=False)
        return shared_searched_value(self.spec, list(failed.get("config", []))) is not None
