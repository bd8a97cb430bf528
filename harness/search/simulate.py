"""A search's engine under a simulated clock: the replay of a search against looked-up results.

Syne Tune's simulator backend runs its real scheduler loop with tabulated results that return their
time instead of spending it; this is the same for archsearch. :func:`simulate` drives the hooks that
:func:`harness.search.engine.build_engine` builds for a search (the searcher with its initial design
and duplicate handling, the early-stopping scheduler, the store writer, the stoppers) in the order Ray
Tune's loop calls them, with ``workers`` trials running asynchronously: each epoch's result comes from
``evaluate`` with the seconds it took, and the session's clock advances to the moment it ends. Nothing
trains and no Ray process starts. ``benchmarks.search_quality`` measures search methods with it.

Order per event, as Tune's controller does it (``TuneController._process_trial_result``): a result goes
to the stoppers first (``stopper(trial_id, result)``, the first that says stop wins); only if none
stopped it, to the scheduler (CONTINUE or STOP); only if the trial goes on, to the searcher
(``on_trial_result``); then to the callbacks. A trial that ends (its last epoch or a STOP) goes to the
scheduler, the searcher and the callbacks (``on_trial_complete``, as ``stop_trial``), a trial that ran
to its end after the stoppers see its last result once more (a returning function trainable's
``done`` flush); then
``stop_all()`` of every stopper, then free slots are filled by asking the searcher (a ``None``
suggestion, as in Tune: nothing now, asked again after the next event; ``FINISHED``: never again).
``tests/test_simulate_order.py`` records a real Tune run's hook calls and this loop's on the same
trials and requires the same sequence.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray.tune.schedulers import TrialScheduler
from ray.tune.search import Searcher

from harness.search.engine import Engine
from harness.search.result_keys import RESUME_KEY
from harness.search.stop.early_stopping import TIME_ATTR


@dataclass(eq=False)
class SimulatedTrial:
    """What the hooks read of a Ray Tune trial (identity, config, last result), for a simulated one."""

    trial_id: str
    config: dict[str, Any]
    last_result: dict[str, Any] = field(default_factory=dict)
    status: str = "RUNNING"  # Ray's own trial states (RUNNING, TERMINATED), not archsearch's statuses
    error_file: str | None = None

    def __hash__(self) -> int:
        return hash(self.trial_id)


# (config the searcher dispatched, epoch starting at 1) -> (the epoch's result, its seconds, whether it
# is the trial's last epoch); the last result carries the trial's outcome mark as a trainable's does.
Evaluate = Callable[[dict[str, Any], int], tuple[dict[str, Any], float, bool]]


def resumed_after(config: dict[str, Any]) -> int:
    """The epoch a dispatched trial resumes after (a pruned configuration run again continues from its
    checkpoint: :data:`~harness.search.result_keys.RESUME_KEY`); 0 for a trial that starts afresh."""
    resume = config.get(RESUME_KEY)
    return int(resume["epoch"]) if isinstance(resume, dict) and resume.get("epoch") else 0


@dataclass
class SimulatedRun:
    """What the loop did: epochs spent, the simulated seconds, and each trial as it ended."""

    epochs: int = 0
    seconds: float = 0.0
    ended: list[tuple[SimulatedTrial, dict[str, Any], bool]] = field(default_factory=list)  # (trial, result, stopped)
    stopped_by: str | None = None  # "stoppers", "searcher" (finished), "budget"


class SimulatedClock:
    """The replay's clock: the session reads it (``max_hours``); the loop moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(
    engine: Engine,
    evaluate: Evaluate,
    *,
    workers: int,
    budget_epochs: int | None = None,
    clock: SimulatedClock | None = None,
    on_end: Callable[[SimulatedTrial, dict[str, Any], bool, int], None] | None = None,
) -> SimulatedRun:
    """Run the engine's search to its end (the searcher finished, a stopper, or ``budget_epochs``).

    ``clock``: the clock the engine's session was created with (its time is moved here); ``on_end``:
    called as each trial ends, with its last result, whether the scheduler stopped it, and the epochs
    spent so far.

    Long because Tune's loop is one event loop whose steps (start an epoch, fill slots, end a trial) share its state
    as closures; apart, they would pass that state around.
    """
    searcher, scheduler, callbacks, stoppers = engine.searcher, engine.scheduler, engine.callbacks, engine.stoppers
    clock = clock or SimulatedClock()
    run = SimulatedRun()
    trials: list[SimulatedTrial] = []
    events: list[tuple[float, int, str]] = []  # (simulated time the epoch ends, order, trial id)
    running: dict[str, tuple[SimulatedTrial, int]] = {}  # trial id -> (trial, epoch in progress)
    pending: dict[str, tuple[dict[str, Any], bool]] = {}  # trial id -> (result of the epoch in progress, last)
    counter = 0
    exhausted = False

    for callback in callbacks:
        callback.setup(stop=None, num_samples=None, total_num_samples=None)

    def start_epoch(trial: SimulatedTrial, epoch: int) -> None:
        nonlocal counter
        result, seconds, last = evaluate(trial.config, epoch)
        pending[trial.trial_id] = ({**result, TIME_ATTR: epoch, "epoch": epoch}, last)
        running[trial.trial_id] = (trial, epoch)
        heapq.heappush(events, (clock.now + float(seconds), counter, trial.trial_id))
        counter += 1

    def fill() -> None:
        nonlocal exhausted, counter
        while not exhausted and len(running) < workers:
            trial_id = f"sim_{len(trials):05d}"
            config = searcher.suggest(trial_id)
            if config is None:  # nothing now (a running trial may change that): asked again after the next event
                return
            if config == Searcher.FINISHED:
                exhausted = True
                return
            trial = SimulatedTrial(trial_id, dict(config))
            trials.append(trial)
            if scheduler is not None:
                scheduler.on_trial_add(None, trial)
            for callback in callbacks:
                callback.on_trial_start(iteration=counter, trials=trials, trial=trial)
            start_epoch(trial, resumed_after(trial.config) + 1)

    def end(trial: SimulatedTrial, result: dict[str, Any], stopped: bool) -> None:
        del running[trial.trial_id]
        trial.status = "TERMINATED"
        if scheduler is not None:
            scheduler.on_trial_complete(None, trial, result)
        searcher.on_trial_complete(trial.trial_id, result)
        for callback in callbacks:
            callback.on_trial_complete(iteration=counter, trials=trials, trial=trial)
        run.ended.append((trial, result, stopped))
        if on_end is not None:
            on_end(trial, result, stopped, run.epochs)

    fill()
    while events:
        if budget_epochs is not None and run.epochs >= budget_epochs:
            run.stopped_by = "budget"
            break
        clock.now, _, trial_id = heapq.heappop(events)
        trial, epoch = running[trial_id]
        result, last = pending.pop(trial_id)
        run.epochs += 1
        trial.last_result = result
        if any(stopper(trial_id, result) for stopper in stoppers):
            decision = TrialScheduler.STOP
        elif scheduler is not None:
            decision = scheduler.on_trial_result(None, trial, result)
        else:
            decision = TrialScheduler.CONTINUE
        if decision != TrialScheduler.STOP:
            searcher.on_trial_result(trial_id, result)
        for callback in callbacks:
            callback.on_trial_result(iteration=counter, trials=trials, trial=trial, result=result)
        if last and decision != TrialScheduler.STOP:
            # A function trainable that returns sends Tune its last result again, marked done: the
            # stoppers see it (the trial ends whatever they say); nothing else does.
            any(stopper(trial_id, {**result, "done": True}) for stopper in stoppers)
            end(trial, result, stopped=False)
        elif last:
            end(trial, result, stopped=False)
        elif decision == TrialScheduler.STOP:
            end(trial, result, stopped=True)
        else:
            start_epoch(trial, epoch + 1)
        if any(stopper.stop_all() for stopper in stoppers):
            run.stopped_by = "stoppers"
            break
        fill()
    else:
        run.stopped_by = "searcher"
    for callback in callbacks:
        callback.on_experiment_end(trials=trials)
    run.seconds = clock.now
    return run
