"""The replay calls a search's hooks in Ray Tune's order (issue 58, item 2).

``harness.search.simulate`` said it followed Tune's loop but ran the callbacks, then the scheduler,
then the stoppers, and never called ``searcher.on_trial_result``. Here the same recording hooks (a
searcher, a scheduler, a stopper, a callback) run once under a real ``Tuner.fit()`` and once under
``simulate`` on the same trials (the same configs, the same results epoch by epoch), one trial at a
time so that Tune's order is deterministic, and the two sequences of calls must be equal. The trials
take every path: one runs to its last epoch, one is stopped by the stopper, one by the scheduler.
"""

from __future__ import annotations

import pytest
from ray import tune
from ray.tune import Callback, Stopper
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from harness.search.engine import Engine
from harness.search.session import SearchSession
from harness.search.simulate import simulate

EPOCHS = 3
CONFIGS = [{"ordinal": 0}, {"ordinal": 1}, {"ordinal": 2}]
STOPPED_BY_STOPPER = (1, 2)  # (trial ordinal, epoch)
STOPPED_BY_SCHEDULER = (2, 1)


def _result(ordinal: int, epoch: int) -> dict:
    return {"score": float(10 * ordinal + epoch), "epoch": epoch}


class Calls:
    """The hook calls, as (hook, trial ordinal, epoch or None), in the order they happened."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int | None]] = []
        self.ordinal: dict[str, int] = {}

    def add(self, hook: str, trial_id: str, result: dict | None) -> None:
        epoch = None if result is None else result.get("epoch")
        self.seen.append((hook, self.ordinal[trial_id], epoch))


class RecordingSearcher(Searcher):
    def __init__(self, calls: Calls):
        super().__init__(metric="score", mode="max")
        self.calls, self.next = calls, 0

    def suggest(self, trial_id: str):
        if self.next >= len(CONFIGS):
            return Searcher.FINISHED
        self.calls.ordinal[trial_id] = self.next
        self.next += 1
        return dict(CONFIGS[self.next - 1])

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self.calls.add("searcher.on_trial_result", trial_id, result)

    def on_trial_complete(self, trial_id: str, result=None, error: bool = False) -> None:
        self.calls.add("searcher.on_trial_complete", trial_id, result)


class RecordingScheduler(FIFOScheduler):
    def __init__(self, calls: Calls):
        super().__init__()
        self.calls = calls

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        self.calls.add("scheduler.on_trial_result", trial.trial_id, result)
        if (self.calls.ordinal[trial.trial_id], result.get("epoch")) == STOPPED_BY_SCHEDULER:
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        self.calls.add("scheduler.on_trial_complete", trial.trial_id, result)


class RecordingStopper(Stopper):
    def __init__(self, calls: Calls):
        self.calls = calls

    def __call__(self, trial_id: str, result: dict) -> bool:
        self.calls.add("stopper", trial_id, result)
        return (self.calls.ordinal[trial_id], result.get("epoch")) == STOPPED_BY_STOPPER

    def stop_all(self) -> bool:
        return False


class RecordingCallback(Callback):
    def __init__(self, calls: Calls):
        self.calls = calls

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        self.calls.add("callback.on_trial_result", trial.trial_id, result)

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self.calls.add("callback.on_trial_complete", trial.trial_id, None)


def _trainable(config: dict) -> None:
    for epoch in range(1, EPOCHS + 1):
        tune.report(_result(config["ordinal"], epoch))


def _tune_calls(tmp_path) -> list:
    calls = Calls()
    tuner = tune.Tuner(
        _trainable,
        tune_config=tune.TuneConfig(
            search_alg=RecordingSearcher(calls),
            scheduler=RecordingScheduler(calls),
            num_samples=len(CONFIGS),
            max_concurrent_trials=1,
        ),
        run_config=tune.RunConfig(
            stop=RecordingStopper(calls),
            callbacks=[RecordingCallback(calls)],
            storage_path=str(tmp_path / "ray"),
            verbose=0,
        ),
    )
    tuner.fit()
    return calls.seen


def _simulated_calls() -> list:
    calls = Calls()
    engine = Engine(
        SearchSession("order"),
        RecordingSearcher(calls),
        RecordingScheduler(calls),
        [RecordingCallback(calls)],
        [RecordingStopper(calls)],
    )

    def evaluate(config: dict, epoch: int):
        return _result(config["ordinal"], epoch), 1.0, epoch == EPOCHS

    simulate(engine, evaluate, workers=1)
    return calls.seen


@pytest.mark.slow
def test_the_replay_calls_the_hooks_in_the_order_a_real_tune_run_does(tmp_path):
    import os

    import ray

    here = os.path.dirname(__file__)  # Ray's workers import this module's trainable by name
    path = os.pathsep.join([here, os.path.dirname(here), os.environ.get("PYTHONPATH", "")])
    ray.init(
        address="local",  # a fresh local Ray, never another test process's (pytest-xdist runs two)
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    try:
        real = _tune_calls(tmp_path)
    finally:
        ray.shutdown()
    simulated = _simulated_calls()
    assert simulated == real, "\n".join(f"{a!s:50} {b!s}" for a, b in zip(real, simulated, strict=False))
    hooks = {hook for hook, _, _ in real}
    assert "searcher.on_trial_result" in hooks and ("stopper", 1, 2) in real  # every path was taken
