"""``on_epoch``: what a user's per-epoch callback gets, and the rule that its errors never stop a trial or a search.

``run_trial(config, on_epoch=f)`` calls ``f`` in the trial's process after every epoch;
``run_search(..., on_epoch=f)`` calls it in the driver's process from the epoch results Ray Tune hands
the driver (never pickled into a worker). Both hand it one :class:`EpochProgress`: a small, frozen,
typed record, the same from both sides, so one function serves a single trial and a search.

Why a callback that cannot stop anything: a progress display or a notebook's live plot is a watcher.
``run_trial``'s ``callback`` (the trainer's, which may return True to stop) stays the way to act on a trial.
Why a failing callback does not kill the run: a typo in a plotting function found after three hours of a
search would otherwise throw the search away (in a search, Ray Tune would abort ``fit()``). The first error
is a warning naming the callback and the error; later ones are counted silently, and the callback keeps
being called (a transient error, a closed figure, may pass). No module of torch is imported here: the
driver imports this too.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class EpochProgress:
    """One finished epoch of one trial, for a watcher.

    ``trial``: the trial's number in its study (a search), or None (``run_trial`` alone). ``epoch`` of
    ``epochs``: epochs are counted from 1; ``epochs`` is the trial's budget (None where the driver does not
    know it: a result from an older worker). ``train_loss``: the epoch's mean training loss; ``top1``: the
    validation top-1 accuracy in percent after it. ``epoch_s``: the epoch's training seconds (the trainer's
    ``epoch_time``: evaluation and checkpoints not included); ``elapsed_s``: seconds since the trial
    started (its build, measurement and compile included), on the clock of whoever calls back.
    """

    trial: int | None
    epoch: int
    epochs: int | None
    train_loss: float
    top1: float
    epoch_s: float
    elapsed_s: float


OnEpoch = Callable[[EpochProgress], object]


def check_on_epoch(on_epoch: object, where: str) -> OnEpoch | None:
    """``on_epoch`` as given, or a ``TypeError`` naming ``where``'s argument when it is not callable."""
    if on_epoch is not None and not callable(on_epoch):
        raise TypeError(f"{where}: on_epoch must be a callable taking an EpochProgress, not {type(on_epoch).__name__}")
    return on_epoch


class GuardedCallback:
    """A user's ``on_epoch``, called so that its errors never end the trial or search it watches: the first is
    a ``RuntimeWarning`` naming the callback and the error, the rest are counted (``errors``) and not repeated.
    ``KeyboardInterrupt`` and other ``BaseException`` s pass through: a Ctrl-C inside it still stops."""

    def __init__(self, on_epoch: OnEpoch):
        self.on_epoch = on_epoch
        self.errors = 0

    def __call__(self, record: EpochProgress) -> None:
        try:
            self.on_epoch(record)
        except Exception as error:  # a watcher's failure, not the trial's
            self.errors += 1
            if self.errors == 1:
                name = getattr(self.on_epoch, "__qualname__", None) or type(self.on_epoch).__name__
                text = " ".join(str(error).split())[:300]
                warnings.warn(
                    f"on_epoch callback {name} raised {type(error).__name__}: {text} (at epoch {record.epoch}"
                    f"{'' if record.trial is None else f' of trial {record.trial}'}); the run goes on, and further "
                    "errors from it are not reported",
                    RuntimeWarning,
                    stacklevel=2,
                )
