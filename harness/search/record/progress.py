"""The live progress line: a first line at once, then done k/N, counts, the front's best values, data wait and
an ETA that counts only the trials still to train, at every trial end and every minute; between them, a line
as a trial's epoch ends (at most one every ``_EPOCH_LINE_S`` seconds), and each epoch to ``run_search``'s
``on_epoch``."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from ray.tune import Callback

from dashboards.pareto import front_mask
from harness.output import format_number
from harness.search.result_keys import EPOCHS_KEY, NUMBER_KEY, STATUS_KEY
from harness.search.session import SearchSession, SessionBound
from harness.store import Store
from search_space.sampling import discrete_space_size
from search_space.spec import SearchSpec
from trials.config.data_config import DATA_STARVED_FRACTION, is_data_starved
from trials.config.trial_config import TrainingConfig
from trials.epoch_progress import EpochProgress
from trials.status import TrialStatus


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


def compact_number(value: float) -> str:
    """Three significant digits with an SI suffix from a thousand up (``93.1``, ``1.23M``, ``0.0042``):
    the line must stay one terminal line with several objectives on it, and FLOPs or parameter
    counts in full digits would not. The one number formatter's compact kind (tables show the same
    numbers in full: :func:`harness.output.format_number`)."""
    return format_number(value, "compact")


def compact_duration(seconds: float) -> str:
    """``42s``, ``4m05s``, ``2h07m``, ``3d04h``: the two largest units, which is all a watcher reads."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


_TRAINED = frozenset(status for status in TrialStatus if status.trained)  # what counts towards N


def planned_trials(spec: SearchSpec) -> int:
    """``N`` of the progress line's ``done k/N``: the trials the search will finish.

    ``search.n_trials`` is Tune's ``num_samples`` and the searcher's budget (``dispatched``): every
    trial a worker trains counts (completed, pruned by early stopping: it ended, so it is done;
    failed or diverged), and so does a warm start's reused result (a completed trial of this study
    that took a slot of the budget and no time). Infeasible and duplicate proposals never reach a
    worker and take no slot: the searcher stores them and asks again, so they come on top of
    ``n_trials``, never out of it. A discrete space with fewer configurations than ``n_trials``
    ends when every one has been tried (the searcher's ``_space_exhausted``), so ``N`` is the
    smaller of the two. A stop rule or a hopeless search may still end it earlier.
    """
    size = discrete_space_size(spec)
    return spec.search.n_trials if size is None else max(1, min(spec.search.n_trials, size))


DEFAULT_EPOCHS = TrainingConfig.__dataclass_fields__["epochs"].default  # a trial config's training.epochs


def planned_epochs(spec: SearchSpec) -> int | None:
    """A trial's budget in epochs as the spec's base says it (``training.epochs``; None under a
    ``training.steps`` budget): the progress line's ``E`` where a result does not carry its own
    (:data:`harness.search.result_keys.EPOCHS_KEY`; every worker of this version sends it, searched budgets too)."""
    epochs = spec.training.get("epochs", DEFAULT_EPOCHS)
    if spec.training.get("steps") is not None or isinstance(epochs, bool) or not isinstance(epochs, int):
        return None
    return epochs


def finished_trials(counts: Mapping[str, int]) -> int:
    """``k`` of ``done k/N``: the store's trials that count towards ``N`` and have ended
    (:attr:`TrialStatus.trained`: completed, reused, pruned, failed, diverged). Infeasible and
    duplicate rows are not among them, and an interrupted one runs again on resume."""
    return sum(n for status, n in counts.items() if status in _TRAINED)


class TrialLengths:
    """How long the search's next trial will take: an exponentially weighted mean of the wall times
    of the trials that ended in this driver process (their weight halves every ``half_life`` trials).

    Why a mean and not the median: the time left is the sum of the remaining trials' lengths, whose
    expectation is their count times the mean length. With early stopping the lengths are a mix of
    pruned (short) and full-length trials; the median sits on one mode and flips to the other when
    the mix crosses one half (an ETA that jumps by the ratio of the two lengths), and it ignores the
    long trials that hold most of the time left. Pruned and failed trials count at their real length,
    which is what they will keep doing. Why weighted: a search drifts (the sampler moves to larger or
    smaller models, more trials reach the late rungs), and the last few dozen trials say more about
    the next ones than the first did. With a half-life of 20 trials the newest weighs about a
    thirtieth of the whole (``1/n`` while fewer than that have ended), so one trial moves the
    estimate by about a thirtieth of its difference from it: a straggler or a trial that fails at
    once nudges the ETA, it does not make it jump. Kept incrementally: O(1) per trial at any size.
    """

    def __init__(self, half_life: float = 20.0):
        self.decay = 0.5 ** (1.0 / half_life)
        self.weighted = 0.0
        self.weight = 0.0
        self.count = 0

    def add(self, seconds: float) -> None:
        self.weighted = self.weighted * self.decay + max(0.0, seconds)
        self.weight = self.weight * self.decay + 1.0
        self.count += 1

    @property
    def typical(self) -> float | None:
        """The estimate in seconds; None before any trial has ended."""
        return self.weighted / self.weight if self.count else None


MIN_LEFT_S = 1.0  # the least time left a running trial (or a search with trials left) is given
OVERDUE_SHARE = 0.05  # a trial past its expected length has this share of that length left


def eta_seconds(remaining: int, trial_s: float | None, running_ages: Sequence[float], concurrency: int) -> float | None:
    """Seconds until the search's last trial ends: 0 with nothing left, None before any trial has
    ended, else positive (at least ``MIN_LEFT_S``): a line never says ``0s`` while a trial remains.

    ``remaining`` counts the trials still to finish, the running ones among them: ``N - k``
    (:func:`planned_trials`, :func:`finished_trials`; infeasible and duplicate proposals take no
    time and no slot). Each trial lasts ``trial_s`` (:class:`TrialLengths`). A running trial is
    credited with the time it has run, so it has ``trial_s - age`` left, but never less than
    ``OVERDUE_SHARE`` of ``trial_s`` (and ``MIN_LEFT_S``): one running past the typical length is
    late, not done. The trials not yet started fill the ``concurrency`` slots in turn as they free
    up; with equal lengths and every slot free within one length, that greedy schedule is a round
    robin over the slots in the order they free, so the estimate is closed-form (no simulation at
    100k trials).
    """
    if remaining <= 0:
        return 0.0
    if trial_s is None:
        return None
    overdue = max(MIN_LEFT_S, OVERDUE_SHARE * trial_s)
    slots = max(1, concurrency, len(running_ages))
    free_at = sorted([max(trial_s - age, overdue) for age in running_ages] + [0.0] * (slots - len(running_ages)))
    unstarted = max(0, remaining - len(running_ages))
    finish = free_at[-1] if running_ages else 0.0  # the running trials end
    for slot, at in enumerate(free_at):
        rounds = math.ceil((unstarted - slot) / slots) if unstarted > slot else 0
        finish = max(finish, at + rounds * trial_s)
    return max(finish, MIN_LEFT_S)


def epoch_eta_seconds(
    remaining: int,
    running: Sequence[tuple[float, float]],
    epoch_s: float | None,
    epochs: float | None,
    concurrency: int,
) -> float | None:
    """Seconds until the search's last trial ends, from epochs alone: the estimate before any trial has
    ended (:func:`eta_seconds` takes over once one has). 0 with nothing left; None before any epoch ended
    (``epoch_s`` None) or with no budget known (``epochs`` None); else at least ``MIN_LEFT_S``.

    ``remaining``: trials still to finish, the running ones among them (as for :func:`eta_seconds`).
    ``running``: per running trial, (epochs it has left, seconds since its last epoch ended, or since it
    started before its first). ``epoch_s``: wall seconds per epoch so far, a trial's start-up (worker,
    build, measurement, compile) spread over its epochs (:class:`EpochClock`), so a trial not yet started
    costs ``epochs * epoch_s`` with its start-up in it. ``epochs``: a trial's budget.

    The work left is the running trials' epochs (less what each has run of its current one, never below
    ``OVERDUE_SHARE`` of an epoch) plus every trial not yet started at ``epochs`` epochs, shared over the
    ``concurrency`` slots; never less than the longest running trial's part, nor one whole trial while one
    waits to start. It assumes every trial runs its whole budget: with early stopping it overestimates, until
    the first trial ends and the trials' real lengths take over.
    """
    if remaining <= 0:
        return 0.0
    if epoch_s is None or epochs is None:
        return None
    floor = max(MIN_LEFT_S, OVERDUE_SHARE * epoch_s)
    lefts = [max(left * epoch_s - since, floor) for left, since in running]
    unstarted = max(0, remaining - len(running))
    work = sum(lefts) + unstarted * epochs * epoch_s
    longest = max([*lefts, epochs * epoch_s if unstarted else 0.0])
    return max(work / max(1, concurrency), longest, MIN_LEFT_S)


@dataclass
class TrialEpochs:
    """One running trial's epochs as this driver saw them: when it started, the epoch it resumed from (a
    retry from a checkpoint), the last epoch it reported and when, and its budget (None: not said yet)."""

    started: float
    resumed_from: int = 0
    done: int = 0
    last_at: float | None = None
    budget: int | None = None

    def run(self) -> tuple[int, float]:
        """(epochs this attempt ran, seconds from its start to the last one's end)."""
        ran = self.done - self.resumed_from
        return (ran, self.last_at - self.started) if ran > 0 and self.last_at is not None else (0, 0.0)


class EpochClock:
    """What epochs have cost in this driver process: the trials running now and the totals of those that
    ended. ``epoch_s`` is the seconds from each trial's start to its last reported epoch, summed, over the
    epochs they ran: a trial's start-up counts, spread over its epochs (what a trial not yet started will
    pay too), and a long trial weighs by its epochs. O(running trials) per reading."""

    def __init__(self) -> None:
        self.running: dict[Any, TrialEpochs] = {}
        self.ended_epochs = 0
        self.ended_s = 0.0
        self.budget_sum = 0  # the budgets the trials reported (their mean: a trial not yet started), kept as a sum
        self.budget_count = 0

    def start(self, trial_id: Any, now: float) -> None:
        self.running[trial_id] = TrialEpochs(now)

    def epoch(self, trial_id: Any, epoch: int, budget: int | None, resumed_from: int, now: float) -> bool:
        """Trial ``trial_id`` ended ``epoch`` at ``now``; False where it is no new epoch (a trial's last
        result repeats its last epoch with its outcome; a trial this driver did not see start)."""
        trial = self.running.get(trial_id)
        if trial is None or epoch <= trial.done:
            return False
        if trial.done == 0:
            trial.resumed_from = max(0, min(resumed_from, epoch - 1))
        if budget is not None and trial.budget is None:
            trial.budget = budget
            self.budget_sum += budget
            self.budget_count += 1
        trial.done, trial.last_at = epoch, now
        return True

    def end(self, trial_id: Any) -> None:
        trial = self.running.pop(trial_id, None)
        if trial is not None:
            ran, seconds = trial.run()
            self.ended_epochs += ran
            self.ended_s += seconds

    @property
    def seen(self) -> int:
        """Epochs ended in this driver process."""
        return self.ended_epochs + sum(t.run()[0] for t in self.running.values())

    @property
    def epoch_s(self) -> float | None:
        seen = self.seen
        if not seen:
            return None
        return (self.ended_s + sum(t.run()[1] for t in self.running.values())) / seen

    def budget(self, default: int | None) -> float | None:
        """A trial's budget in epochs: the mean of those the trials reported, else ``default`` (the spec's)."""
        return self.budget_sum / self.budget_count if self.budget_count else default

    def left(self, now: float, default: int | None) -> list[tuple[float, float]]:
        """Per running trial: (epochs it has left, seconds since its last epoch ended, or it started)."""
        typical = self.budget(default) or 0.0
        out = []
        for trial in self.running.values():
            budget = trial.budget if trial.budget is not None else typical
            since = now - (trial.last_at if trial.last_at is not None else trial.started)
            out.append((max(0.0, budget - trial.done), since))
        return out


def eta_text(eta: float | None) -> str:
    """``?`` before a trial has ended, ``0s`` when nothing is left, ``<1m`` for less than a minute
    (the estimate is not good to the second, and a countdown that stops at a late trial would lie),
    else the two largest units (``12m30s``)."""
    if eta is None:
        return "?"
    if eta <= 0:
        return "0s"
    return "<1m" if eta < 60 else compact_duration(eta)


def best_values(outcomes: pd.DataFrame, objectives: Mapping[str, str]) -> dict[str, float]:
    """The best value of each objective over the completed trials (by its direction); an objective
    no completed trial has a finite value for is left out."""
    if len(outcomes) == 0 or "status" not in outcomes:
        return {}
    completed = outcomes[outcomes["status"] == TrialStatus.COMPLETED]
    best = {}
    for name, direction in objectives.items():
        if name not in completed:
            continue
        values = pd.to_numeric(completed[name], errors="coerce").to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        if values.size:
            best[name] = float(values.max() if direction == "max" else values.min())
    return best


class ProgressCallback(SessionBound, Callback):
    """A first line as soon as Tune starts, then one status line per finished trial: done k/N /
    running / completed / pruned / failed / infeasible / duplicate / front size / best value of each
    objective / elapsed time / ETA.

    The first line (``[study] starting: done 0/N, ...; Ray is up ...``) comes from :meth:`setup`,
    which Tune calls once Ray is up and before any trial starts (a second or two after Ray's own
    start-up): the first trial's line comes only once it has started a worker, compiled and trained
    (half a minute or more), and until then a search that said nothing looked hung. Nothing is
    printed before Ray is up: a search refused there (no cluster at ``--address``, a wrong token,
    resources no node has) is one line, the reason. ``done k/N``: ``k`` trials of ``N`` have ended
    (:func:`finished_trials`, :func:`planned_trials`); infeasible and duplicate proposals come on
    top of ``N`` and have their own counts.

    ``running`` is the number of trials Ray runs, counted from Tune's own trial start and end
    events, not from the store's ``running`` rows: this callback runs after :class:`StoreCallback`
    has recorded the ending trial, and before Ray starts its successor, so the store then holds
    one running row fewer than the search's concurrency, on every line (``concurrency: 2`` read
    ``running 1`` throughout). A line at a trial's end still shows the others (its successor
    starts a moment later), so while trials run and none ends a line comes every
    ``_HEARTBEAT_S`` seconds: a search whose trials take minutes is seen running all of them, and
    its elapsed time and ETA move.

    The counts are COUNT queries (cheap at any size); the front needs every trial's objectives,
    so it is refreshed at most once a second (``_FRONT_MIN_INTERVAL_S``: trials of a fast search
    end many times a second, and a front query per end was a third of the driver's own time per
    trial), and on a large study at most once per ``_FRONT_REFRESH_FACTOR`` times the seconds its
    last refresh took. The best values come from the same query, so both show the last known
    reading meanwhile; the search's closing summary prints the exact front. The progress line
    never costs more than a few percent of the driver's time, even at 100k trials. A trial with
    data-starved epochs (more than ``DATA_STARVED_FRACTION`` of an epoch spent waiting for
    batches) says so on its line, counted from the epoch results Tune hands this callback (no
    store query). The ETA (:func:`eta_seconds`) uses the lengths of the trials that ended in this
    driver process (:class:`TrialLengths`), timed from their start to their end as Tune reports
    them on ``clock`` (the search session's: the wall's, or a replay's simulated one), and the
    concurrency Ray actually reached. Before any trial has ended it comes from the epochs that have
    (:func:`epoch_eta_seconds`), shown as ``eta ~4m10s (from 3 epochs)``: an estimate that assumes every
    trial runs its budget; ``eta ?`` only until the first epoch of any trial ends.

    Between the status lines, an epoch line (``[study] trial 3 epoch 2/5  loss 1.23  top1 45.6%  1m05s in
    elapsed 4m05s  eta ~6m (from 5 epochs)``) when a trial's epoch ends, at most one every
    ``_EPOCH_LINE_S`` seconds over the whole search, the freshest epoch, never queued. Why that rule: a
    trial of hours shows its epochs (every one, with epochs longer than the limit), a small search's
    short epochs never scroll the status lines away, and a cluster's hundred concurrent trials give six
    lines a minute, not hundreds. A trial's last epoch gets no epoch line: its trial-end line follows at
    once. The same epochs, every one, go to ``run_search``'s ``on_epoch`` through the session
    (:meth:`SearchSession.epoch_ended`), as :class:`trials.epoch_progress.EpochProgress` records: they
    come from the epoch results Tune hands this callback in the driver, as the line's do.
    """

    _FRONT_REFRESH_FACTOR = 20.0
    _FRONT_MIN_INTERVAL_S = 1.0
    _HEARTBEAT_S = 60.0
    _EPOCH_LINE_S = 10.0

    def __init__(
        self,
        store_url: str,
        study: str,
        objectives: dict[str, str],
        stream=None,
        *,
        n_trials: int | None = None,
        concurrency: int = 1,
        session: SearchSession | None = None,
        clock: Callable[[], float] | None = None,
        epochs: int | None = None,
    ):
        self.session = session
        self.epochs = epochs  # the spec's budget, for results that do not say theirs (an older worker's)
        self.store_url = store_url
        self.study = study
        self.objectives = objectives
        self.stream = stream
        self.n_trials = n_trials
        self.concurrency = max(1, concurrency)
        self.clock = clock  # None: the wall's (time.monotonic)
        self._store = None
        self._front_size: int | None = None
        self._best: dict[str, float] = {}
        self._front_due = 0.0
        self._data_wait: dict[str, DataWait] = {}
        self._reset_timing()

    def _reset_timing(self) -> None:
        """What this driver process saw: a resumed search counts its elapsed time and trial lengths anew."""
        self._started: float | None = None
        self._last_line: float | None = None
        self._running: dict[str, float] = {}  # Tune trial id -> when Tune started it
        self._lengths = TrialLengths()
        self._peak_running = 0
        self._epoch_clock = EpochClock()
        self._last_epoch_line: float | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = {
            **self.__dict__, "_store": None, "stream": None, "_front_size": None, "_best": {}, "_front_due": 0.0,
            "_data_wait": {}, "clock": None,
        }  # fmt: skip
        state.update(_started=None, _last_line=None, _running={}, _lengths=TrialLengths(), _peak_running=0,
                     _epoch_clock=EpochClock(), _last_epoch_line=None)  # fmt: skip
        return self._unbound_state(state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        if "_durations" in state:  # pickled by an older archsearch (a resumed experiment)
            del state["_durations"]
            state["_lengths"] = TrialLengths()
        state.setdefault("clock", None)
        state.setdefault("epochs", None)  # pickled before epoch lines
        state.setdefault("_epoch_clock", EpochClock())
        state.setdefault("_last_epoch_line", None)
        super().__setstate__(state)

    def _now(self) -> float:
        now = self.clock() if self.clock is not None else time.monotonic()
        if self._started is None:
            self._started = now
        return now

    def setup(self, **info: Any) -> None:
        """Tune starts: the search's clock starts with it, and the first line says so at once."""
        now = self._now()
        if self._session().stop_request is None:
            self._print(self._safe_line(self._starting_line), now)

    def _starting_line(self) -> str:
        """``[study] starting: done 0/20, up to 2 trials at a time; Ray is up ...``: no trial has started
        yet (``resuming: done 7/20`` where the store holds finished trials of this study)."""
        k = finished_trials(self._open_store().counts(self.study, epochs=False))
        slots = f"up to {self.concurrency} trial{'s' if self.concurrency > 1 else ''} at a time"
        return (
            f"[{self.study}] {'resuming' if k else 'starting'}: done {self._done(k)}, {slots}; Ray is up, the first "
            "trials are starting (a worker starts and compiles before a trial's first epoch; a line comes as each "
            "trial ends, and every minute)"
        )

    def _done(self, k: int) -> str:
        return f"{k}/{self.n_trials}" if self.n_trials is not None else str(k)

    def on_trial_start(self, iteration: int, trials: list, trial, **info: Any) -> None:
        now = self._now()
        self._running[tune_trial_id(trial)] = now
        self._epoch_clock.start(tune_trial_id(trial), now)
        self._peak_running = max(self._peak_running, len(self._running))

    def on_trial_recover(self, iteration: int, trials: list, trial, **info: Any) -> None:
        self._running.pop(tune_trial_id(trial), None)  # retried: Tune starts it again (on_trial_start)
        self._epoch_clock.end(tune_trial_id(trial))

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info: Any) -> None:
        if result.get("epoch"):
            self._data_wait.setdefault(trial.trial_id, DataWait()).add(result)
            self._epoch_ended(tune_trial_id(trial), result)

    def _epoch_ended(self, trial_id: Any, result: dict) -> None:
        """A new epoch of a running trial: timed for the ETA, handed to ``on_epoch``, and its line when due."""
        status = result.get(STATUS_KEY)
        if status not in (None, TrialStatus.COMPLETED):  # a failed trial's last result repeats its last epoch
            return
        now = self._now()
        epoch, budget = int(result["epoch"]), _positive_int(result.get(EPOCHS_KEY))
        if not self._epoch_clock.epoch(trial_id, epoch, budget, _positive_int(result.get("resumed_from_epoch")) or 0,
                                       now):  # fmt: skip
            return
        started = self._epoch_clock.running[trial_id].started
        record = EpochProgress(
            trial=_positive_int(result.get(NUMBER_KEY), allow_zero=True),
            epoch=epoch,
            epochs=budget if budget is not None else self.epochs,
            train_loss=_float(result.get("train_loss")),
            top1=_float(result.get("top1")),
            epoch_s=_float(result.get("epoch_time")),
            elapsed_s=now - started,
        )
        session = self._session()
        session.epoch_ended(record)
        due = self._last_epoch_line is None or now - self._last_epoch_line >= self._EPOCH_LINE_S
        if status is None and due and session.stop_request is None:
            self._last_epoch_line = now
            print(self._safe_line(lambda: self._epoch_line(record)), file=self.stream or sys.stderr, flush=True)

    def _epoch_line(self, record: EpochProgress) -> str:
        """``[study] trial 3 epoch 2/5  loss 1.23  top1 45.6%  1m05s in  elapsed 4m05s  eta ~6m (from 5 epochs)``."""
        of = f"/{record.epochs}" if record.epochs is not None else ""
        counts = self._open_store().counts(self.study, epochs=False)
        return (
            f"[{self.study}] trial {record.trial} epoch {record.epoch}{of}  loss {compact_number(record.train_loss)}"
            f"  top1 {record.top1:.1f}%  {compact_duration(record.elapsed_s)} in  {self._timing(counts, self._now())}"
        )

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """The heartbeat: a line when trials run and none has ended for ``_HEARTBEAT_S`` seconds."""
        if not self._running or self._session().stop_request is not None:
            return
        now = self._now()
        if now - (self._last_line if self._last_line is not None else self._started) < self._HEARTBEAT_S:
            return
        self._print(self._safe_line(lambda: self._line(at_trial_end=False)), now)

    def _front(self) -> int:
        now = time.monotonic()
        if self._front_size is None or now >= self._front_due:
            outcomes = self._store.outcomes(self.study, list(self.objectives), strict=False)
            self._front_size = int(front_mask(outcomes, self.objectives).sum())
            self._best = best_values(outcomes, self.objectives)
            took = time.monotonic() - now
            self._front_due = now + max(self._FRONT_MIN_INTERVAL_S, self._FRONT_REFRESH_FACTOR * took)
        return self._front_size

    def eta(self, counts: Mapping[str, int], now: float) -> float | None:
        """Seconds left (:func:`eta_seconds`) for the store's ``counts`` at ``now``; None without ``n_trials``
        or before a trial has ended."""
        if self.n_trials is None:
            return None
        concurrency = min(self.concurrency, max(self._peak_running, 1))  # fewer where Ray's resources allow fewer
        return eta_seconds(
            max(self.n_trials - finished_trials(counts), len(self._running)),  # a running trial is never done
            self._lengths.typical,
            [now - at for at in self._running.values()],
            concurrency,
        )

    def epoch_eta(self, counts: Mapping[str, int], now: float) -> float | None:
        """Seconds left from the epochs alone (:func:`epoch_eta_seconds`), for before any trial has ended."""
        if self.n_trials is None:
            return None
        clock = self._epoch_clock
        concurrency = min(self.concurrency, max(self._peak_running, 1))
        remaining = max(self.n_trials - finished_trials(counts), len(self._running))
        return epoch_eta_seconds(
            remaining, clock.left(now, self.epochs), clock.epoch_s, clock.budget(self.epochs), concurrency
        )

    def _timing(self, counts: Mapping[str, int], now: float) -> str:
        """``elapsed 4m05s  eta 12m30s``: before any trial has ended ``eta ~12m (from 3 epochs)``, an estimate
        from the epochs, and ``eta ?`` until an epoch has ended; none without ``n_trials``."""
        elapsed = f"elapsed {compact_duration(now - (self._started if self._started is not None else now))}"
        if self.n_trials is None:
            return elapsed
        seen = self._epoch_clock.seen
        if self._lengths.typical is None and seen:
            eta = self.epoch_eta(counts, now)
            if eta is not None:
                text = eta_text(eta)
                approx = "" if text.startswith("<") or eta <= 0 else "~"
                return f"{elapsed}  eta {approx}{text} (from {seen} epoch{'s' if seen > 1 else ''})"
        return f"{elapsed}  eta {eta_text(self.eta(counts, now))}"

    def _open_store(self) -> Store:
        if self._store is None:
            self._store = Store.open(self.store_url)
        return self._store

    def _line(self, *, at_trial_end: bool = True) -> str:
        store = self._open_store()
        now = self._now()
        counts = store.counts(self.study, epochs=False)
        if at_trial_end:
            self._session().refresh_plateau()  # the plateau reading that counts this trial end
        front = self._front()
        best = "  ".join(
            f"{direction} {name} {compact_number(self._best[name])}"
            for name, direction in self.objectives.items()
            if name in self._best
        )
        completed, pruned = counts[TrialStatus.COMPLETED], counts[TrialStatus.PRUNED]
        failed = counts[TrialStatus.FAILED] + counts[TrialStatus.DIVERGED]
        infeasible, duplicate = counts[TrialStatus.INFEASIBLE], counts[TrialStatus.DUPLICATE]
        return (
            f"[{self.study}] done {self._done(finished_trials(counts))}  running {len(self._running)}  "
            f"completed {completed}  pruned {pruned}  failed {failed}  infeasible {infeasible}  "
            f"duplicate {duplicate}  "
            f"pareto front {front}"
            + (f"  best {best}" if best else "")
            + f"  {self._timing(counts, now)}"
            + (f"  {note}" if (note := self._session().rule_note) else "")
        )

    def _safe_line(self, make: Callable[[], str] | None = None) -> str:
        try:
            return (make or self._line)()
        except Exception as error:  # progress display must never fail a trial
            return f"[{self.study}] (progress unavailable: {type(error).__name__}: {error})"

    def _print(self, line: str, now: float) -> None:
        self._last_line = now
        print(line, file=self.stream or sys.stderr, flush=True)

    def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
        trial_id = tune_trial_id(trial)
        data_wait = self._data_wait.pop(trial_id, None) or DataWait()
        now = self._now()
        started = self._running.pop(trial_id, None)
        self._epoch_clock.end(trial_id)
        if started is not None:
            self._lengths.add(now - started)
        if self._session().stop_request is not None:  # stopping: the one line that says why comes at the end
            return
        line = self._safe_line()
        if note := data_wait.note():
            line += f"  {note}"
        self._print(line, now)

    on_trial_error = on_trial_complete


def _positive_int(value: Any, *, allow_zero: bool = False) -> int | None:
    """A count from a result (an epoch budget, a trial number), or None where it is missing or not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    if not math.isfinite(value) or int(value) != value or value < (0 if allow_zero else 1):
        return None
    return int(value)


def _float(value: Any) -> float:
    """A metric from a result as a float (NaN where it is missing)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def tune_trial_id(trial) -> str | None:
    """Tune's id of a trial (None for the bare calls of a unit test: one anonymous trial)."""
    return getattr(trial, "trial_id", None)
